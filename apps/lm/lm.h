// The character-level language-model example's pieces, shared by apps/train_lm.cc and the
// benchmark bench/lm_bench.cc: the text (data/kjv_genesis_exodus.txt.gz, see data/PROVENANCE.md),
// its character vocabulary, the batches (random windows drawn from a seeded generator on the
// host, cut out of the text on the device), and a training step that runs as one graph.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tensorwire/checkpoint.h"
#include "tensorwire/graph.h"
#include "tensorwire/optim.h"
#include "tensorwire/tensorwire.h"
#include "tensorwire/transformer.h"

namespace tw::lm {

// The attribution printed beside the text.
extern const char* const kAttribution;

// Where the text lives: $TW_LM_TEXT, else the copy in the source tree.
std::string default_path();

// A gzip-compressed (or plain) text file's bytes. Throws tw::Error naming the file.
std::string load_text(const std::string& path);

// The distinct bytes of a text, sorted: token i is chars[i].
struct Vocab {
  std::string chars;
  explicit Vocab(const std::string& text);
  int64_t size() const { return static_cast<int64_t>(chars.size()); }
  std::vector<int64_t> encode(const std::string& s) const;  // unknown bytes throw tw::Error
  std::string decode(const std::vector<int64_t>& tokens) const;

 private:
  int16_t index_[256];
};

// Batch `step`'s window starts: `batch` offsets in [0, n_tokens - context - 1], drawn from a
// splitmix64 seeded with (seed, step), so any program (the PyTorch benchmark included) can make
// the same batches.
std::vector<int64_t> batch_offsets(int64_t n_tokens, int64_t context, int64_t batch, uint64_t seed,
                                   int64_t step);

// (x, y) of the windows at `offsets` (i64 [B] on text's device) of text (i64 [N]): x [B, T] and y
// the next tokens [B, T], gathered on the device.
std::pair<Tensor, Tensor> windows(const Tensor& text, const Tensor& offsets, int64_t context);

// The settings that decide a training run's every bit besides its step count (the model's
// shape is checked by the checkpoint itself): what a checkpoint records and a resume checks.
std::map<std::string, std::string> run_settings(const nn::GPTConfig& cfg, double lr, int64_t batch,
                                                uint64_t seed, int64_t n_tokens);

// Trains a GPT with Adam on windows of a text on the model's device. Each step uploads only
// the batch's offsets; with use_graph the whole step (windows, forward, loss, backward, update)
// is a tw::graph::Step: replayed as one registered graph from the third step on. The losses stay
// on the device until read.
class Trainer {
 public:
  Trainer(nn::GPT& model, double lr, const std::vector<int64_t>& tokens, int64_t batch,
          uint64_t seed, bool use_graph = true);
  // Runs step number `step` (its batch is batch_offsets(.., step)); returns its loss (on the
  // device).
  Tensor step(int64_t step);
  const graph::Step* graph_step() const { return graph_.get(); }
  optim::Adam& optimizer() { return *opt_; }

  // Checkpoints (tw::Checkpoint): the parameters, Adam's state (moments and step counts), the
  // random generator's state (dropout's masks) and `steps_done`, with `run`: the settings a
  // resumed run must share to go on bit for bit (run_settings()). Taken between steps; with
  // async the download and the write go on while training does (Checkpoint::save_async).
  void save(Checkpoint& ckpt, int64_t steps_done, const std::map<std::string, std::string>& run,
            bool async = true);
  // Loads the newest valid checkpoint in `ckpt` (before the first step()): returns the steps
  // it had done (the next step to run), or 0 (nothing changed) when there is none. Throws
  // tw::Error when its settings differ from `run`.
  int64_t restore(const Checkpoint& ckpt, const std::map<std::string, std::string>& run);

 private:
  nn::GPT& model_;
  std::unique_ptr<optim::Adam> opt_;
  Tensor text_;
  int64_t n_, batch_;
  uint64_t seed_;
  std::unique_ptr<graph::Step> graph_;
};

}  // namespace tw::lm
