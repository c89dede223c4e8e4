// Training checkpoints: a model's parameters, its optimizer's state, the random generator's state
// and the step counter, saved atomically into a directory and loaded back bit for bit, from and
// onto any device (cpu, remote).
//
//   tw::Checkpoint ckpt("runs/a");
//   int64_t step = 0;
//   if (auto info = ckpt.restore(model, &opt)) step = info->step;   // resume, when there is one
//   for (; step < steps; ++step) {
//     train_step();
//     if ((step + 1) % 50 == 0) ckpt.save(step + 1, model, &opt);
//   }
//
// On disk, checkpoint N is two files:
//   ckpt-<N, 12 digits>.safetensors  tensors "param.<dotted name>" (named_parameters order) and
//                                    "optim.<i>" (optimizer state()[i]; absent: undefined)
//   ckpt-<N, 12 digits>.manifest     text, one "key value" per line: format, file, bytes, hash,
//                                    step, rng_seed, rng_counter, optim_slots, then "extra.<key>"
// The data file is written to a temporary name, fsync'd and renamed; then the manifest the same
// way; then the directory is fsync'd. The manifest is the commit point: it names the data file's
// size and a 64-bit hash of its bytes, and a checkpoint counts only if its manifest parses and
// its data file matches it, so a writer killed at any moment leaves the previous checkpoint the
// newest valid one. The newest `keep` checkpoints are kept; the data file of the last one removed
// stays as .ckpt-spare.safetensors (no manifest names it) and the next save writes over it
// (rewriting pages is cheaper than allocating new ones). The manifest's first line is
// "tensorwire-checkpoint 2" (format 1, with an older hash, still loads). One writer per
// directory.
#pragma once
#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tensorwire/export.h"
#include "tensorwire/nn.h"
#include "tensorwire/optim.h"
#include "tensorwire/tensor.h"

TW_API_BEGIN

namespace tw {

struct CheckpointInfo {
  int64_t step = 0;
  RngState rng;
  std::map<std::string, std::string> extra;  // what save() was given
  std::string manifest;                      // the manifest's path
  std::string data;                          // the safetensors file's path
  uint64_t bytes = 0;                        // the data file's size
};

// A model's parameters under their dotted names (nn::Module::named_parameters()).
using NamedParameters = std::vector<std::pair<std::string, nn::ParameterPtr>>;

class Checkpoint {
 public:
  // `dir` is created when missing. keep >= 1.
  explicit Checkpoint(std::string dir, int keep = 2);
  // Waits for a save_async() in progress (its error, if any, is printed to stderr).
  ~Checkpoint();
  Checkpoint(const Checkpoint&) = delete;  // a save in progress refers to this object
  Checkpoint& operator=(const Checkpoint&) = delete;
  const std::string& dir() const { return dir_; }

  // Saves checkpoint `step` and removes all but the newest `keep`. The values are read from
  // their devices in pieces (a remote tensor over 8 MiB in 8 MiB slices), up to 64 MiB read
  // ahead, each piece hashed and written as it arrives. Extra keys and values must be free of
  // newlines. Returns what a load will see. Waits for a save_async() in progress first.
  CheckpointInfo save(int64_t step, const nn::Module& model, optim::Optimizer* opt = nullptr,
                      const std::map<std::string, std::string>& extra = {});
  CheckpointInfo save(int64_t step, const NamedParameters& params, optim::Optimizer* opt = nullptr,
                      const std::map<std::string, std::string>& extra = {});
  // save(), in the background: takes the parameters' and the state's tensors (tensors are
  // immutable, so later steps, which replace them, do not change what is saved), the random
  // generator's state and the step now, and returns; a thread downloads and writes them while
  // training goes on. The checkpoint counts (latest() sees it) once its manifest is committed,
  // as for save(). The next save(), save_async() or wait() waits for it.
  void save_async(int64_t step, const nn::Module& model, optim::Optimizer* opt = nullptr,
                  const std::map<std::string, std::string>& extra = {});
  void save_async(int64_t step, const NamedParameters& params, optim::Optimizer* opt = nullptr,
                  const std::map<std::string, std::string>& extra = {});
  // Waits for the save_async() in progress: its result, or nullopt when none was; throws what
  // the save threw.
  std::optional<CheckpointInfo> wait();
  // Whether a save_async() is still writing.
  bool saving() const;

  // Every checkpoint in the directory whose files agree with its manifest, oldest first. Each
  // candidate's data file is read and hashed (validate = false: only its manifest and size are
  // checked).
  std::vector<CheckpointInfo> list(bool validate = true) const;
  // The newest valid checkpoint, if any.
  std::optional<CheckpointInfo> latest() const;

  // Loads `info` into `model` (each parameter onto its current device, strictly: the names and
  // shapes must match) and `opt` (state onto `state_device`, default the first parameter's
  // device), and sets the random generator's state when restore_rng. Throws tw::Error when the
  // files do not match the manifest or the model.
  void load(const CheckpointInfo& info, nn::Module& model, optim::Optimizer* opt = nullptr,
            bool restore_rng = true, std::optional<Device> state_device = std::nullopt) const;
  void load(const CheckpointInfo& info, const NamedParameters& params,
            optim::Optimizer* opt = nullptr, bool restore_rng = true,
            std::optional<Device> state_device = std::nullopt) const;
  // latest(), loaded; nullopt (and nothing changed) when the directory holds none.
  std::optional<CheckpointInfo> restore(nn::Module& model, optim::Optimizer* opt = nullptr,
                                        bool restore_rng = true) const;
  std::optional<CheckpointInfo> restore(const NamedParameters& params,
                                        optim::Optimizer* opt = nullptr,
                                        bool restore_rng = true) const;

 private:
  struct Snapshot;
  std::shared_ptr<Snapshot> snapshot(int64_t step, const NamedParameters& params,
                                     optim::Optimizer* opt,
                                     const std::map<std::string, std::string>& extra) const;
  CheckpointInfo write(Snapshot& snap);

  std::string dir_;
  int keep_;
  std::future<CheckpointInfo> pending_;  // the save_async() in progress
};

}  // namespace tw
TW_API_END
