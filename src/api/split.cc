// One model over several devices (tensorwire/split.h): placement by free memory, the pipeline
// and its generator.
#include "tensorwire/split.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "api/autograd.h"
#include "tensorwire/autograd.h"
#include "tensorwire/error.h"
#include "tensorwire/graph.h"
#include "tensorwire/remote.h"

namespace tw::nn {
namespace {

std::string mib(uint64_t bytes) {
  if (bytes == LayerPlan::kUnknown) return "unknown";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

uint64_t param_bytes(const std::vector<Module*>& layer) {
  std::set<const Parameter*> seen;
  uint64_t n = 0;
  for (Module* m : layer) {
    for (const ParameterPtr& p : m->parameters()) {
      if (!seen.insert(p.get()).second) continue;
      n += static_cast<uint64_t>(p->value().numel()) * dtype_size(p->value().dtype());
    }
  }
  return n;
}

uint64_t need(uint64_t bytes, double factor) {
  return static_cast<uint64_t>(std::ceil(static_cast<double>(bytes) * factor));
}

// The layers each device takes: in proportion to its free memory, never past it. Devices whose
// free memory is unknown count as the largest known (all alike when none is known).
std::vector<size_t> split_by_memory(const std::vector<uint64_t>& need_of,
                                    const std::vector<uint64_t>& free) {
  const size_t n = free.size();
  uint64_t known_max = 0;
  for (uint64_t f : free)
    if (f != LayerPlan::kUnknown) known_max = std::max(known_max, f);
  std::vector<double> weight(n);
  double total_weight = 0;
  for (size_t i = 0; i < n; ++i) {
    weight[i] = free[i] == LayerPlan::kUnknown ? (known_max ? static_cast<double>(known_max) : 1.0)
                                               : static_cast<double>(free[i]);
    total_weight += weight[i];
  }
  double total = 0;
  for (uint64_t b : need_of) total += static_cast<double>(b);
  std::vector<size_t> first = {0};
  size_t layer = 0;
  double cum = 0, target = 0;
  for (size_t d = 0; d + 1 < n; ++d) {
    target += total * weight[d] / total_weight;
    uint64_t held = 0;
    while (layer < need_of.size()) {
      const double next = static_cast<double>(need_of[layer]);
      // Take the layer when that brings the running sum nearer this device's share, and it fits.
      if (std::abs(cum + next - target) > std::abs(cum - target) && held > 0) break;
      if (free[d] != LayerPlan::kUnknown && held + need_of[layer] > free[d]) break;
      held += need_of[layer];
      cum += next;
      ++layer;
    }
    first.push_back(layer);
  }
  first.push_back(need_of.size());
  return first;
}

}  // namespace

const Device& LayerPlan::device_of(size_t layer) const {
  for (size_t i = 0; i < devices.size(); ++i)
    if (layer < first[i + 1]) return devices[i];
  throw Error("LayerPlan: layer " + std::to_string(layer) + " is past the plan's " +
              std::to_string(layer_count()) + " layers");
}

std::string LayerPlan::to_string() const {
  std::string out;
  for (size_t i = 0; i < devices.size(); ++i) {
    if (i) out += "; ";
    out += devices[i].str() + ": ";
    if (first[i] == first[i + 1]) {
      out += "no layers";
    } else {
      out += "layers " + std::to_string(first[i]) + "-" + std::to_string(first[i + 1] - 1);
    }
    out += " (" + mib(bytes[i]) + " of " + mib(free[i]) + " free)";
  }
  return out;
}

uint64_t free_memory(const Device& device) {
  if (device.kind() != Device::Kind::kRemote) return LayerPlan::kUnknown;
  const RemoteHandshake h = remote_handshake(device);
  const RemoteStats s = remote_stats(device);
  auto less = [](uint64_t a, uint64_t b) { return a > b ? a - b : 0; };
  uint64_t f = less(h.session_memory_bytes, s.session_bytes_held);
  if (s.max_memory_bytes != 0) f = std::min(f, less(s.max_memory_bytes, s.memory_used_bytes));
  return f;
}

LayerPlan place(Module& model, const std::vector<Device>& devices, const PlacePolicy& policy) {
  if (devices.empty()) throw Error("place: no devices given");
  if (!(policy.memory_factor > 0)) {
    throw Error("place: memory_factor must be > 0, got " + std::to_string(policy.memory_factor));
  }
  const std::vector<std::vector<Module*>> layers = model.layers();
  LayerPlan plan;
  plan.devices = devices;
  std::vector<uint64_t> need_of;
  uint64_t total = 0;
  for (const auto& l : layers) {
    need_of.push_back(need(param_bytes(l), policy.memory_factor));
    total += need_of.back();
  }
  for (const Device& d : devices) plan.free.push_back(free_memory(d));
  if (!policy.layers.empty()) {
    if (policy.layers.size() != devices.size()) {
      throw Error("place: the split names " + std::to_string(policy.layers.size()) +
                  " devices' layers, but " + std::to_string(devices.size()) +
                  " devices were given");
    }
    plan.first = {0};
    int64_t sum = 0;
    for (int64_t n : policy.layers) {
      if (n < 0) throw Error("place: a device's layer count is negative: " + std::to_string(n));
      sum += n;
      plan.first.push_back(static_cast<size_t>(sum));
    }
    if (static_cast<size_t>(sum) != layers.size()) {
      throw Error("place: the split gives " + std::to_string(sum) + " layers, but " + model.name() +
                  " has " + std::to_string(layers.size()));
    }
  } else {
    plan.first = split_by_memory(need_of, plan.free);
  }
  // What each device needs; refuse before anything moves.
  std::string short_of;
  uint64_t have = 0;
  bool all_known = true;
  for (size_t i = 0; i < devices.size(); ++i) {
    uint64_t b = 0, n = 0;
    for (size_t l = plan.first[i]; l < plan.first[i + 1]; ++l) {
      b += param_bytes(layers[l]);
      n += need_of[l];
    }
    plan.bytes.push_back(b);
    if (plan.free[i] == LayerPlan::kUnknown) {
      all_known = false;
    } else {
      have += plan.free[i];
      if (n > plan.free[i]) {
        short_of += "; " + devices[i].str() + " would need " + mib(n) + " for layers " +
                    std::to_string(plan.first[i]) + "-" + std::to_string(plan.first[i + 1] - 1) +
                    " and has " + mib(plan.free[i]) + " free";
      }
    }
  }
  if (!short_of.empty()) {
    std::string why = "place: " + model.name() + " does not fit: its " +
                      std::to_string(layers.size()) + " layers need " + mib(total) +
                      " (parameters x memory_factor " + std::to_string(policy.memory_factor) + ")";
    if (all_known) why += ", the " + std::to_string(devices.size()) + " devices have " + mib(have);
    why += " free" + short_of +
           ". Add a server, give the servers more memory (--max-memory, --session-memory), or "
           "split the layers otherwise (PlacePolicy::layers)";
    throw Error(why);
  }
  // Tied weights (a GPT's head reusing wte.weight) must not be split from each other.
  std::vector<std::set<const Parameter*>> on(devices.size());
  for (size_t i = 0; i < devices.size(); ++i) {
    for (size_t l = plan.first[i]; l < plan.first[i + 1]; ++l) {
      for (Module* m : layers[l]) {
        for (const ParameterPtr& p : m->parameters()) on[i].insert(p.get());
      }
    }
  }
  for (size_t i = 0; i < devices.size(); ++i) {
    for (size_t j = i + 1; j < devices.size(); ++j) {
      for (const Parameter* p : on[i]) {
        if (on[j].count(p)) {
          throw Error("place: a parameter is shared by layers on " + devices[i].str() + " and " +
                      devices[j].str() + " (tied weights); put those layers on one device");
        }
      }
    }
  }
  for (size_t i = 0; i < devices.size(); ++i) {
    for (size_t l = plan.first[i]; l < plan.first[i + 1]; ++l) {
      for (Module* m : layers[l]) m->to(devices[i]);
    }
  }
  return plan;
}

Tensor move(const Tensor& x, const Device& device) {
  if (x.device() == device) return x;
  Tensor out;
  {
    NoGradGuard no_grad;
    out = x.to(device);
  }
  const Device from = x.device();
  const Tensor* ins[] = {&x};
  autograd::record_composite("move", ins, out, [from](const Tensor& grad) {
    NoGradGuard no_grad;
    return std::vector<Tensor>{grad.to(from)};
  });
  return out;
}

// ---- Pipeline ----
namespace {

// The parameters of layers [begin, end), each once (tied weights are one).
std::vector<ParameterPtr> stage_params(Module& model, size_t begin, size_t end) {
  const std::vector<std::vector<Module*>> layers = model.layers();
  std::set<const Parameter*> seen;
  std::vector<ParameterPtr> out;
  for (size_t l = begin; l < end; ++l) {
    for (Module* m : layers[l]) {
      for (const ParameterPtr& p : m->parameters())
        if (seen.insert(p.get()).second) out.push_back(p);
    }
  }
  return out;
}

// The parameters of layers [begin, end) as graph slots.
std::vector<graph::Slot> param_slots(Module& model, size_t begin, size_t end) {
  std::vector<graph::Slot> out;
  for (const ParameterPtr& p : stage_params(model, begin, end))
    out.push_back({[p] { return p->value(); }, [p](Tensor t) { p->set(std::move(t)); }});
  return out;
}

}  // namespace

// Each device's layers of an inference forward, as one graph::Step there; with graph training,
// each device's part of a micro-batch's backward as another (Pipeline::set_graph_training).
struct Pipeline::Steps {
  struct Stage {
    Device device;
    size_t begin = 0, end = 0;
    std::vector<ParameterPtr> params;
    std::unique_ptr<graph::Step> step, backward;
  };
  std::vector<Stage> stages;
};

Pipeline::Pipeline(GPT& model, LayerPlan plan, int64_t micro_batches)
    : model_(model), plan_(std::move(plan)), micro_(micro_batches) {
  const size_t want = model_.block_count() + 2;
  if (plan_.layer_count() != want) {
    throw Error("Pipeline: the plan places " + std::to_string(plan_.layer_count()) +
                " layers, the GPT has " + std::to_string(want) +
                " (embeddings, blocks, head): place() this model");
  }
  if (micro_ < 1)
    throw Error("Pipeline: micro_batches must be >= 1, got " + std::to_string(micro_));
  steps_ = std::make_shared<Steps>();
}

Tensor Pipeline::run_rows(const Tensor& tokens) {
  const int64_t b = tokens.size(0), t = tokens.size(1);
  Tensor x = model_.embed_rows(move(tokens, plan_.device_of(0)));
  for (size_t i = 0; i < model_.block_count(); ++i)
    x = model_.block(i).forward_rows(move(x, plan_.device_of(i + 1)), b, t);
  return model_.head_rows(move(x, plan_.device_of(model_.block_count() + 1)));
}

namespace {
void check_batch(const Tensor& tokens, int64_t micro, const char* who) {
  if (tokens.dim() != 2 || tokens.size(0) % micro != 0) {
    throw Error(std::string(who) + ": tokens must be [B, T] with B a multiple of the " +
                std::to_string(micro) + " micro-batches, got " + shape_str(tokens.shape()));
  }
}
}  // namespace

namespace {

// Layers [begin, end) of `model` (n blocks, width e) on x: tokens [B, T] (begin 0) or rows as
// [B, T, E] -> [B, T, E], or logits rows [B*T, V] when the stage ends with the head.
Tensor stage_forward(GPT& model, size_t begin, size_t end, const Tensor& in) {
  const size_t n = model.block_count();
  const int64_t e = model.config().n_embd;
  Tensor x = in;
  const int64_t b = x.size(0), t = x.size(1);
  x = begin == 0 ? model.embed_rows(x) : x.reshape({b * t, e});
  for (size_t l = std::max<size_t>(begin, 1); l < std::min(end, n + 1); ++l)
    x = model.block(l - 1).forward_rows(x, b, t);
  return end == n + 2 ? model.head_rows(x) : x.reshape({b, t, e});
}

}  // namespace

void Pipeline::make_steps() {
  if (!steps_->stages.empty()) return;
  GPT* model = &model_;
  const size_t last = model_.block_count() + 2;
  const double micro = static_cast<double>(micro_);
  for (size_t i = 0; i < plan_.devices.size(); ++i) {
    const size_t begin = plan_.first[i], end = plan_.first[i + 1];
    if (begin == end) continue;
    Steps::Stage st{plan_.devices[i], begin, end, stage_params(model_, begin, end), {}, {}};
    // The shapes carry B and T, which each step is specialised to.
    auto forward = [model, begin, end](const std::vector<Tensor>& a) {
      return std::vector<Tensor>{stage_forward(*model, begin, end, a[0])};
    };
    // A micro-batch's backward through this stage, its forward computed again from the stage's
    // input (re-materialised, as GPipe does: nothing of the forward is kept on the server but
    // that input). Arguments: the input, then the gradient of the output (the targets [B*T] on
    // the last stage, whose loss is the micro-batch's mean cross-entropy / micro_batches), then
    // (when the parameters hold gradients already) those gradients, into which the backward
    // accumulates as an eager backward would. Results: the loss (last stage), the input's
    // gradient (not the first stage), then each parameter's gradient; the parameters are left
    // without one (graph::Step does not carry them out of a replay).
    const std::vector<ParameterPtr> params = st.params;
    auto backward = [model, begin, end, last, micro, params](const std::vector<Tensor>& a) {
      Tensor x = a[0];
      if (begin != 0) {
        x = x.detach();
        x.set_requires_grad(true);
      }
      const bool accumulate = a.size() > 2;
      for (size_t k = 0; k < params.size(); ++k) {
        Tensor v = params[k]->value();
        if (accumulate) {
          v.set_grad(a[2 + k]);
        } else {
          v.zero_grad();
        }
      }
      std::vector<Tensor> out;
      Tensor y = stage_forward(*model, begin, end, x);
      if (end == last) {
        Tensor l = cross_entropy(y, a[1]);
        if (micro > 1) l = l * (1.0 / micro);
        tw::backward({l});
        out.push_back(l.detach());
      } else {
        tw::backward({y}, {a[1]});
      }
      if (begin != 0) out.push_back(x.grad());
      for (const ParameterPtr& p : params) {
        Tensor v = p->value();
        out.push_back(v.grad());
        v.zero_grad();
      }
      return out;
    };
    st.step = std::make_unique<graph::Step>(forward, param_slots(model_, begin, end));
    st.backward = std::make_unique<graph::Step>(backward, param_slots(model_, begin, end));
    steps_->stages.push_back(std::move(st));
  }
}

Tensor Pipeline::run_rows_graph(const Tensor& tokens) {
  make_steps();
  Tensor x = tokens;
  for (Steps::Stage& st : steps_->stages)
    x = (*st.step)({x.device() == st.device ? x : x.to(st.device)})[0];
  return x;
}

void Pipeline::set_graph_training(bool on) { graph_training_ = on; }

int64_t Pipeline::graph_replays() const {
  int64_t n = 0;
  for (const Steps::Stage& st : steps_->stages) n += st.step->replays() + st.backward->replays();
  return n;
}

Tensor Pipeline::forward_backward_graph(const Tensor& tokens, const Tensor& targets) {
  make_steps();
  std::vector<Steps::Stage>& stages = steps_->stages;
  const size_t n = stages.size();
  const int64_t mb = tokens.size(0) / micro_;
  // Forward: every micro-batch through every stage but the last (whose backward step computes its
  // forward), keeping each stage's input on its device.
  std::vector<std::vector<Tensor>> in(static_cast<size_t>(micro_), std::vector<Tensor>(n));
  {
    NoGradGuard no_grad;
    for (int64_t m = 0; m < micro_; ++m) {
      Tensor x = micro_ == 1 ? tokens : tokens.slice(0, m * mb, (m + 1) * mb);
      for (size_t s = 0; s < n; ++s) {
        if (!(x.device() == stages[s].device)) x = x.to(stages[s].device);
        in[static_cast<size_t>(m)][s] = x;
        if (s + 1 < n) x = (*stages[s].step)({x})[0];
      }
    }
  }
  // Backward, the last micro-batch first (GPipe, as forward_backward's eager run).
  std::vector<Tensor> losses(static_cast<size_t>(micro_));
  for (int64_t m = micro_; m-- > 0;) {
    Tensor g = micro_ == 1 ? targets : targets.slice(0, m * mb, (m + 1) * mb);
    g = g.reshape({-1});
    for (size_t s = n; s-- > 0;) {
      Steps::Stage& st = stages[s];
      if (!(g.device() == st.device)) g = g.to(st.device);
      std::vector<Tensor> args = {in[static_cast<size_t>(m)][s], g};
      bool all = true, none = true;
      for (const ParameterPtr& p : st.params) (p->value().grad().defined() ? none : all) = false;
      if (!all && !none) {
        throw Error("Pipeline::forward_backward: some parameters of layers " +
                    std::to_string(st.begin) + "-" + std::to_string(st.end - 1) +
                    " hold gradients and others do not; zero_grad() the model first");
      }
      if (all) {
        for (const ParameterPtr& p : st.params) args.push_back(p->value().grad());
      }
      std::vector<Tensor> out = (*st.backward)(args);
      size_t k = 0;
      if (s + 1 == n) losses[static_cast<size_t>(m)] = out[k++];
      if (st.begin != 0) g = out[k++];
      for (const ParameterPtr& p : st.params) {
        Tensor v = p->value();  // (a handle: the gradient is the parameter's)
        v.set_grad(out[k++]);
      }
    }
  }
  Tensor sum = losses[0];
  for (size_t m = 1; m < losses.size(); ++m) sum = sum + losses[m];
  return sum;
}

Tensor Pipeline::forward(const Tensor& tokens) {
  check_batch(tokens, micro_, "Pipeline::forward");
  const int64_t b = tokens.size(0), t = tokens.size(1), mb = b / micro_;
  // Graphs only where a replay equals the eager run: no autograd, no random dropout masks.
  const bool graphs = !is_grad_enabled() && (model_.config().dropout == 0 || !model_.is_training());
  std::vector<Tensor> parts;
  for (int64_t m = 0; m < micro_; ++m) {
    const Tensor x = micro_ == 1 ? tokens : tokens.slice(0, m * mb, (m + 1) * mb);
    parts.push_back(graphs ? run_rows_graph(x) : run_rows(x));
  }
  const Tensor rows = parts.size() == 1 ? parts[0] : cat(parts, 0);
  return rows.reshape({b, t, model_.config().vocab_size});
}

Tensor Pipeline::forward_backward(const Tensor& tokens, const Tensor& targets) {
  check_batch(tokens, micro_, "Pipeline::forward_backward");
  if (targets.shape() != tokens.shape()) {
    throw Error("Pipeline::forward_backward: targets " + shape_str(targets.shape()) +
                " must match tokens " + shape_str(tokens.shape()));
  }
  const int64_t mb = tokens.size(0) / micro_;
  const Device& last = plan_.devices.back();
  const Tensor y = targets.device() == last ? targets : targets.to(last);
  // Graphs only where a replay equals the eager run: no random dropout masks.
  if (graph_training_ && (model_.config().dropout == 0 || !model_.is_training()))
    return forward_backward_graph(tokens, y);
  std::vector<Tensor> losses;
  for (int64_t m = 0; m < micro_; ++m) {
    const Tensor x = micro_ == 1 ? tokens : tokens.slice(0, m * mb, (m + 1) * mb);
    const Tensor ym = micro_ == 1 ? y : y.slice(0, m * mb, (m + 1) * mb);
    Tensor l = cross_entropy(run_rows(x), ym.reshape({-1}));
    if (micro_ > 1) l = l * (1.0 / static_cast<double>(micro_));
    losses.push_back(l);
  }
  // GPipe: the last micro-batch's backward first, its last stage already done with its forward.
  for (size_t m = losses.size(); m-- > 0;) tw::backward({losses[m]});
  NoGradGuard no_grad;
  Tensor sum = losses[0].detach();
  for (size_t m = 1; m < losses.size(); ++m) sum = sum + losses[m].detach();
  return sum;
}

// ---- PipelineGenerator ----
// One device's part of generation: layers [begin, end) of the plan, its steps over its
// parameters and its blocks' caches.
struct PipelineGenerator::Stage {
  Stage(Device d, size_t b, size_t e) : device(std::move(d)), begin(b), end(e) {}
  Device device;
  size_t begin, end;
  std::unique_ptr<graph::Step> step, chunk;
};

PipelineGenerator::PipelineGenerator(Pipeline& pipe, int64_t prefill_chunks, bool use_graph)
    : pipe_(pipe), chunks_(prefill_chunks), use_graph_(use_graph) {
  if (prefill_chunks < 0) {
    throw Error("PipelineGenerator: prefill_chunks must be >= 0 (0: the default), got " +
                std::to_string(prefill_chunks));
  }
}

int64_t PipelineGenerator::graph_replays() const {
  int64_t n = 0;
  for (const auto& st : stages_) {
    if (st->step) n += st->step->replays();
    if (st->chunk) n += st->chunk->replays();
  }
  return n;
}

std::vector<int64_t> PipelineGenerator::generate(const std::vector<int64_t>& prompt,
                                                 int64_t new_tokens, const SampleOptions& options) {
  GPT& model = pipe_.model_;
  const LayerPlan& plan = pipe_.plan_;
  const GPTConfig& c = model.config();
  const int64_t v = c.vocab_size, p = static_cast<int64_t>(prompt.size());
  if (prompt.empty()) throw Error("PipelineGenerator::generate: the prompt is empty");
  if (new_tokens < 0 || p + new_tokens > c.context) {
    throw Error("PipelineGenerator::generate: prompt " + std::to_string(prompt.size()) + " + " +
                std::to_string(new_tokens) + " new tokens exceed the context of " +
                std::to_string(c.context));
  }
  for (int64_t t : prompt) {
    if (t < 0 || t >= v) {
      throw Error("PipelineGenerator::generate: token " + std::to_string(t) +
                  " is outside the vocabulary of " + std::to_string(v));
    }
  }
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  const size_t n = model.block_count();
  const int64_t cap = c.context;
  const bool host_draw = v > Generator::kDeviceSampleMaxVocab;
  cache_.clear();
  for (size_t i = 0; i < n; ++i)
    cache_.push_back(model.block(i).attn().empty_cache(1, cap, plan.device_of(i + 1)));
  if (stages_.empty()) {
    for (size_t i = 0; i < plan.devices.size(); ++i) {
      if (plan.first[i] == plan.first[i + 1]) continue;
      stages_.push_back(std::make_shared<Stage>(plan.devices[i], plan.first[i], plan.first[i + 1]));
    }
    if (use_graph_) {
      GPT* m = &model;
      std::vector<KVCache>* cache = &cache_;
      for (const auto& st : stages_) {
        const size_t begin = st->begin, end = st->end;
        std::vector<graph::Slot> slots = param_slots(model, begin, end);
        for (size_t l = std::max<size_t>(begin, 1); l < std::min(end, n + 1); ++l) {
          const size_t b = l - 1;
          slots.push_back({[cache, b] { return (*cache)[b].k; },
                           [cache, b](Tensor t) { (*cache)[b].k = std::move(t); }});
          slots.push_back({[cache, b] { return (*cache)[b].v; },
                           [cache, b](Tensor t) { (*cache)[b].v = std::move(t); }});
        }
        // One position: a = {token or x [1, E], pos [1]} (+ the draw's {1/temperature, k,
        // noise} on the last stage) -> x, the logits, or the drawn token.
        st->step = std::make_unique<graph::Step>(
            [m, cache, begin, end, n, host_draw](const std::vector<Tensor>& a) {
              Tensor x = a[0];
              if (begin == 0) x = m->embed_step(x, a[1]);
              for (size_t l = std::max<size_t>(begin, 1); l < std::min(end, n + 1); ++l)
                x = m->block(l - 1).forward_step(x, a[1], (*cache)[l - 1]);
              if (end == n + 2) {
                x = m->head_rows(x);
                if (x.dtype() != kF32) x = x.to(kF32);
                if (!host_draw) x = internal::draw_token(x, a[2], a[3], a[4]);
              }
              return std::vector<Tensor>{x};
            },
            slots);
        // A prefill chunk: a = {tokens [L] or x [L, E], pos [L], slot [capacity]} -> x [L, E].
        st->chunk = std::make_unique<graph::Step>(
            [m, cache, begin, end, n](const std::vector<Tensor>& a) {
              Tensor x = a[0];
              if (begin == 0) x = m->embed_step(x, a[1]);
              for (size_t l = std::max<size_t>(begin, 1); l < std::min(end, n + 1); ++l)
                x = m->block(l - 1).forward_chunk(x, a[1], a[2], (*cache)[l - 1]);
              return std::vector<Tensor>{x};
            },
            slots);
      }
    }
  }
  // Eager (without use_graph) or as each stage's graph::Step: the same ops either way.
  auto step = [&](Stage& st, const std::vector<Tensor>& a) -> Tensor {
    if (st.step) return (*st.step)(a)[0];
    Tensor x = a[0];
    if (st.begin == 0) x = model.embed_step(x, a[1]);
    for (size_t l = std::max<size_t>(st.begin, 1); l < std::min(st.end, n + 1); ++l)
      x = model.block(l - 1).forward_step(x, a[1], cache_[l - 1]);
    if (st.end == n + 2) {
      x = model.head_rows(x);
      if (x.dtype() != kF32) x = x.to(kF32);
      if (!host_draw) x = internal::draw_token(x, a[2], a[3], a[4]);
    }
    return x;
  };
  auto chunk = [&](Stage& st, const std::vector<Tensor>& a) -> Tensor {
    if (st.begin != 0 && std::min(st.end, n + 1) <= std::max<size_t>(st.begin, 1))
      return a[0];  // the head alone: nothing to do before the last row
    if (st.chunk) return (*st.chunk)(a)[0];
    Tensor x = a[0];
    if (st.begin == 0) x = model.embed_step(x, a[1]);
    for (size_t l = std::max<size_t>(st.begin, 1); l < std::min(st.end, n + 1); ++l)
      x = model.block(l - 1).forward_chunk(x, a[1], a[2], cache_[l - 1]);
    return x;
  };
  const Device& first = plan.device_of(0);
  const Device& last = plan.device_of(n + 1);
  const bool greedy = options.temperature <= 0;
  const Tensor inv_temp = full({1}, greedy ? 1.0 : 1.0 / options.temperature, kF32, last);
  const double k =
      options.top_k > 0 && !greedy ? static_cast<double>(options.top_k) : static_cast<double>(v);
  const Tensor top_k = full({1}, k, kF32, last);
  const Tensor no_noise = zeros({v}, kF32, last);
  uint64_t state = options.seed;
  std::vector<std::function<detail::HostValues()>> reads;
  std::vector<int64_t> out;
  Tensor token;  // the last draw, on `last`
  int64_t host_token = -1;
  // The next token from logits [1, V] (host_draw) on `last`, or drawn there from the head's x.
  auto draw = [&](const Tensor& logits) {
    if (host_draw) {
      host_token = sample_token(logits.to_vector<float>(), options, state);
      out.push_back(host_token);
      return;
    }
    token = logits;
    reads.push_back(token.host_values_async());
  };
  auto noise = [&] {
    return greedy ? no_noise : from_vector<float>(internal::gumbel_noise(v, state), {v}, last);
  };
  try {
    {
      // Prefill: the prompt in chunks of consecutive positions, every stage's work sent without
      // waiting, so the servers work on successive chunks at the same time.
      const int64_t want =
          chunks_ > 0 ? chunks_
                      : (stages_.size() == 1 ? 1 : 4 * static_cast<int64_t>(stages_.size()));
      const int64_t nchunks = std::min(want, p);
      const int64_t len = (p + nchunks - 1) / nchunks;
      Tensor x;
      for (int64_t s = 0; s < p; s += len) {
        const int64_t l = std::min(len, p - s);
        x = from_vector<int64_t>(std::vector<int64_t>(prompt.begin() + s, prompt.begin() + s + l),
                                 {l}, first);
        for (const auto& st : stages_) {
          if (x.device() != st->device) x = x.to(st->device);  // server to server
          const auto [pos, slot] = internal::chunk_positions(s, l, cap, st->device);
          x = chunk(*st, {x, pos, slot});
        }
      }
      // The prompt's last row through the head, and the first draw.
      if (new_tokens > 0) {
        Tensor logits = model.head_rows(x.slice(0, x.size(0) - 1, x.size(0)));
        if (logits.dtype() != kF32) logits = logits.to(kF32);
        draw(host_draw ? logits : internal::draw_token(logits, inv_temp, top_k, noise()));
      }
    }
    for (int64_t i = p; i < p + new_tokens - 1; ++i) {
      Tensor x = host_draw ? from_vector<int64_t>(std::vector<int64_t>{host_token}, {1}, first)
                           : (token.device() == first ? token : token.to(first));
      for (const auto& st : stages_) {
        if (x.device() != st->device) x = x.to(st->device);
        const Tensor pos = from_vector<int64_t>(std::vector<int64_t>{i}, {1}, st->device);
        if (st->end == n + 2 && !host_draw) {
          x = step(*st, {x, pos, inv_temp, top_k, noise()});
        } else {
          x = step(*st, {x, pos});
        }
      }
      draw(x);
    }
  } catch (...) {
    model.train(was_training);
    throw;
  }
  model.train(was_training);
  for (auto& r : reads) {
    const detail::HostValues hv = r();
    out.push_back(*static_cast<const int64_t*>(hv.data));
  }
  return out;
}

}  // namespace tw::nn
