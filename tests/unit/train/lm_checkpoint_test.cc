// train_lm's checkpoints (apps/lm: Trainer::save / restore): a run interrupted after a checkpoint
// and resumed in a fresh trainer ends with the parameters an uninterrupted run ends with, bit for
// bit, with dropout (its masks come from the random generator the checkpoint saves) and with the
// replayed graph, on a remote device; a checkpoint of a run with other settings is refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <numeric>

#include "lm/lm.h"
#include "support/remote_device.h"

namespace tw {
namespace {

namespace fs = std::filesystem;

nn::GPTConfig tiny(double dropout) {
  return {
      .vocab_size = 13, .context = 8, .n_layer = 1, .n_head = 2, .n_embd = 16, .dropout = dropout};
}

std::vector<int64_t> text() {
  std::vector<int64_t> t(400);
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int64_t>((i * 7 + i / 13) % 13);
  return t;
}

struct Run {
  double dropout = 0;
  bool graph = false;
  Device device = Device::cpu();
};

// Trains steps [0, stop) of the run, checkpointing every `every` steps into `dir` and resuming
// from it first (as train_lm does); returns the final parameters' bytes.
std::vector<std::vector<uint8_t>> train(const Run& r, const std::string& dir, int64_t stop,
                                        int64_t every, bool async = true, uint64_t seed = 3) {
  manual_seed(seed);
  nn::GPT gpt(tiny(r.dropout), nn::Placement{r.device, kF32});
  const std::vector<int64_t> tokens = text();
  lm::Trainer trainer(gpt, 1e-2, tokens, 4, seed, r.graph);
  Checkpoint ckpt(dir);
  const auto run = lm::run_settings(gpt.config(), 1e-2, 4, seed, 400);
  for (int64_t s = trainer.restore(ckpt, run); s < stop; ++s) {
    (void)trainer.step(s);
    if ((s + 1) % every == 0) trainer.save(ckpt, s + 1, run, async);
  }
  (void)ckpt.wait();
  std::vector<std::vector<uint8_t>> out;
  for (const auto& p : gpt.parameters()) out.push_back(p->value().to_bytes());
  return out;
}

std::string fresh_dir(const std::string& name) {
  const fs::path p =
      fs::temp_directory_path() / ("tw_lm_ckpt_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p.string();
}

void expect_resume_identical(const Run& r, const std::string& name) {
  const std::string whole = fresh_dir(name + "_whole"), cut = fresh_dir(name + "_cut");
  const auto want = train(r, whole, 10, 4);
  // Stopped at step 7 (its last checkpoint at 4), then resumed twice: from 4, then from 8.
  (void)train(r, cut, 7, 4, /*async=*/false);
  EXPECT_EQ(Checkpoint(cut).latest()->step, 4);
  (void)train(r, cut, 9, 4);
  EXPECT_EQ(Checkpoint(cut).latest()->step, 8);
  EXPECT_EQ(train(r, cut, 10, 4), want) << name;
  fs::remove_all(whole);
  fs::remove_all(cut);
}

TEST(LmCheckpoint, ResumedRunIsBitIdenticalWithDropout) {
  expect_resume_identical({.dropout = 0.2, .graph = false}, "dropout");
}

TEST(LmCheckpoint, ResumedRunIsBitIdenticalWithTheGraphOnARemoteDevice) {
  expect_resume_identical({.graph = true, .device = testing::remote_test_device()}, "graph");
}

TEST(LmCheckpoint, RefusesACheckpointOfOtherSettings) {
  const std::string dir = fresh_dir("other");
  (void)train({}, dir, 4, 4);
  try {
    (void)train({}, dir, 8, 4, true, /*seed=*/4);
    FAIL() << "resumed a run of another seed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("lm.seed 3, this run has 4"), std::string::npos)
        << e.what();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tw
