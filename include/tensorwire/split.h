// One model over several devices (docs/remote.md, "One model, several servers"): its layers
// placed on the devices by their free memory (place), and a GPT run as a pipeline over them,
// the activations and their gradients moving from server to server directly (Tensor::to between
// remote devices: never through this program), micro-batched so that the servers work at the
// same time.
//
//   tw::nn::GPT model(cfg);                                   // on the host
//   auto plan = tw::nn::place(model, {tw::Device::remote(a), tw::Device::remote(b)});
//   tw::nn::Pipeline pipe(model, plan, /*micro_batches=*/4);
//   tw::Tensor loss = pipe.forward_backward(x, y);            // gradients in the parameters
//   opt.step();                                               // each on its own server
#pragma once
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "tensorwire/export.h"
#include "tensorwire/nn.h"
#include "tensorwire/tensor.h"
#include "tensorwire/transformer.h"

TW_API_BEGIN

namespace tw::nn {

struct PlacePolicy {
  // Layers per device, in the devices' order (they must add up to the model's layers()); empty:
  // in proportion to each device's free memory.
  std::vector<int64_t> layers;
  // Bytes a layer needs on its device per byte of its parameters: 1 to hold them (inference);
  // training with Adam also holds their gradients and two moments (4). Activations come on top:
  // leave room for them with a factor above that.
  double memory_factor = 1.0;
};

// Where place() put a model's layers.
struct LayerPlan {
  std::vector<Device> devices;
  // Device i holds layers [first[i], first[i + 1]); first has devices.size() + 1 entries.
  std::vector<size_t> first;
  std::vector<uint64_t> bytes;  // parameter bytes on each device
  std::vector<uint64_t> free;   // free bytes each device had (kUnknown: not reported)
  static constexpr uint64_t kUnknown = std::numeric_limits<uint64_t>::max();
  size_t layer_count() const { return first.empty() ? 0 : first.back(); }
  // The device of layer i.
  const Device& device_of(size_t layer) const;
  // "cpu:0@tcp://127.0.0.1:4000: layers 0-7 (12.0 MiB of 30.1 MiB free); ..."
  std::string to_string() const;
};

// The free memory of a device: for a remote device, what its session may still take (its
// quota less what it holds) and its server (--max-memory less what all sessions hold), as the
// server reports them (tw::remote_stats; protocol 14 for --max-memory); for a local device,
// LayerPlan::kUnknown.
uint64_t free_memory(const Device& device);

// Puts the layers of `model` (Module::layers()) on `devices`, consecutive layers on each, in
// proportion to each device's free memory (free_memory) or as policy.layers says, and moves each
// layer's parameters to its device: each is uploaded to its own server only. Throws tw::Error,
// naming the sizes, when the model does not fit (a device's layers need more than it has free)
// or the split is malformed; then nothing has moved.
LayerPlan place(Module& model, const std::vector<Device>& devices, const PlacePolicy& policy = {});

// A GPT placed by place() (layer 0: the embeddings, 1..n: the blocks, n + 1: the final norm and
// head), run stage by stage: each device runs its layers, and the activations cross to the
// next device as a move between servers (its gradient crosses back the same way in backward).
// A batch is cut into micro_batches along its first dimension; the program sends every stage's
// work without waiting for it, so while one server works on micro-batch m + 1 the next works on
// m (GPipe: every forward, then every backward, the last micro-batch first). With one device
// the same ops run there: the unsplit run with the same micro-batching, bit for bit.
class Pipeline {
 public:
  Pipeline(GPT& model, LayerPlan plan, int64_t micro_batches = 1);
  // tokens i64 [B, T] (B a multiple of micro_batches) -> logits [B, T, V] on the last device.
  // Without autograd (under NoGradGuard) each device's part of a micro-batch runs as a
  // tw::graph::Step over its parameters there (a registered graph from the third call of a
  // shape on), with the same values bit for bit.
  Tensor forward(const Tensor& tokens);
  // Forward and backward of every micro-batch: the loss of micro-batch m is the mean
  // cross-entropy of its logits against its targets, divided by micro_batches, and its gradient
  // accumulates into the parameters. Returns the batch's loss (their sum) on the last device.
  Tensor forward_backward(const Tensor& tokens, const Tensor& targets);
  const LayerPlan& plan() const { return plan_; }
  int64_t micro_batches() const { return micro_; }
  // Training as graphs (off by default): forward_backward runs each device's part of a
  // micro-batch's forward, and of its backward, as a tw::graph::Step there (a registered graph
  // from the third call of a shape on), the backward computing the stage's forward again from
  // the stage's input (re-materialisation, as GPipe does: about a third more work, and no
  // activation kept between forward and backward but the stages' inputs). The gradients (and so
  // the parameters after the optimizer's step) equal the eager run's bit for bit. Not with
  // dropout in training mode (its masks are random): then the eager run.
  void set_graph_training(bool on);
  bool graph_training() const { return graph_training_; }
  // Graph replays over all the stages' steps so far.
  int64_t graph_replays() const;

 private:
  friend class PipelineGenerator;
  // Micro-batch rows [N, E] through layers [1, n], crossing devices where the plan does.
  Tensor run_rows(const Tensor& tokens);
  // The same without autograd (inference): each device's layers as one tw::graph::Step there.
  Tensor run_rows_graph(const Tensor& tokens);
  Tensor forward_backward_graph(const Tensor& tokens, const Tensor& targets);
  void make_steps();
  GPT& model_;
  LayerPlan plan_;
  int64_t micro_;
  bool graph_training_ = false;
  struct Steps;
  std::shared_ptr<Steps> steps_;
};

// Generation over a Pipeline's devices: each block's key/value cache lives on that block's
// device, and activations cross from server to server as in Pipeline; the drawn token moves from
// the last server to the first the same way, so a token costs the program a small frame per
// device (the position and a graph run) and one read of the token, never the activations.
// - Prefill: the prompt goes through the stages as prefill_chunks chunks of consecutive
//   positions (each a sequence of rows writing its keys and values into the caches at once), so
//   that while one server works on chunk c + 1 the next works on c. 0 chunks: one per device when
//   there is one device, else 4 per device (a short prompt: at most one per token).
// - Each server's part of a token's step, and of a prefill chunk, is a tw::graph::Step over that
//   server's parameters and caches (use_graph): from the third call of a shape on it replays one
//   registered graph there.
// Same draw as Generator::generate on the device (the same seed gives the same tokens up to the
// chunked prefill's float rounding); with the same prefill_chunks, the same tokens and logits bit
// for bit on one device and split over several, with or without graphs.
class PipelineGenerator {
 public:
  explicit PipelineGenerator(Pipeline& pipe, int64_t prefill_chunks = 0, bool use_graph = true);
  PipelineGenerator(const PipelineGenerator&) = delete;  // its steps hold its caches
  PipelineGenerator& operator=(const PipelineGenerator&) = delete;
  // The tokens after `prompt` (prompt + new_tokens <= context); new_tokens 0: the prefill alone.
  std::vector<int64_t> generate(const std::vector<int64_t>& prompt, int64_t new_tokens,
                                const SampleOptions& options = {});
  // Graph replays over all the servers' steps so far (0 without use_graph).
  int64_t graph_replays() const;

 private:
  struct Stage;
  Pipeline& pipe_;
  int64_t chunks_;
  bool use_graph_;
  std::vector<KVCache> cache_;
  std::vector<std::shared_ptr<Stage>> stages_;
};

// Tensor parallelism (Megatron style) of a GPT over N devices: every block's attention heads
// split over them (each device holds its heads' rows of qkv and the matching columns of proj),
// and its MLP (the first Linear's rows, the second's columns); each device's partial sums are
// added with tw::dist::all_reduce (Gloo, server to server), twice a block. Embeddings,
// LayerNorms and the row-parallel layers' biases are replicated on every device; the final norm
// and head live on the first. n_head must be a multiple of N. The forward equals the unsplit
// model's within float rounding (the sums' order differs); backward sends each all_reduce's
// gradient back to every device (server to server), and reduce_grads() then sums the replicated
// parameters' gradients, so that an optimizer over parameters() keeps the replicas identical.
class TensorParallelGPT {
 public:
  // Copies `model`'s parameters (on any device) into the shards, each uploaded to its device.
  TensorParallelGPT(GPT& model, const std::vector<Device>& devices);
  // tokens i64 [B, T] -> logits [B, T, V] on the first device.
  Tensor forward(const Tensor& tokens);
  // Mean cross-entropy against targets i64 [B, T], on the first device.
  Tensor loss(const Tensor& tokens, const Tensor& targets);
  // After backward(): sums the replicated parameters' gradients over the devices.
  void reduce_grads();
  // Every shard's parameters (give them all to one optimizer).
  std::vector<ParameterPtr> parameters() const;
  // Greedy or sampled (sample_token, on the host) generation: each device keeps the cache of its
  // own heads; a token costs the program a small frame per device and one read of the logits.
  std::vector<int64_t> generate(const std::vector<int64_t>& prompt, int64_t new_tokens,
                                const SampleOptions& options = {});
  const std::vector<Device>& devices() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// A move of x to `device` that autograd sees: backward moves the gradient back to x's device
// (between servers, directly).
Tensor move(const Tensor& x, const Device& device);

}  // namespace tw::nn
TW_API_END
