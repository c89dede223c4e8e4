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

Tensor Pipeline::forward(const Tensor& tokens) {
  check_batch(tokens, micro_, "Pipeline::forward");
  const int64_t b = tokens.size(0), t = tokens.size(1), mb = b / micro_;
  std::vector<Tensor> parts;
  for (int64_t m = 0; m < micro_; ++m)
    parts.push_back(run_rows(micro_ == 1 ? tokens : tokens.slice(0, m * mb, (m + 1) * mb)));
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
PipelineGenerator::PipelineGenerator(Pipeline& pipe) : pipe_(pipe) {}

std::vector<int64_t> PipelineGenerator::generate(const std::vector<int64_t>& prompt,
                                                 int64_t new_tokens, const SampleOptions& options) {
  GPT& model = pipe_.model_;
  const LayerPlan& plan = pipe_.plan_;
  const GPTConfig& c = model.config();
  const int64_t v = c.vocab_size, total = static_cast<int64_t>(prompt.size()) + new_tokens;
  if (prompt.empty()) throw Error("PipelineGenerator::generate: the prompt is empty");
  if (new_tokens < 0 || total > c.context) {
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
  cache_.clear();
  for (size_t i = 0; i < n; ++i)
    cache_.push_back(model.block(i).attn().empty_cache(1, c.context, plan.device_of(i + 1)));
  const Device& first = plan.device_of(0);
  const Device& last = plan.device_of(n + 1);
  const bool host_draw = v > Generator::kDeviceSampleMaxVocab;
  const bool greedy = options.temperature <= 0;
  const Tensor inv_temp = full({1}, greedy ? 1.0 : 1.0 / options.temperature, kF32, last);
  const double k =
      options.top_k > 0 && !greedy ? static_cast<double>(options.top_k) : static_cast<double>(v);
  const Tensor top_k = full({1}, k, kF32, last);
  const Tensor no_noise = zeros({v}, kF32, last);
  uint64_t state = options.seed;
  std::vector<std::function<detail::HostValues()>> reads;
  std::vector<int64_t> out;
  try {
    Tensor token;  // the last draw, on `last`
    int64_t host_token = -1;
    for (int64_t i = 0; i + 1 < total; ++i) {
      const bool fed = i < static_cast<int64_t>(prompt.size());
      Tensor in;
      if (fed || host_draw) {
        in = from_vector<int64_t>(
            std::vector<int64_t>{fed ? prompt[static_cast<size_t>(i)] : host_token}, {1}, first);
      } else {
        in = move(token, first);  // server to server
      }
      // One position tensor per device, uploaded to each.
      std::vector<Tensor> pos(plan.devices.size());
      auto pos_on = [&](const Device& d) -> const Tensor& {
        for (size_t j = 0; j < plan.devices.size(); ++j) {
          if (plan.devices[j] != d) continue;
          if (!pos[j].defined()) pos[j] = from_vector<int64_t>(std::vector<int64_t>{i}, {1}, d);
          return pos[j];
        }
        throw Error("PipelineGenerator: a layer's device is not in the plan");
      };
      Tensor x = model.embed_step(in, pos_on(first));
      for (size_t b = 0; b < n; ++b) {
        const Device& d = plan.device_of(b + 1);
        x = model.block(b).forward_step(move(x, d), pos_on(d), cache_[b]);
      }
      Tensor logits = model.head_rows(move(x, last));
      if (logits.dtype() != kF32) logits = logits.to(kF32);
      const bool draws = i + 1 >= static_cast<int64_t>(prompt.size());
      if (host_draw) {
        if (draws) {
          host_token = sample_token(logits.to_vector<float>(), options, state);
          out.push_back(host_token);
        }
        continue;
      }
      Tensor noise = no_noise;
      if (!greedy && draws) noise = from_vector<float>(internal::gumbel_noise(v, state), {v}, last);
      token = internal::draw_token(logits, inv_temp, top_k, noise);
      if (draws) reads.push_back(token.host_values_async());
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
