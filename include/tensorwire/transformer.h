// Transformer modules over tw::Tensor and autograd (tensorwire/nn.h): causal multi-head
// self-attention, a pre-norm block, a small GPT, and token generation with a key/value cache that
// runs as one registered graph per model.
//
//   tw::manual_seed(0);
//   tw::nn::GPT model({.vocab_size = 62, .context = 128, .n_layer = 4, .n_head = 4, .n_embd =
//   192}); tw::Tensor loss = model.loss(x, y);        // x, y: i64 [B, T] tw::nn::Generator
//   gen(model); std::vector<int64_t> out = gen.generate({prompt...}, 100, {.temperature = 0.8,
//   .top_k = 10});
//
// Parameter names follow this PyTorch module (bench/lm_torch.py holds it), so that a safetensors
// file saved from one loads into the other with strict names:
//   wte.weight [V, E], wpe.weight [C, E],
//   blocks.{i}.ln1.{weight,bias}, blocks.{i}.attn.qkv.{weight,bias} [3E, E] (rows: q, k, v; within
//   each, head h holds rows h*D .. h*D+D-1), blocks.{i}.attn.proj.{weight,bias},
//   blocks.{i}.ln2.{weight,bias}, blocks.{i}.mlp.0.{weight,bias} [4E, E],
//   blocks.{i}.mlp.2.{weight,bias} [E, 4E], ln_f.{weight,bias}, head.weight [V, E] (untied only).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tensorwire/export.h"
#include "tensorwire/graph.h"
#include "tensorwire/nn.h"
#include "tensorwire/tensor.h"

TW_API_BEGIN

namespace tw::nn {

// The keys and values one attention layer has seen: k, v [B, H, capacity, D]; slot p holds
// position p's (slots past the current position hold zeros or stale values, never attended).
struct KVCache {
  Tensor k, v;
};

// Causal multi-head self-attention with one fused q/k/v projection ("qkv") and an output
// projection ("proj"), through the fused scaled_dot_product_attention op. Dropout, when p > 0, is
// applied to the output (the fused op has no dropout on the attention weights).
class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, double dropout = 0.0, bool bias = true,
                     const Placement& at = {});
  // x [B, T, E] -> [B, T, E]; position t attends to positions <= t.
  Tensor forward(const Tensor& x) override;
  // The same over rows x [B*T, E] of B sequences of length T -> [B*T, E].
  Tensor forward_rows(const Tensor& x, int64_t batch, int64_t len);
  // One new position per row: x [B, E] at position pos (i64 [1], on x's device). Writes the
  // row's key and value into slot pos of `cache` (rebinding cache.k and cache.v) and attends to
  // slots 0..pos. -> [B, E]. The position is a tensor, so a captured step serves every position.
  Tensor forward_step(const Tensor& x, const Tensor& pos, KVCache& cache);
  // A chunk of L consecutive positions of one sequence (a prompt's prefill): x [L, E] at
  // positions pos (i64 [L], ascending, consecutive), `slot` (i64 [capacity]: for each cache
  // slot, the row of the chunk it takes, clamped into [0, L); the rows outside the chunk keep
  // their slot) from chunk_slots(). Writes the chunk's keys and values into their slots of
  // `cache` (batch 1) and attends each row to slots 0..its position. -> [L, E]. Every host
  // value enters through tensors, so one captured chunk serves every offset.
  Tensor forward_chunk(const Tensor& x, const Tensor& pos, const Tensor& slot, KVCache& cache);
  // A zero cache for `batch` rows and `capacity` positions on `device`.
  KVCache empty_cache(int64_t batch, int64_t capacity, const Device& device) const;
  std::string name() const override;
  int64_t embed_dim() const { return e_; }
  int64_t num_heads() const { return h_; }

 private:
  int64_t e_, h_;
  double p_;
  std::shared_ptr<Linear> qkv_, proj_;
};

// Pre-norm block: x + drop(attn(ln1(x))), then x + drop(mlp(ln2(x))) with mlp =
// Linear(E, 4E), GELU, Linear(4E, E) (a Sequential: "mlp.0", "mlp.2").
class TransformerBlock : public Module {
 public:
  TransformerBlock(int64_t embed_dim, int64_t num_heads, double dropout = 0.0, bool bias = true,
                   const Placement& at = {});
  Tensor forward(const Tensor& x) override;                          // [B, T, E] -> [B, T, E]
  Tensor forward_rows(const Tensor& x, int64_t batch, int64_t len);  // rows [B*T, E]
  // x [B, E] at position pos (i64 [1]); see MultiheadAttention::forward_step.
  Tensor forward_step(const Tensor& x, const Tensor& pos, KVCache& cache);
  // x [L, E], a chunk of one sequence; see MultiheadAttention::forward_chunk.
  Tensor forward_chunk(const Tensor& x, const Tensor& pos, const Tensor& slot, KVCache& cache);
  std::string name() const override { return "TransformerBlock"; }
  MultiheadAttention& attn() { return *attn_; }

 private:
  Tensor mlp_rows(const Tensor& x);  // drop(mlp(ln2(x))) over rows [N, E]
  int64_t e_;
  double p_;
  std::shared_ptr<LayerNorm> ln1_, ln2_;
  std::shared_ptr<MultiheadAttention> attn_;
  std::shared_ptr<Sequential> mlp_;
};

struct GPTConfig {
  int64_t vocab_size = 0;
  int64_t context = 128;  // positions: the size of wpe and of a generation's cache
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 192;
  double dropout = 0.0;
  bool bias = true;   // biases in the Linear layers
  bool tied = false;  // the head reuses wte.weight (no head.weight parameter)
};

// Token and position embeddings, n_layer blocks, a final LayerNorm and a linear head. Weights are
// initialised N(0, 0.02) (as GPT-2), the residual projections' N(0, 0.02 / sqrt(2 n_layer)),
// biases zero, LayerNorms one and zero; all from the global seeded generator.
class GPT : public Module {
 public:
  explicit GPT(const GPTConfig& config, const Placement& at = {});
  // tokens i64 [B, T] (T <= context) -> logits [B, T, V].
  Tensor forward(const Tensor& tokens) override;
  // Mean cross-entropy of forward(tokens) against targets i64 [B, T].
  Tensor loss(const Tensor& tokens, const Tensor& targets);
  // Next-token logits [B, V] for tokens i64 [B] at position pos (i64 [1]), updating `cache`
  // (one KVCache per block, from empty_cache()).
  Tensor forward_step(const Tensor& tokens, const Tensor& pos, std::vector<KVCache>& cache);
  std::vector<KVCache> empty_cache(int64_t batch, const Device& device) const;
  std::string name() const override { return "GPT"; }
  const GPTConfig& config() const { return c_; }

  // The pieces forward() and forward_step() are made of, for running the model split over
  // several devices (tensorwire/split.h); layers() lists their modules: {wte, wpe}, each block,
  // {ln_f, head}.
  std::vector<std::vector<Module*>> layers() override;
  // Token and position embeddings of tokens i64 [B, T] as rows [B*T, E] (dropout applied).
  Tensor embed_rows(const Tensor& tokens);
  // The same for one position: tokens i64 [B] at pos (i64 [1]) -> [B, E]; or for a chunk of one
  // sequence, tokens i64 [L] at positions pos (i64 [L]) -> [L, E].
  Tensor embed_step(const Tensor& tokens, const Tensor& pos);
  TransformerBlock& block(size_t i) { return *block_list_.at(i); }
  size_t block_count() const { return block_list_.size(); }
  Tensor head_rows(const Tensor& x);  // final norm and head over rows [N, E] -> [N, V]

 private:
  Tensor logits_rows(const Tensor& tokens);  // [B, T] -> [B*T, V]
  GPTConfig c_;
  std::shared_ptr<Embedding> wte_, wpe_;
  std::shared_ptr<Sequential> blocks_;  // named "blocks" (children "0", "1", ...)
  std::vector<std::shared_ptr<TransformerBlock>> block_list_;  // the same blocks
  std::shared_ptr<LayerNorm> ln_f_;
  std::shared_ptr<Linear> head_;
};

struct SampleOptions {
  double temperature = 1.0;  // <= 0: greedy (argmax)
  int64_t top_k = 0;         // > 0: sample among the k most likely tokens only
  uint64_t seed = 0;         // the sampler's own generator (splitmix64 on the host)
};

// Picks a token from one row of logits: greedy, or a draw from softmax(logits / temperature)
// restricted to the top_k, with `state` the sampler's generator (advanced by one draw).
int64_t sample_token(const std::vector<float>& logits, const SampleOptions& o, uint64_t& state);

// Generation with a key/value cache, one sequence (batch 1) at a time. Each token runs the
// model's forward_step; with use_graph that step is a tw::graph::Step over the parameters and
// the caches, so from the third token on it replays one registered graph.
//  - step(token) returns the logits: a token costs one frame up (the token, the position and the
//    graph run) and one read of the logits.
//  - generate() draws each token on the device inside the step (argmax of logits / temperature
//    plus Gumbel noise drawn on the host from `seed`, over the top_k logits: a sample from the
//    tempered softmax over the top k; greedy without noise), and feeds it to the next step there:
//    a token costs one frame up (the position, the noise and the graph run) and one read, and
//    the program sends the next token's step without waiting for that read. The same seed gives
//    the same tokens on every device. Vocabularies over kDeviceSampleMaxVocab (where the top-k
//    rank, a [V, V] comparison, would cost too much) draw on the host with sample_token.
class Generator {
 public:
  explicit Generator(GPT& model, bool use_graph = true);
  // Clears the cache: the next token is at position 0.
  void reset();
  // Feeds `token` at the next position; returns the next-token logits [V].
  std::vector<float> step(int64_t token);
  // reset(), feeds the prompt, then samples `new_tokens` tokens (prompt + new <= context).
  // Returns the new tokens.
  std::vector<int64_t> generate(const std::vector<int64_t>& prompt, int64_t new_tokens,
                                const SampleOptions& options = {});
  int64_t position() const { return pos_; }
  // The step of step() and that of generate() (null until used, and without use_graph).
  const graph::Step* graph_step() const { return step_.get(); }
  const graph::Step* sample_step() const { return sample_step_.get(); }
  static constexpr int64_t kDeviceSampleMaxVocab = 4096;

 private:
  std::vector<graph::Slot> slots();  // the parameters, then each layer's k and v
  Tensor sample_on_device(const std::vector<Tensor>& args);
  GPT& model_;
  Device device_;
  bool use_graph_;
  std::vector<KVCache> cache_;
  std::unique_ptr<graph::Step> step_, sample_step_;
  int64_t pos_ = 0;
};

namespace internal {
// Generator::generate()'s draw on the device: argmax(logits [V] * inv_temp + noise [V]) over the
// top_k (f32 [1]) highest logits, -> i64 [1]; and the Gumbel noise [V] it adds, drawn on the host
// from `state`. Shared with tw::nn::PipelineGenerator (tensorwire/split.h).
Tensor draw_token(const Tensor& logits, const Tensor& inv_temp, const Tensor& top_k,
                  const Tensor& noise);
std::vector<float> gumbel_noise(int64_t v, uint64_t& state);
// The host side of MultiheadAttention::forward_chunk for positions [start, start + len) of a cache
// of `capacity` slots: pos (i64 [len]) and slot (i64 [capacity]), on `device`.
std::pair<Tensor, Tensor> chunk_positions(int64_t start, int64_t len, int64_t capacity,
                                          const Device& device);
}  // namespace internal

}  // namespace tw::nn
TW_API_END
