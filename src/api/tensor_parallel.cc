// Tensor parallelism over several devices (tensorwire/split.h, TensorParallelGPT): Megatron's
// column- and row-parallel Linear layers and head-split attention, the partial sums added with
// tw::dist::all_reduce (Gloo between servers).
#include <cmath>
#include <limits>

#include "api/autograd.h"
#include "tensorwire/autograd.h"
#include "tensorwire/dist.h"
#include "tensorwire/error.h"
#include "tensorwire/split.h"

namespace tw::nn {

namespace {

// A module holding one parameter (a row-parallel layer's bias, added after the all_reduce).
class Bias : public Module {
 public:
  explicit Bias(Tensor value) : p(register_parameter("bias", std::move(value))) {}
  Tensor forward(const Tensor& x) override { return x + p->value(); }
  std::string name() const override { return "Bias"; }
  ParameterPtr p;
};

// Device r's part of one block.
struct BlockShard {
  std::shared_ptr<LayerNorm> ln1, ln2;
  std::shared_ptr<Linear> qkv, proj, fc1, fc2;  // qkv, fc1: column-parallel; proj, fc2: rows
  std::shared_ptr<Bias> proj_b, fc2_b;          // replicated, added after the all_reduce
};

struct Rank {
  Device dev;
  std::shared_ptr<Embedding> wte, wpe;  // replicated
  std::vector<BlockShard> blocks;
};

// Sets every parameter of `dst` (made on the host) to `src`'s values moved to `dev`.
void copy_into(Module& dst, const std::vector<Tensor>& values, const Device& dev) {
  const std::vector<ParameterPtr> ps = dst.parameters();
  if (ps.size() != values.size()) throw Error("TensorParallelGPT: internal parameter mismatch");
  for (size_t i = 0; i < ps.size(); ++i) {
    ps[i]->set(values[i].device() == dev ? values[i] : values[i].to(dev));
  }
}

Tensor value_of(Module& m, const std::string& name) {
  for (auto& [n, p] : m.named_parameters())
    if (n == name) return p->value();
  throw Error("TensorParallelGPT: the model has no parameter " + name);
}

}  // namespace

struct TensorParallelGPT::Impl {
  GPTConfig c;
  std::vector<Device> devices;
  std::vector<Rank> ranks;
  std::shared_ptr<LayerNorm> ln_f;  // on devices[0], as the head
  std::shared_ptr<Linear> head;     // null when tied (the head is rank 0's wte)
  std::unique_ptr<dist::Group> group;
  std::vector<ParameterPtr> replicated_params(size_t r) const;

  // Each device's partial sum becomes their total, recorded for autograd: output r depends on
  // every partial, and its gradient goes back to each partial's device (server to server).
  std::vector<Tensor> all_reduce(const std::vector<Tensor>& partials) {
    if (partials.size() == 1) return partials;
    std::vector<Tensor> outs;
    {
      NoGradGuard no_grad;
      for (const Tensor& p : partials) outs.push_back(p.detach());
      dist::all_reduce(outs, dist::ReduceOp::kSum, *group);
    }
    std::vector<const Tensor*> ins;
    for (const Tensor& p : partials) ins.push_back(&p);
    for (Tensor& o : outs) {
      autograd::record_composite("all_reduce", ins, o, [devs = devices](const Tensor& g) {
        NoGradGuard no_grad;
        std::vector<Tensor> grads;
        for (const Device& d : devs) grads.push_back(g.device() == d ? g : g.to(d));
        return grads;
      });
    }
    return outs;
  }

  // Block i over rows x (one replica per device) -> the block's output, one replica per device.
  std::vector<Tensor> block_rows(size_t i, const std::vector<Tensor>& x, int64_t b, int64_t t) {
    const size_t n = ranks.size();
    const int64_t e = c.n_embd, hl = c.n_head / static_cast<int64_t>(n), d = e / c.n_head;
    const int64_t el = hl * d;  // this device's heads' width
    std::vector<Tensor> part(n);
    for (size_t r = 0; r < n; ++r) {
      BlockShard& s = ranks[r].blocks[i];
      const Tensor qkv = (*s.qkv)((*s.ln1)(x[r]));  // [B*T, 3 el]
      auto heads = [&](int64_t j) {
        return qkv.slice(1, j * el, (j + 1) * el).reshape({b, t, hl, d}).transpose(1, 2);
      };
      const Tensor y = scaled_dot_product_attention(heads(0), heads(1), heads(2), {}, true);
      part[r] = (*s.proj)(y.transpose(1, 2).reshape({b * t, el}));
    }
    std::vector<Tensor> h = all_reduce(part);
    for (size_t r = 0; r < n; ++r) h[r] = x[r] + (*ranks[r].blocks[i].proj_b)(h[r]);
    for (size_t r = 0; r < n; ++r) {
      BlockShard& s = ranks[r].blocks[i];
      part[r] = (*s.fc2)((*s.fc1)((*s.ln2)(h[r])).gelu());
    }
    std::vector<Tensor> m = all_reduce(part);
    for (size_t r = 0; r < n; ++r) m[r] = h[r] + (*ranks[r].blocks[i].fc2_b)(m[r]);
    return m;
  }

  Tensor head_rows(const Tensor& x) {
    const Tensor h = (*ln_f)(x);
    return head ? (*head)(h) : h.matmul(ranks[0].wte->weight()->value().t());
  }

  Tensor logits_rows(const Tensor& tokens) {
    if (tokens.dim() != 2 || tokens.dtype() != kI64 || tokens.size(1) > c.context) {
      throw Error("TensorParallelGPT: tokens must be i64 [B, T] with T <= " +
                  std::to_string(c.context) + ", got " + shape_str(tokens.shape()));
    }
    const int64_t b = tokens.size(0), t = tokens.size(1);
    std::vector<Tensor> x;
    for (Rank& rk : ranks) {
      const Tensor tok = tokens.device() == rk.dev ? tokens : tokens.to(rk.dev);
      const Tensor pos = rk.wpe->weight()->value().slice(0, 0, t);
      x.push_back(((*rk.wte)(tok) + pos).reshape({b * t, c.n_embd}));
    }
    for (size_t i = 0; i < static_cast<size_t>(c.n_layer); ++i) x = block_rows(i, x, b, t);
    return head_rows(x[0]);
  }
};

std::vector<ParameterPtr> TensorParallelGPT::Impl::replicated_params(size_t r) const {
  const Rank& rk = ranks[r];
  std::vector<ParameterPtr> out = {rk.wte->weight(), rk.wpe->weight()};
  for (const BlockShard& s : rk.blocks) {
    for (Module* m :
         std::initializer_list<Module*>{s.ln1.get(), s.ln2.get(), s.proj_b.get(), s.fc2_b.get()}) {
      for (const ParameterPtr& p : m->parameters()) out.push_back(p);
    }
  }
  return out;
}

TensorParallelGPT::TensorParallelGPT(GPT& model, const std::vector<Device>& devices)
    : impl_(std::make_shared<Impl>()) {
  Impl& m = *impl_;
  m.c = model.config();
  m.devices = devices;
  const auto n = static_cast<int64_t>(devices.size());
  if (n < 1) throw Error("TensorParallelGPT: no devices given");
  if (m.c.n_head % n != 0) {
    throw Error("TensorParallelGPT: the " + std::to_string(m.c.n_head) +
                " heads do not split evenly over " + std::to_string(n) +
                " devices; give a number of devices that divides n_head");
  }
  if (m.c.dropout > 0) throw Error("TensorParallelGPT: dropout is not supported; set it to 0");
  const int64_t e = m.c.n_embd, el = e / n, fl = 4 * e / n;
  const bool bias = m.c.bias;
  // Modules are made on the host, then given the model's values: the global generator is left
  // as it was.
  const RngState rng = rng_state();
  const Placement host{Device::cpu(), kF32};
  for (int64_t r = 0; r < n; ++r) {
    const Device& dev = devices[static_cast<size_t>(r)];
    Rank rk{dev,
            std::make_shared<Embedding>(m.c.vocab_size, e, host),
            std::make_shared<Embedding>(m.c.context, e, host),
            {}};
    copy_into(*rk.wte, {value_of(model, "wte.weight")}, dev);
    copy_into(*rk.wpe, {value_of(model, "wpe.weight")}, dev);
    for (int64_t i = 0; i < m.c.n_layer; ++i) {
      const std::string p = "blocks." + std::to_string(i) + ".";
      auto v = [&](const std::string& name) { return value_of(model, p + name); };
      BlockShard s;
      s.ln1 = std::make_shared<LayerNorm>(Shape{e}, 1e-5, true, host);
      s.ln2 = std::make_shared<LayerNorm>(Shape{e}, 1e-5, true, host);
      copy_into(*s.ln1, {v("ln1.weight"), v("ln1.bias")}, dev);
      copy_into(*s.ln2, {v("ln2.weight"), v("ln2.bias")}, dev);
      // qkv: this device's heads' rows of q, of k and of v.
      auto qkv_rows = [&](const Tensor& w) {
        return cat({w.slice(0, r * el, (r + 1) * el), w.slice(0, e + r * el, e + (r + 1) * el),
                    w.slice(0, 2 * e + r * el, 2 * e + (r + 1) * el)},
                   0);
      };
      s.qkv = std::make_shared<Linear>(e, 3 * el, bias, host);
      std::vector<Tensor> qv = {qkv_rows(v("attn.qkv.weight"))};
      if (bias) qv.push_back(qkv_rows(v("attn.qkv.bias")));
      copy_into(*s.qkv, qv, dev);
      s.proj = std::make_shared<Linear>(el, e, false, host);
      copy_into(*s.proj, {v("attn.proj.weight").slice(1, r * el, (r + 1) * el)}, dev);
      s.fc1 = std::make_shared<Linear>(e, fl, bias, host);
      std::vector<Tensor> f1 = {v("mlp.0.weight").slice(0, r * fl, (r + 1) * fl)};
      if (bias) f1.push_back(v("mlp.0.bias").slice(0, r * fl, (r + 1) * fl));
      copy_into(*s.fc1, f1, dev);
      s.fc2 = std::make_shared<Linear>(fl, e, false, host);
      copy_into(*s.fc2, {v("mlp.2.weight").slice(1, r * fl, (r + 1) * fl)}, dev);
      s.proj_b = std::make_shared<Bias>(bias ? v("attn.proj.bias") : zeros({e}));
      s.fc2_b = std::make_shared<Bias>(bias ? v("mlp.2.bias") : zeros({e}));
      s.proj_b->p->set(s.proj_b->p->value().to(dev));
      s.fc2_b->p->set(s.fc2_b->p->value().to(dev));
      rk.blocks.push_back(std::move(s));
    }
    m.ranks.push_back(std::move(rk));
  }
  m.ln_f = std::make_shared<LayerNorm>(Shape{e}, 1e-5, true, host);
  copy_into(*m.ln_f, {value_of(model, "ln_f.weight"), value_of(model, "ln_f.bias")}, devices[0]);
  if (!m.c.tied) {
    m.head = std::make_shared<Linear>(e, m.c.vocab_size, false, host);
    copy_into(*m.head, {value_of(model, "head.weight")}, devices[0]);
  }
  set_rng_state(rng);
  if (n > 1) m.group = std::make_unique<dist::Group>(devices);
}

const std::vector<Device>& TensorParallelGPT::devices() const { return impl_->devices; }

Tensor TensorParallelGPT::forward(const Tensor& tokens) {
  const Tensor rows = impl_->logits_rows(tokens);
  return rows.reshape({tokens.size(0), tokens.size(1), impl_->c.vocab_size});
}

Tensor TensorParallelGPT::loss(const Tensor& tokens, const Tensor& targets) {
  if (targets.shape() != tokens.shape()) {
    throw Error("TensorParallelGPT::loss: targets " + shape_str(targets.shape()) +
                " must match tokens " + shape_str(tokens.shape()));
  }
  const Device& d0 = impl_->devices[0];
  const Tensor y = targets.device() == d0 ? targets : targets.to(d0);
  return cross_entropy(impl_->logits_rows(tokens), y.reshape({-1}));
}

void TensorParallelGPT::reduce_grads() {
  Impl& m = *impl_;
  if (m.ranks.size() < 2) return;
  NoGradGuard no_grad;
  // One all_reduce of every replicated parameter's gradient, flattened together.
  std::vector<std::vector<ParameterPtr>> reps;
  for (size_t r = 0; r < m.ranks.size(); ++r) reps.push_back(m.replicated_params(r));
  std::vector<Tensor> flat;
  for (size_t r = 0; r < reps.size(); ++r) {
    std::vector<Tensor> gs;
    for (const ParameterPtr& p : reps[r]) {
      Tensor g = p->grad();
      gs.push_back(g.defined() ? g.reshape({-1})
                               : zeros({p->value().numel()}, p->value().dtype(), m.devices[r]));
    }
    flat.push_back(cat(gs, 0));
  }
  dist::all_reduce(flat, dist::ReduceOp::kSum, *m.group);
  for (size_t r = 0; r < reps.size(); ++r) {
    int64_t at = 0;
    for (const ParameterPtr& p : reps[r]) {
      const int64_t k = p->value().numel();
      Tensor v = p->value();
      v.set_grad(flat[r].narrow(0, at, k).reshape(p->value().shape()));
      at += k;
    }
  }
}

std::vector<ParameterPtr> TensorParallelGPT::parameters() const {
  std::vector<ParameterPtr> out;
  for (const Rank& rk : impl_->ranks) {
    for (Module* mod : std::initializer_list<Module*>{rk.wte.get(), rk.wpe.get()})
      for (const ParameterPtr& p : mod->parameters()) out.push_back(p);
    for (const BlockShard& s : rk.blocks) {
      for (Module* mod :
           std::initializer_list<Module*>{s.ln1.get(), s.qkv.get(), s.proj.get(), s.proj_b.get(),
                                          s.ln2.get(), s.fc1.get(), s.fc2.get(), s.fc2_b.get()})
        for (const ParameterPtr& p : mod->parameters()) out.push_back(p);
    }
  }
  for (const ParameterPtr& p : impl_->ln_f->parameters()) out.push_back(p);
  if (impl_->head)
    for (const ParameterPtr& p : impl_->head->parameters()) out.push_back(p);
  return out;
}

std::vector<int64_t> TensorParallelGPT::generate(const std::vector<int64_t>& prompt,
                                                 int64_t new_tokens, const SampleOptions& options) {
  Impl& m = *impl_;
  const int64_t v = m.c.vocab_size, total = static_cast<int64_t>(prompt.size()) + new_tokens;
  if (prompt.empty()) throw Error("TensorParallelGPT::generate: the prompt is empty");
  if (new_tokens < 0 || total > m.c.context) {
    throw Error("TensorParallelGPT::generate: prompt " + std::to_string(prompt.size()) + " + " +
                std::to_string(new_tokens) + " new tokens exceed the context of " +
                std::to_string(m.c.context));
  }
  for (int64_t t : prompt) {
    if (t < 0 || t >= v) {
      throw Error("TensorParallelGPT::generate: token " + std::to_string(t) +
                  " is outside the vocabulary of " + std::to_string(v));
    }
  }
  NoGradGuard no_grad;
  const size_t n = m.ranks.size();
  const int64_t hl = m.c.n_head / static_cast<int64_t>(n), d = m.c.n_embd / m.c.n_head;
  const int64_t el = hl * d, cap = m.c.context;
  // Each device's cache holds its own heads: k, v [1, H/N, context, D] per layer.
  std::vector<std::vector<KVCache>> cache(n);
  for (size_t r = 0; r < n; ++r) {
    for (int64_t i = 0; i < m.c.n_layer; ++i) {
      cache[r].push_back(
          {zeros({1, hl, cap, d}, kF32, m.devices[r]), zeros({1, hl, cap, d}, kF32, m.devices[r])});
    }
  }
  uint64_t state = options.seed;
  std::vector<int64_t> out;
  int64_t token = prompt[0];
  for (int64_t i = 0; i + 1 < total; ++i) {
    if (i < static_cast<int64_t>(prompt.size())) token = prompt[static_cast<size_t>(i)];
    std::vector<Tensor> x(n), pos(n), slots(n);
    for (size_t r = 0; r < n; ++r) {
      const Device& dev = m.devices[r];
      pos[r] = from_vector<int64_t>(std::vector<int64_t>{i}, {1}, dev);
      const Tensor tok = from_vector<int64_t>(std::vector<int64_t>{token}, {1}, dev);
      x[r] = (*m.ranks[r].wte)(tok) + (*m.ranks[r].wpe)(pos[r]);
      slots[r] = arange(0, cap, 1, kI64, dev);
    }
    for (size_t b = 0; b < static_cast<size_t>(m.c.n_layer); ++b) {
      std::vector<Tensor> part(n);
      for (size_t r = 0; r < n; ++r) {
        BlockShard& s = m.ranks[r].blocks[b];
        const Tensor qkv = (*s.qkv)((*s.ln1)(x[r]));  // [1, 3 el]
        auto heads = [&](int64_t j) {
          return qkv.slice(1, j * el, (j + 1) * el).reshape({1, hl, 1, d});
        };
        KVCache& kv = cache[r][b];
        const Tensor here = slots[r].eq(pos[r]).reshape({1, 1, cap, 1});
        kv.k = where(here, heads(1), kv.k);
        kv.v = where(here, heads(2), kv.v);
        const Tensor seen = slots[r].le(pos[r]).reshape({1, 1, 1, cap});
        const Tensor y = scaled_dot_product_attention(heads(0), kv.k, kv.v, seen);
        part[r] = (*s.proj)(y.reshape({1, el}));
      }
      std::vector<Tensor> h = m.all_reduce(part);
      for (size_t r = 0; r < n; ++r) h[r] = x[r] + (*m.ranks[r].blocks[b].proj_b)(h[r]);
      for (size_t r = 0; r < n; ++r) {
        BlockShard& s = m.ranks[r].blocks[b];
        part[r] = (*s.fc2)((*s.fc1)((*s.ln2)(h[r])).gelu());
      }
      std::vector<Tensor> mm = m.all_reduce(part);
      for (size_t r = 0; r < n; ++r) x[r] = h[r] + (*m.ranks[r].blocks[b].fc2_b)(mm[r]);
    }
    if (i + 1 < static_cast<int64_t>(prompt.size())) continue;  // the prompt's own positions
    const std::vector<float> logits = m.head_rows(x[0]).to_vector<float>();
    token = sample_token(logits, options, state);
    out.push_back(token);
  }
  return out;
}

}  // namespace tw::nn
