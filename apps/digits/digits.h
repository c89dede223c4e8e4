// The handwritten-digits training example's pieces, shared by apps/train_digits.cc, the training
// tests (tests/unit/train) and the training benchmark (bench/train_bench.cc): the data set
// (data/digits.csv.gz, see data/PROVENANCE.md), the two models, and a minibatch trainer whose
// data stays on the device (each step sends only ops; statistics are read every few steps).
#pragma once
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
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
  // Since the epoch started, until the report was delivered: its values had reached the program
  // (Reports checks after every step, so up to a step late; later while the program waited for
  // something else).
  double seconds = 0;
};

// A trainer's progress reports. A report reads two running sums (loss, right answers) from the
// device asynchronously: the read is sent at its step and nothing waits for it there. Reports
// are delivered to their callback in the order they were sent, on the trainer's thread, as their
// values arrive: poll() (after every step) delivers those whose replies are in and never waits;
// send() waits only for reports sent kMaxLagSteps or more steps before; finish() waits for all.
class Reports {
 public:
  // How far (in steps) the program may run ahead of its oldest undelivered report. It bounds
  // the work queued on the device (what an interrupted program leaves behind), how late the
  // program sees a loss, and the reads in flight; waiting for a report 128 steps old idles the
  // device only where 128 steps run faster than a round trip (0.16 ms a step at 20 ms: a digits
  // CNN step takes 0.5-1 ms). Reports further apart than this wait for the one before.
  static constexpr int64_t kMaxLagSteps = 128;

  // Sends the read of the sums as of `p` (`issued`: the trainer's steps issued so far, all
  // epochs; `seen`: the epoch's samples so far; `start`: when the epoch started). on_progress
  // (may be empty) is called with it when it is delivered.
  void send(const Progress& p, int64_t issued, int64_t seen,
            std::chrono::steady_clock::time_point start, const Tensor& loss_sum,
            const Tensor& correct, const std::function<void(const Progress&)>& on_progress);
  // Delivers, oldest first, the reports whose values have arrived; stops at the first that has
  // not (never waits).
  void poll();
  // Waits for every report in flight and delivers them in order; returns the last report ever
  // delivered (empty if none). A read that failed throws its tw::Error from the call that was
  // delivering it (this, poll or send): that report is dropped, the ones after it stay queued.
  std::optional<Progress> finish();

 private:
  struct Pending {
    Progress p;
    int64_t issued = 0, seen = 0;
    std::chrono::steady_clock::time_point start;  // the epoch's
    detail::PendingValues values;
    std::function<void(const Progress&)> on_progress;
  };
  void deliver_front();
  std::deque<Pending> queue_;
  std::optional<Progress> last_;
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
  // Issues one epoch's steps and returns without waiting for the device, so the next epoch's
  // steps follow this one's with the device still busy. Nothing in it waits for a round trip
  // but the step cache's graph registrations (once per batch shape: the first epochs) and, when
  // the program is Reports::kMaxLagSteps ahead of the device, the oldest report (the device has
  // that much queued then, so it does not idle).
  // It reports every `report_every` steps (0: never) and after the epoch's last step, through
  // Reports: each report's read is sent at its step, and on_progress(p) is called later, in
  // order, once its values are in: from this run_epoch, a later one, or finish(). The callback
  // is copied and kept until then, so what it refers to must outlive that. A report that is
  // never finished (the trainer destroyed first) is dropped without a call.
  // first_step skips the epoch's first steps (resuming from a checkpoint taken within it);
  // after_step(s) runs after step s (0-based within the epoch) has been issued.
  void run_epoch(int epoch, int epochs, uint64_t seed, int64_t report_every,
                 const std::function<void(const Progress&)>& on_progress = {},
                 int64_t first_step = 0, const std::function<void(int64_t)>& after_step = {});
  // The one wait: delivers every report still in flight and returns the last report (after the
  // last epoch run, its final progress); empty if no epoch has reported. Call it when the
  // program needs the losses now (at the end of training, before a summary).
  std::optional<Progress> finish() { return reports_.finish(); }

 private:
  nn::Module& model_;
  optim::Optimizer& opt_;
  DeviceData train_;
  int64_t batch_;
  std::unique_ptr<graph::Step> step_;
  int64_t issued_ = 0;  // steps issued, all epochs
  Reports reports_;
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
  // As Trainer::run_epoch: returns without waiting; reports arrive through on_progress.
  void run_epoch(int epoch, int epochs, uint64_t seed, int64_t report_every,
                 const std::function<void(const Progress&)>& on_progress = {});
  // Waits for every replica's device to finish the steps issued, then as Trainer::finish.
  std::optional<Progress> finish();
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
  int64_t issued_ = 0;  // steps issued, all epochs
  Reports reports_;
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
