// Autograd's engine: grad mode, the Tensor methods of tensorwire/autograd.h, recording ops on
// the tape and the backward traversal (see api/autograd.h for the data model). The backward
// rules of the ops are in api/grad_rules.cc.
#include "api/autograd.h"

#include <algorithm>
#include <atomic>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "api/sink.h"
#include "tensorwire/autograd.h"

namespace tw {

using autograd::AutogradMeta;
using autograd::BackwardFn;
using autograd::Node;
using detail::TensorImpl;

namespace {

thread_local bool t_grad_enabled = true;
thread_local DType t_autocast = kF32;  // autocast(): kBF16 inside a scope
std::atomic<uint64_t> g_node_seq{0};

TensorImpl& impl_ref(const Tensor& t, const char* what) {
  if (!t.defined())
    throw Error(std::string(what) + ": the tensor is undefined (default-constructed)");
  return *t.impl();
}

}  // namespace

Tensor autograd::alias_of(const Tensor& t) {
  TensorImpl& impl = *t.impl();
  if (!impl.shared_owner) {
    auto owner = std::make_shared<detail::IdOwner>();  // (a temporary IdOwner would drop the id)
    owner->sink = impl.sink;
    owner->id = impl.id;
    impl.shared_owner = std::move(owner);
  }
  auto a = std::make_shared<TensorImpl>();
  a->sink = impl.sink;
  a->id = impl.id;
  a->meta = impl.meta;
  a->shared_owner = impl.shared_owner;
  return Tensor(std::move(a));
}

// ---- grad mode ----
bool is_grad_enabled() { return t_grad_enabled; }

AutocastGuard::AutocastGuard(DType dtype) : previous_(t_autocast) {
  if (dtype != kF32 && dtype != kBF16) {
    throw Error("autocast: dtype " + std::string(dtype_name(dtype)) +
                " is not supported (kBF16 to compute matmul and Linear in bf16, kF32 for off)");
  }
  t_autocast = dtype;
}
AutocastGuard::~AutocastGuard() { t_autocast = previous_; }
DType autocast_dtype() { return t_autocast; }
void set_grad_enabled(bool enabled) { t_grad_enabled = enabled; }

// ---- Tensor methods ----
Tensor& Tensor::set_requires_grad(bool requires_grad) {
  TensorImpl& impl = impl_ref(*this, "set_requires_grad");
  if (impl.autograd && impl.autograd->grad_fn) {
    throw Error(
        "set_requires_grad: only leaf tensors can change requires_grad; this one was computed by " +
        impl.autograd->grad_fn->name + " (use detach() for a leaf copy)");
  }
  if (requires_grad && !autograd::grad_dtype(impl.meta.dtype)) {
    throw Error("set_requires_grad: only f32 and f64 tensors can require gradients, this one is " +
                std::string(dtype_name(impl.meta.dtype)));
  }
  if (!impl.autograd) {
    if (!requires_grad) return *this;
    impl.autograd = std::make_shared<AutogradMeta>();
  }
  impl.autograd->requires_grad = requires_grad;
  return *this;
}

bool Tensor::requires_grad() const {
  return defined() && impl_->autograd && impl_->autograd->requires_grad;
}

bool Tensor::is_leaf() const { return !defined() || !impl_->autograd || !impl_->autograd->grad_fn; }

Tensor Tensor::grad() const {
  const TensorImpl& impl = impl_ref(*this, "grad");
  return impl.autograd ? impl.autograd->grad : Tensor();
}

void Tensor::set_grad(const Tensor& grad) {
  TensorImpl& impl = impl_ref(*this, "set_grad");
  if (grad.defined() && (grad.shape() != impl.meta.shape || grad.dtype() != impl.meta.dtype)) {
    throw Error("set_grad: the gradient " + meta_str({grad.shape(), grad.dtype()}) +
                " must have the tensor's shape and dtype " + meta_str(impl.meta));
  }
  if (grad.defined() && grad.device() != device()) {
    throw Error("set_grad: the gradient is on " + grad.device().str() + ", the tensor on " +
                device().str());
  }
  if (!impl.autograd) impl.autograd = std::make_shared<AutogradMeta>();
  impl.autograd->grad = grad.defined() && !grad.is_leaf() ? grad.detach() : grad;
}

void Tensor::zero_grad() {
  TensorImpl& impl = impl_ref(*this, "zero_grad");
  if (impl.autograd) impl.autograd->grad = Tensor();
}

void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  autograd::run_backward({*this}, {grad}, retain_graph);
}

Tensor Tensor::detach() const {
  impl_ref(*this, "detach");
  return autograd::alias_of(*this);
}

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
              bool retain_graph) {
  autograd::run_backward(roots, grads, retain_graph);
}

namespace autograd {

bool needs_record(std::span<const Tensor* const> inputs) {
  if (!t_grad_enabled) return false;
  for (const Tensor* t : inputs) {
    if (t->requires_grad()) return true;
  }
  return false;
}

namespace {

// out's node: `fn` with one edge per input (to its node, or to a leaf's meta).
void attach_node(std::string name, std::span<const Tensor* const> inputs, Tensor& out,
                 BackwardFn fn) {
  auto node = std::make_shared<Node>();
  node->name = std::move(name);
  node->seq = g_node_seq.fetch_add(1, std::memory_order_relaxed);
  node->next.reserve(inputs.size());
  for (const Tensor* t : inputs) {
    autograd::Edge e;
    if (t->requires_grad()) {
      const auto& meta = t->impl()->autograd;
      if (meta->grad_fn) {
        e.fn = meta->grad_fn;
      } else {
        e.leaf = meta;
      }
      e.meta = t->impl()->meta;
    }
    node->next.push_back(std::move(e));
  }
  node->backward = std::move(fn);
  auto meta = std::make_shared<AutogradMeta>();
  meta->requires_grad = true;
  meta->grad_fn = std::move(node);
  out.impl()->autograd = std::move(meta);
}

}  // namespace

void record(const ir::Op& op, std::span<const Tensor* const> inputs, Tensor& out) {
  if (!grad_dtype(out.dtype())) return;
  RuleInputs ri;
  ri.out = &out;
  for (const Tensor* t : inputs) {
    ri.in.push_back(*t);
    ri.needs.push_back(t->requires_grad());
  }
  BackwardFn fn = backward_rule(op, ri);
  if (!fn) return;
  attach_node(ir::op_name(op), inputs, out, std::move(fn));
}

void record_composite(std::string name, std::span<const Tensor* const> inputs, Tensor& out,
                      BackwardFn fn) {
  if (!needs_record(inputs) || !grad_dtype(out.dtype())) return;
  attach_node(std::move(name), inputs, out, std::move(fn));
}

// ================================ the engine ================================
namespace {

void accumulate(Tensor& into, const Tensor& g) { into = into.defined() ? into + g : g; }

// A gradient for an input must have its shape; the dtype follows the input's (a mixed f32/f64
// op computes in f64).
Tensor fit(const Tensor& g, const autograd::Edge& e, const Node& node) {
  if (g.shape() != e.meta.shape) {
    throw Error("backward: " + node.name + " produced a gradient of shape " + shape_str(g.shape()) +
                " for an input of shape " + shape_str(e.meta.shape) +
                " (a bug in its backward rule)");
  }
  return g.dtype() == e.meta.dtype ? g : g.to(e.meta.dtype);
}

}  // namespace

void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                  bool retain_graph) {
  if (!grads.empty() && grads.size() != roots.size()) {
    throw Error("backward: " + std::to_string(grads.size()) + " gradients given for " +
                std::to_string(roots.size()) + " tensors");
  }
  NoGradGuard no_grad;
  struct Later {
    bool operator()(const Node* a, const Node* b) const { return a->seq < b->seq; }
  };
  std::unordered_map<Node*, Tensor> pending;  // d loss / d (node's output), summed so far
  std::vector<Node*> seeds;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& root = roots[i];
    impl_ref(root, "backward");
    if (!root.requires_grad()) {
      throw Error(
          "backward: the tensor does not require grad: no input of the ops that computed it "
          "requires grad (call set_requires_grad() on the parameters first)");
    }
    Tensor g = i < grads.size() ? grads[i] : Tensor();
    if (!g.defined()) {
      if (root.numel() != 1) {
        throw Error(
            "backward: a gradient can be created implicitly only for a one-element tensor, this "
            "one "
            "has shape " +
            shape_str(root.shape()) + "; pass backward(grad)");
      }
      g = ones_like(root);
    } else {
      if (g.shape() != root.shape()) {
        throw Error("backward: the gradient's shape " + shape_str(g.shape()) +
                    " differs from the tensor's " + shape_str(root.shape()));
      }
      if (g.dtype() != root.dtype()) g = g.to(root.dtype());
      if (!g.is_leaf() || g.requires_grad()) g = g.detach();
    }
    const auto& meta = root.impl()->autograd;
    if (meta->grad_fn) {
      accumulate(pending[meta->grad_fn.get()], g);
      seeds.push_back(meta->grad_fn.get());
    } else {
      accumulate(meta->grad, g);
    }
  }
  // How many edges from nodes reachable from the roots point at each node: a node runs once
  // all of them have delivered.
  std::unordered_map<Node*, int64_t> deps;
  std::unordered_set<Node*> seen;
  std::vector<Node*> stack(seeds.begin(), seeds.end());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (!seen.insert(n).second) continue;
    for (const autograd::Edge& e : n->next) {
      if (!e.fn) continue;
      ++deps[e.fn.get()];
      stack.push_back(e.fn.get());
    }
  }
  std::priority_queue<Node*, std::vector<Node*>, Later> ready;
  std::unordered_set<Node*> queued;
  for (Node* n : seeds) {
    if (deps[n] == 0 && queued.insert(n).second) ready.push(n);
  }
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    Tensor g;
    if (auto it = pending.find(n); it != pending.end()) {
      g = std::move(it->second);
      pending.erase(it);
    }
    std::vector<Tensor> input_grads;
    if (g.defined()) {
      if (!n->backward) {
        throw Error("backward: the graph through " + n->name +
                    " was freed by an earlier backward(); pass "
                    "retain_graph = true to the first backward() to run it twice");
      }
      input_grads = n->backward(g);
      if (!retain_graph) n->backward = nullptr;  // frees the saved tensors
    }
    for (size_t i = 0; i < n->next.size(); ++i) {
      const autograd::Edge& e = n->next[i];
      if (i < input_grads.size() && input_grads[i].defined() && e.live()) {
        Tensor gi = fit(input_grads[i], e, *n);
        if (e.fn) {
          accumulate(pending[e.fn.get()], gi);
        } else {
          accumulate(e.leaf->grad, gi);
        }
      }
      if (e.fn && --deps[e.fn.get()] == 0) ready.push(e.fn.get());
    }
  }
}

}  // namespace autograd
}  // namespace tw
