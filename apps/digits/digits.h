// The handwritten-digits training example's pieces, shared by apps/train_digits.cc, the training
// tests (tests/unit/train) and the training benchmark (bench/train_bench.cc): the data set
// (data/digits.csv.gz, see data/PROVENANCE.md), the two models, and a minibatch trainer whose
// data stays on the device (each step sends only ops; statistics are read every few steps).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tensorwire/graph.h"
#include "tensorwire/nn.h"
#include "tensorwire/optim.h"
#include "tensorwire/tensorwire.h"

namespace tw::digits {

inline constexpr int64_t kPixels = 64;  // 8 x 8
inline constexpr int64_t kClasses = 10;

// The attribution data/PROVENANCE.md asks users of the data to print.
extern const char* const kAttribution;

// Where the data set lives: $TW_DIGITS, else the copy in the source tree.
std::string default_path();

struct Dataset {
  int64_t n = 0;
  std::vector<float> pixels;    // n * 64, scaled from 0..16 to [0, 1]
  std::vector<int64_t> labels;  // n, in 0..9
};

// Reads the gzip-compressed CSV (per line 64 integer pixels 0..16 then the label). Throws
// tw::Error naming the file and line on anything malformed.
Dataset load(const std::string& path);

// A shuffle of `all` (Fisher-Yates on a seeded splitmix64: the same on every platform) split
// into (train, test) with n_test rows in test.
std::pair<Dataset, Dataset> split(const Dataset& all, int64_t n_test, uint64_t seed);

enum class ModelKind { kCnn, kMlp };
const char* model_name(ModelKind kind);

// cnn: conv 1->16 3x3 pad 1, relu, maxpool 2, conv 16->32 3x3 pad 1, relu, maxpool 2, flatten,
// linear 128 -> 10. mlp: 64-128-64-10 with relu. Parameters from the global seeded generator.
std::shared_ptr<nn::Sequential> make_model(ModelKind kind, const nn::Placement& at = {});

// A data set on a device: x [n, 1, 8, 8] (cnn) or [n, 64] (mlp) f32, y [n] i64.
struct DeviceData {
  Tensor x, y;
  int64_t n = 0;
};
DeviceData upload(const Dataset& d, ModelKind kind, const Device& device);

struct Progress {
  int epoch = 0, epochs = 0;
  int64_t step = 0, steps = 0;  // within the epoch
  double loss = 0;              // mean over the epoch's samples so far
  double accuracy = 0;          // fraction of the epoch's samples so far classified right
  double seconds = 0;           // since the epoch started
};

// Minibatch training with cross-entropy. Each epoch visits the training set in an order drawn
// from `seed` and the epoch number (on the host, uploaded as one index tensor per epoch).
class Trainer {
 public:
  // use_graph: run the step (forward, loss, backward, optimizer update) through a
  // tw::graph::Step, so that from the third step on it replays one recorded trace (the same
  // values as eager, bit for bit).
  Trainer(nn::Module& model, optim::Optimizer& optimizer, const DeviceData& train,
          int64_t batch_size, bool use_graph = false);
  // The step cache (null without use_graph).
  const graph::Step* step() const { return step_.get(); }
  int64_t steps_per_epoch() const { return (train_.n + batch_ - 1) / batch_; }
  // Runs one epoch; reports every `report_every` steps and after the last one (each report reads
  // two numbers from the device, asynchronously: the read is sent at its step and finished at the
  // next report, so on_progress sees each report one report late, and only the epoch's last read
  // is waited for). Returns the epoch's final progress. first_step skips the epoch's first steps
  // (resuming from a checkpoint taken within it); after_step(s) runs after step s (0-based within
  // the epoch) has been issued.
  Progress run_epoch(int epoch, int epochs, uint64_t seed, int64_t report_every,
                     const std::function<void(const Progress&)>& on_progress = {},
                     int64_t first_step = 0, const std::function<void(int64_t)>& after_step = {});

 private:
  nn::Module& model_;
  optim::Optimizer& opt_;
  DeviceData train_;
  int64_t batch_;
  std::unique_ptr<graph::Step> step_;
};

// Data-parallel training over several devices (replicas), typically on several servers: each
// replica holds a model made from the same seed and a copy of the training set; every step
// splits the batch into one contiguous shard per replica, each replica computes the gradient of
// its shard's share of the batch's mean loss, tw::dist::all_reduce sums those gradients (all of
// a replica's gradients as one flat tensor), and every replica takes the same Adam step. The
// replicas therefore stay bit-identical (replicas_identical()).
class DataParallelTrainer {
 public:
  DataParallelTrainer(ModelKind kind, const std::vector<Device>& devices, const Dataset& train,
                      int64_t batch_size, double lr, uint64_t seed);
  int64_t steps_per_epoch() const { return (n_ + batch_ - 1) / batch_; }
  Progress run_epoch(int epoch, int epochs, uint64_t seed, int64_t report_every,
                     const std::function<void(const Progress&)>& on_progress = {});
  nn::Module& model(size_t replica) { return *replicas_.at(replica).model; }
  size_t size() const { return replicas_.size(); }
  // The names of the parameters where some replica's bytes differ from replica 0's (empty: all
  // identical).
  std::vector<std::string> differing_parameters() const;

 private:
  struct Replica {
    std::shared_ptr<nn::Sequential> model;
    std::unique_ptr<optim::Adam> opt;
    DeviceData data;
  };
  std::vector<Replica> replicas_;
  std::unique_ptr<dist::Group> group_;
  int64_t batch_, n_;
};

// Training that checkpoints every `checkpoint_every` steps into `checkpoint_dir` (tw::Checkpoint)
// and, when that directory holds a checkpoint, resumes from its newest: the model is made from
// the seed as always, then its parameters, Adam's state, the random generator and the step
// counter are loaded, and training goes on at the next step of the same epoch. Every op being
// deterministic, the final parameters equal an uninterrupted run's bit for bit.
struct ResumableOptions {
  ModelKind kind = ModelKind::kMlp;
  int epochs = 1;
  int64_t batch = 64;
  double lr = 2e-3;
  uint64_t seed = 7;
  bool graph = true;
  std::string checkpoint_dir;  // empty: no checkpoints, no resuming
  int64_t checkpoint_every = 0;
  int64_t report_every = 0;
  std::function<void(const Progress&)> on_progress;
  // After each step (counted from 1 over the whole run) and its checkpoint, if any.
  std::function<void(int64_t step)> after_step;
  // Once the model, optimizer and data are ready to train (restored from the checkpoint at
  // `step`, or 0 when starting fresh), before the first step.
  std::function<void(int64_t step)> on_ready;
};
struct ResumableRun {
  std::shared_ptr<nn::Sequential> model;
  int64_t resumed_from = 0;  // the checkpoint's step (0: started fresh)
  int64_t steps_run = 0;     // steps this call ran
  int64_t total_steps = 0;
  int64_t checkpoints = 0;  // saved by this call
};
ResumableRun train_resumable(const Dataset& train, const Device& device,
                             const ResumableOptions& options);

// Fraction of `data` the model classifies right (eval mode, no grad, one read).
double accuracy(nn::Module& model, const DeviceData& data);

}  // namespace tw::digits
