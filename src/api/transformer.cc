// Transformer modules and cached generation (tensorwire/transformer.h), composed from the Tensor
// API and the fused attention op, so they run on any device and autograd differentiates them.
// The modules work on rows [B*T, E] inside, so every Linear is the fused row op.
#include "tensorwire/transformer.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>

#include "core/shape.h"
#include "core/splitmix.h"
#include "tensorwire/autograd.h"

namespace tw::nn {

namespace {
// Dropout in training mode with probability p (the same mask rule as nn::Dropout).
Tensor dropout(const Tensor& x, double p, bool training) {
  if (!training || p == 0) return x;
  if (p == 1) return x * 0.0;
  const Tensor keep = bernoulli(full(x.shape(), 1.0 - p, x.dtype(), x.device()));
  return x * (keep * (1.0 / (1.0 - p)));
}

void check_dropout(double p, const char* who) {
  if (!(p >= 0 && p <= 1))
    throw Error(std::string(who) + ": dropout must lie in [0, 1], got " + std::to_string(p));
}

// A step's position: one i64, as a tensor on the step's device.
void check_pos(const Tensor& pos, const char* who) {
  if (pos.dtype() != kI64 || pos.numel() != 1) {
    throw Error(std::string(who) + ": pos must be an i64 tensor of one element, got " +
                std::string(dtype_name(pos.dtype())) + shape_str(pos.shape()));
  }
}
}  // namespace

// ---- MultiheadAttention ----
MultiheadAttention::MultiheadAttention(int64_t embed_dim, int64_t num_heads, double dropout,
                                       bool bias, const Placement& at)
    : e_(embed_dim), h_(num_heads), p_(dropout) {
  if (embed_dim < 1 || num_heads < 1 || embed_dim % num_heads != 0) {
    throw Error("MultiheadAttention: embed_dim " + std::to_string(embed_dim) +
                " must be a positive multiple of num_heads " + std::to_string(num_heads));
  }
  check_dropout(dropout, "MultiheadAttention");
  qkv_ = register_module("qkv", std::make_shared<Linear>(e_, 3 * e_, bias, at));
  proj_ = register_module("proj", std::make_shared<Linear>(e_, e_, bias, at));
}

Tensor MultiheadAttention::forward_rows(const Tensor& x, int64_t batch, int64_t len) {
  const int64_t d = e_ / h_;
  const Tensor qkv = (*qkv_)(x);  // [B*T, 3E]
  auto heads = [&](int64_t i) {   // [B, H, T, D]
    return qkv.slice(1, i * e_, (i + 1) * e_).reshape({batch, len, h_, d}).transpose(1, 2);
  };
  const Tensor y = scaled_dot_product_attention(heads(0), heads(1), heads(2), {}, true);
  const Tensor rows = y.transpose(1, 2).reshape({batch * len, e_});
  return dropout((*proj_)(rows), p_, is_training());
}

Tensor MultiheadAttention::forward(const Tensor& x) {
  if (x.dim() != 3 || x.size(2) != e_) {
    throw Error("MultiheadAttention: x must be [B, T, " + std::to_string(e_) + "], got " +
                shape_str(x.shape()));
  }
  const int64_t b = x.size(0), t = x.size(1);
  return forward_rows(x.reshape({b * t, e_}), b, t).reshape({b, t, e_});
}

Tensor MultiheadAttention::forward_step(const Tensor& x, const Tensor& pos, KVCache& cache) {
  check_pos(pos, "MultiheadAttention::forward_step");
  if (x.dim() != 2 || x.size(1) != e_) {
    throw Error("MultiheadAttention::forward_step: x must be [B, " + std::to_string(e_) +
                "], got " + shape_str(x.shape()));
  }
  const int64_t b = x.size(0), d = e_ / h_;
  if (!cache.k.defined() || cache.k.dim() != 4 || cache.k.size(0) != b || cache.k.size(1) != h_ ||
      cache.k.size(3) != d || !cache.v.defined() || cache.v.shape() != cache.k.shape()) {
    throw Error("MultiheadAttention::forward_step: the cache must hold k and v [" +
                std::to_string(b) + ", " + std::to_string(h_) + ", capacity, " + std::to_string(d) +
                "] (empty_cache makes one)");
  }
  const int64_t cap = cache.k.size(2);
  const Tensor qkv = (*qkv_)(x);  // [B, 3E]
  auto heads = [&](int64_t i) { return qkv.slice(1, i * e_, (i + 1) * e_).reshape({b, h_, 1, d}); };
  // Slot pos takes the new key and value; slots 0..pos are attended. Both come from comparing
  // the slot numbers with the position tensor, so no host value enters the step.
  const Tensor slots = arange(0, cap, 1, kI64, x.device());
  const Tensor here = slots.eq(pos).reshape({1, 1, cap, 1});
  cache.k = where(here, heads(1), cache.k);
  cache.v = where(here, heads(2), cache.v);
  const Tensor seen = slots.le(pos).reshape({1, 1, 1, cap});
  const Tensor y = scaled_dot_product_attention(heads(0), cache.k, cache.v, seen);
  return dropout((*proj_)(y.reshape({b, e_})), p_, is_training());
}

Tensor MultiheadAttention::forward_chunk(const Tensor& x, const Tensor& pos, const Tensor& slot,
                                         KVCache& cache) {
  if (x.dim() != 2 || x.size(1) != e_ || pos.dtype() != kI64 || pos.dim() != 1 ||
      pos.size(0) != x.size(0)) {
    throw Error("MultiheadAttention::forward_chunk: x must be [L, " + std::to_string(e_) +
                "] and pos i64 [L], got " + shape_str(x.shape()) + " and " +
                std::string(dtype_name(pos.dtype())) + shape_str(pos.shape()));
  }
  const int64_t len = x.size(0), d = e_ / h_;
  if (!cache.k.defined() || cache.k.dim() != 4 || cache.k.size(0) != 1 || cache.k.size(1) != h_ ||
      cache.k.size(3) != d || !cache.v.defined() || cache.v.shape() != cache.k.shape() ||
      slot.dtype() != kI64 || slot.numel() != cache.k.size(2)) {
    throw Error("MultiheadAttention::forward_chunk: the cache must hold k and v [1, " +
                std::to_string(h_) + ", capacity, " + std::to_string(d) +
                "] (empty_cache makes one) and slot i64 [capacity], got slot " +
                shape_str(slot.shape()));
  }
  const int64_t cap = cache.k.size(2);
  const Tensor qkv = (*qkv_)(x);  // [L, 3E]
  auto heads = [&](int64_t i) {   // [1, H, L, D]
    return qkv.slice(1, i * e_, (i + 1) * e_).reshape({1, len, h_, d}).transpose(1, 2);
  };
  // Slot j takes row slot[j] of the chunk when the chunk holds its position; a slot's position
  // against the chunk's positions says both which slots it writes and which each row attends.
  const Tensor slots = arange(0, cap, 1, kI64, x.device());
  const Tensor mine = pos.reshape({len, 1}).eq(slots.reshape({1, cap}));  // [L, cap]
  const Tensor here = mine.to(kF32).sum(0).gt(0.5).reshape({1, 1, cap, 1});
  cache.k = where(here, heads(1).index_select(2, slot), cache.k);
  cache.v = where(here, heads(2).index_select(2, slot), cache.v);
  const Tensor seen = slots.reshape({1, cap}).le(pos.reshape({len, 1})).reshape({1, 1, len, cap});
  const Tensor y = scaled_dot_product_attention(heads(0), cache.k, cache.v, seen);
  return dropout((*proj_)(y.transpose(1, 2).reshape({len, e_})), p_, is_training());
}

KVCache MultiheadAttention::empty_cache(int64_t batch, int64_t capacity,
                                        const Device& device) const {
  // The weights' dtype, f32 for packed (quantized) weights.
  const DType dt = qkv_->quantized() ? kF32 : qkv_->weight()->value().dtype();
  const Shape s = {batch, h_, capacity, e_ / h_};
  return {zeros(s, dt, device), zeros(s, dt, device)};
}

std::string MultiheadAttention::name() const {
  return "MultiheadAttention(embed_dim=" + std::to_string(e_) +
         ", num_heads=" + std::to_string(h_) + ", causal=true)";
}

// ---- TransformerBlock ----
TransformerBlock::TransformerBlock(int64_t embed_dim, int64_t num_heads, double dropout, bool bias,
                                   const Placement& at)
    : e_(embed_dim), p_(dropout) {
  check_dropout(dropout, "TransformerBlock");
  ln1_ = register_module("ln1", std::make_shared<LayerNorm>(Shape{e_}, 1e-5, true, at));
  attn_ = register_module("attn",
                          std::make_shared<MultiheadAttention>(e_, num_heads, dropout, bias, at));
  ln2_ = register_module("ln2", std::make_shared<LayerNorm>(Shape{e_}, 1e-5, true, at));
  auto mlp = std::make_shared<Sequential>();
  mlp->push_back(std::make_shared<Linear>(e_, 4 * e_, bias, at));
  mlp->push_back(std::make_shared<GELU>());
  mlp->push_back(std::make_shared<Linear>(4 * e_, e_, bias, at));
  mlp_ = register_module("mlp", mlp);
}

Tensor TransformerBlock::mlp_rows(const Tensor& x) {
  return dropout((*mlp_)((*ln2_)(x)), p_, is_training());
}

Tensor TransformerBlock::forward_rows(const Tensor& x, int64_t batch, int64_t len) {
  const Tensor h = x + attn_->forward_rows((*ln1_)(x), batch, len);
  return h + mlp_rows(h);
}

Tensor TransformerBlock::forward(const Tensor& x) {
  if (x.dim() != 3 || x.size(2) != e_) {
    throw Error("TransformerBlock: x must be [B, T, " + std::to_string(e_) + "], got " +
                shape_str(x.shape()));
  }
  const int64_t b = x.size(0), t = x.size(1);
  return forward_rows(x.reshape({b * t, e_}), b, t).reshape({b, t, e_});
}

Tensor TransformerBlock::forward_step(const Tensor& x, const Tensor& pos, KVCache& cache) {
  const Tensor h = x + attn_->forward_step((*ln1_)(x), pos, cache);
  return h + mlp_rows(h);
}

Tensor TransformerBlock::forward_chunk(const Tensor& x, const Tensor& pos, const Tensor& slot,
                                       KVCache& cache) {
  const Tensor h = x + attn_->forward_chunk((*ln1_)(x), pos, slot, cache);
  return h + mlp_rows(h);
}

// ---- GPT ----
GPT::GPT(const GPTConfig& config, const Placement& at) : c_(config) {
  if (c_.vocab_size < 1 || c_.context < 1 || c_.n_layer < 0) {
    throw Error("GPT: vocab_size and context must be >= 1 and n_layer >= 0, got " +
                std::to_string(c_.vocab_size) + ", " + std::to_string(c_.context) + ", " +
                std::to_string(c_.n_layer));
  }
  check_dropout(c_.dropout, "GPT");
  const int64_t e = c_.n_embd;
  wte_ = register_module("wte", std::make_shared<Embedding>(c_.vocab_size, e, at));
  wpe_ = register_module("wpe", std::make_shared<Embedding>(c_.context, e, at));
  blocks_ = register_module("blocks", std::make_shared<Sequential>());
  for (int64_t i = 0; i < c_.n_layer; ++i) {
    block_list_.push_back(
        std::make_shared<TransformerBlock>(e, c_.n_head, c_.dropout, c_.bias, at));
    blocks_->push_back(block_list_.back());
  }
  ln_f_ = register_module("ln_f", std::make_shared<LayerNorm>(Shape{e}, 1e-5, true, at));
  if (!c_.tied)
    head_ = register_module("head", std::make_shared<Linear>(e, c_.vocab_size, false, at));
  // GPT-2's initialisation, in named_parameters order.
  const double resid_std =
      0.02 / std::sqrt(2.0 * static_cast<double>(std::max<int64_t>(c_.n_layer, 1)));
  auto ends_with = [](const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() &&
           s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  for (auto& [name, p] : named_parameters()) {
    const Shape& s = p->value().shape();
    if (name.find(".ln") != std::string::npos || name.rfind("ln_f.", 0) == 0) continue;
    if (ends_with(name, ".bias")) {
      p->set(zeros(s, at.dtype, at.device));
    } else {
      const bool resid = ends_with(name, "attn.proj.weight") || ends_with(name, "mlp.2.weight");
      p->set(normal(s, 0.0, resid ? resid_std : 0.02, at.dtype, at.device));
    }
  }
}

Tensor GPT::head_rows(const Tensor& x) {
  const Tensor h = (*ln_f_)(x);
  return head_ ? (*head_)(h) : h.matmul(wte_->weight()->value().t());
}

Tensor GPT::logits_rows(const Tensor& tokens) {
  if (tokens.dim() != 2 || tokens.dtype() != kI64 || tokens.size(1) > c_.context) {
    throw Error("GPT: tokens must be i64 [B, T] with T <= " + std::to_string(c_.context) +
                ", got " + std::string(dtype_name(tokens.dtype())) + shape_str(tokens.shape()));
  }
  const int64_t b = tokens.size(0), t = tokens.size(1);
  Tensor x = embed_rows(tokens);
  for (const auto& blk : block_list_) x = blk->forward_rows(x, b, t);
  return head_rows(x);
}

Tensor GPT::embed_rows(const Tensor& tokens) {
  const int64_t b = tokens.size(0), t = tokens.size(1), e = c_.n_embd;
  const Tensor tok = (*wte_)(tokens);                         // [B, T, E]
  const Tensor pos = wpe_->weight()->value().slice(0, 0, t);  // [T, E]
  return dropout((tok + pos).reshape({b * t, e}), c_.dropout, is_training());
}

Tensor GPT::embed_step(const Tensor& tokens, const Tensor& pos) {
  return (*wte_)(tokens) + (*wpe_)(pos.reshape({-1}));  // [B, E] + [1, E], or [L, E] twice
}

std::vector<std::vector<Module*>> GPT::layers() {
  std::vector<std::vector<Module*>> out = {{wte_.get(), wpe_.get()}};
  for (const auto& blk : block_list_) out.push_back({blk.get()});
  out.push_back({ln_f_.get()});
  if (head_) out.back().push_back(head_.get());
  return out;
}

Tensor GPT::forward(const Tensor& tokens) {
  const Tensor rows = logits_rows(tokens);
  return rows.reshape({tokens.size(0), tokens.size(1), c_.vocab_size});
}

Tensor GPT::loss(const Tensor& tokens, const Tensor& targets) {
  if (targets.shape() != tokens.shape()) {
    throw Error("GPT::loss: targets " + shape_str(targets.shape()) + " must match tokens " +
                shape_str(tokens.shape()));
  }
  return cross_entropy(logits_rows(tokens), targets.reshape({-1}));
}

Tensor GPT::forward_step(const Tensor& tokens, const Tensor& pos, std::vector<KVCache>& cache) {
  check_pos(pos, "GPT::forward_step");
  if (tokens.dim() != 1 || tokens.dtype() != kI64) {
    throw Error("GPT::forward_step: tokens must be i64 [B], got " +
                std::string(dtype_name(tokens.dtype())) + shape_str(tokens.shape()));
  }
  if (cache.size() != block_list_.size()) {
    throw Error("GPT::forward_step: the cache has " + std::to_string(cache.size()) +
                " layers, the model " + std::to_string(block_list_.size()));
  }
  Tensor x = embed_step(tokens, pos);
  for (size_t i = 0; i < block_list_.size(); ++i)
    x = block_list_[i]->forward_step(x, pos, cache[i]);
  return head_rows(x);
}

std::vector<KVCache> GPT::empty_cache(int64_t batch, const Device& device) const {
  std::vector<KVCache> out;
  for (const auto& blk : block_list_)
    out.push_back(blk->attn().empty_cache(batch, c_.context, device));
  return out;
}

// ---- sampling ----
int64_t sample_token(const std::vector<float>& logits, const SampleOptions& o, uint64_t& state) {
  if (logits.empty()) throw Error("sample_token: no logits");
  const auto n = static_cast<int64_t>(logits.size());
  if (o.temperature <= 0) {
    return std::max_element(logits.begin(), logits.end()) - logits.begin();
  }
  // Candidates by logit, highest first (ties: lower index first), cut to top_k.
  std::vector<int64_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(),
                   [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
  if (o.top_k > 0 && o.top_k < n) idx.resize(static_cast<size_t>(o.top_k));
  const double top = logits[idx[0]];
  std::vector<double> w(idx.size());
  double sum = 0;
  for (size_t i = 0; i < idx.size(); ++i) {
    w[i] = std::exp((static_cast<double>(logits[idx[i]]) - top) / o.temperature);
    sum += w[i];
  }
  const double u = static_cast<double>(splitmix64_next(state) >> 11) * 0x1.0p-53 * sum;
  double acc = 0;
  for (size_t i = 0; i < idx.size(); ++i) {
    acc += w[i];
    if (u < acc) return idx[i];
  }
  return idx.back();
}

// ---- Generator ----
Generator::Generator(GPT& model, bool use_graph)
    : model_(model), device_(model.parameters().at(0)->value().device()), use_graph_(use_graph) {
  cache_ = model_.empty_cache(1, device_);
  if (!use_graph) return;
  step_ = std::make_unique<graph::Step>(
      [this](const std::vector<Tensor>& a) {
        return std::vector<Tensor>{model_.forward_step(a[0], a[1], cache_)};
      },
      slots());
}

std::vector<graph::Slot> Generator::slots() {
  std::vector<graph::Slot> out;
  for (const ParameterPtr& p : model_.parameters())
    out.push_back({[p] { return p->value(); }, [p](Tensor t) { p->set(std::move(t)); }});
  for (size_t i = 0; i < cache_.size(); ++i) {
    out.push_back(
        {[this, i] { return cache_[i].k; }, [this, i](Tensor t) { cache_[i].k = std::move(t); }});
    out.push_back(
        {[this, i] { return cache_[i].v; }, [this, i](Tensor t) { cache_[i].v = std::move(t); }});
  }
  return out;
}

// One position, then the next token drawn on the device: a = {token [1], pos [1], 1/temperature
// [1], k [1] (f32), gumbel noise [V]}. The draw is argmax(logits / temperature + noise) over the
// k tokens of highest logits: with Gumbel noise a sample from softmax(logits / temperature)
// restricted to the top k (the Gumbel-max trick), with zero noise the argmax.
Tensor Generator::sample_on_device(const std::vector<Tensor>& a) {
  return internal::draw_token(model_.forward_step(a[0], a[1], cache_), a[2], a[3], a[4]);
}

namespace internal {
Tensor draw_token(const Tensor& logits, const Tensor& inv_temp, const Tensor& top_k,
                  const Tensor& noise) {
  const int64_t v = noise.numel();
  const Tensor z = logits.reshape({v}) * inv_temp;
  // rank[i]: how many logits exceed logit i (the [V, V] comparison: generate() keeps the draw on
  // the host beyond kDeviceSampleMaxVocab).
  const Tensor rank = z.reshape({1, v}).gt(z.reshape({v, 1})).to(z.dtype()).sum(1);
  const Tensor kept = z.masked_fill(rank.ge(top_k), -std::numeric_limits<double>::infinity());
  return (kept + noise).argmax(0).reshape({1});
}

std::pair<Tensor, Tensor> chunk_positions(int64_t start, int64_t len, int64_t capacity,
                                          const Device& device) {
  std::vector<int64_t> pos(static_cast<size_t>(len)), slot(static_cast<size_t>(capacity));
  for (int64_t i = 0; i < len; ++i) pos[static_cast<size_t>(i)] = start + i;
  for (int64_t j = 0; j < capacity; ++j)
    slot[static_cast<size_t>(j)] = std::clamp<int64_t>(j - start, 0, len - 1);
  return {from_vector<int64_t>(std::move(pos), {len}, device),
          from_vector<int64_t>(std::move(slot), {capacity}, device)};
}

std::vector<float> gumbel_noise(int64_t v, uint64_t& state) {
  std::vector<float> g(static_cast<size_t>(v));
  for (float& x : g) {
    const double u = (static_cast<double>(splitmix64_next(state) >> 11) + 0.5) * 0x1.0p-53;
    x = static_cast<float>(-std::log(-std::log(u)));
  }
  return g;
}
}  // namespace internal

void Generator::reset() {
  cache_ = model_.empty_cache(1, device_);
  pos_ = 0;
}

std::vector<float> Generator::step(int64_t token) {
  if (pos_ >= model_.config().context) {
    throw Error("Generator: the cache holds " + std::to_string(model_.config().context) +
                " positions, all used (reset() starts again)");
  }
  if (token < 0 || token >= model_.config().vocab_size) {
    throw Error("Generator: token " + std::to_string(token) + " is outside the vocabulary of " +
                std::to_string(model_.config().vocab_size));
  }
  NoGradGuard no_grad;
  const bool was_training = model_.is_training();
  model_.eval();
  const Tensor tok = from_vector<int64_t>(std::vector<int64_t>{token}, {1}, device_);
  const Tensor pos = from_vector<int64_t>(std::vector<int64_t>{pos_}, {1}, device_);
  Tensor logits;
  try {
    logits = step_ ? (*step_)({tok, pos})[0] : model_.forward_step(tok, pos, cache_);
  } catch (...) {
    model_.train(was_training);
    throw;
  }
  model_.train(was_training);
  ++pos_;
  if (logits.dtype() != kF32) logits = logits.to(kF32);
  return logits.to_vector<float>();
}

std::vector<int64_t> Generator::generate(const std::vector<int64_t>& prompt, int64_t new_tokens,
                                         const SampleOptions& options) {
  if (prompt.empty()) throw Error("Generator::generate: the prompt is empty");
  const int64_t total = static_cast<int64_t>(prompt.size()) + new_tokens;
  const int64_t v = model_.config().vocab_size;
  if (new_tokens < 0 || total > model_.config().context) {
    throw Error("Generator::generate: prompt " + std::to_string(prompt.size()) + " + " +
                std::to_string(new_tokens) + " new tokens exceed the context of " +
                std::to_string(model_.config().context));
  }
  for (int64_t t : prompt) {
    if (t < 0 || t >= v) {
      throw Error("Generator::generate: token " + std::to_string(t) +
                  " is outside the vocabulary of " + std::to_string(v));
    }
  }
  reset();
  uint64_t state = options.seed;
  if (v > kDeviceSampleMaxVocab) {  // the draw on the host, from the logits read back
    std::vector<float> logits;
    for (int64_t t : prompt) logits = step(t);
    std::vector<int64_t> out;
    for (int64_t i = 0; i < new_tokens; ++i) {
      out.push_back(sample_token(logits, options, state));
      if (i + 1 < new_tokens) logits = step(out.back());
    }
    return out;
  }
  // The draw on the device: each token's step takes the previous step's token tensor, so the
  // program never waits for a token before sending the next step, and the reads (one per token)
  // come back while the device works on.
  NoGradGuard no_grad;
  const bool was_training = model_.is_training();
  model_.eval();
  const bool greedy = options.temperature <= 0;
  const DType dt = kF32;
  const Tensor inv_temp = full({1}, greedy ? 1.0 : 1.0 / options.temperature, dt, device_);
  const double k =
      options.top_k > 0 && !greedy ? static_cast<double>(options.top_k) : static_cast<double>(v);
  const Tensor top_k = full({1}, k, dt, device_);
  const Tensor no_noise = zeros({v}, dt, device_);
  if (use_graph_ && !sample_step_) {
    sample_step_ = std::make_unique<graph::Step>(
        [this](const std::vector<Tensor>& a) { return std::vector<Tensor>{sample_on_device(a)}; },
        slots());
  }
  std::vector<std::function<detail::HostValues()>> reads;
  try {
    Tensor token;
    for (int64_t i = 0; i + 1 < total; ++i) {
      const bool fed = i < static_cast<int64_t>(prompt.size());
      const Tensor in =
          fed ? from_vector<int64_t>(std::vector<int64_t>{prompt[i]}, {1}, device_) : token;
      const Tensor pos = from_vector<int64_t>(std::vector<int64_t>{pos_}, {1}, device_);
      // Noise only where a token is drawn (the prompt's own positions ignore theirs).
      Tensor noise = no_noise;
      if (!greedy && i + 1 >= static_cast<int64_t>(prompt.size())) {
        noise = from_vector<float>(internal::gumbel_noise(v, state), {v}, device_);
      }
      const std::vector<Tensor> args = {in, pos, inv_temp, top_k, noise};
      token = sample_step_ ? (*sample_step_)(args)[0] : sample_on_device(args);
      ++pos_;
      if (i + 1 >= static_cast<int64_t>(prompt.size())) reads.push_back(token.host_values_async());
    }
  } catch (...) {
    model_.train(was_training);
    throw;
  }
  model_.train(was_training);
  std::vector<int64_t> out;
  for (auto& r : reads) {
    const detail::HostValues hv = r();
    out.push_back(*static_cast<const int64_t*>(hv.data));
  }
  return out;
}

}  // namespace tw::nn
