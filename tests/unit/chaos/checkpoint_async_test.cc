// tw::Checkpoint's pipelined save: a remote tensor over the 8 MiB slice size (read in slices, not
// a multiple of the slice) round-trips bit for bit; save_async saves what the tensors held when
// it was called while training goes on; a removed checkpoint's data file is reused (the spare)
// by the next save, larger or smaller, and what loads is still exact.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "support/remote_device.h"
#include "tensorwire/tensorwire.h"

namespace tw {
namespace {

namespace fs = std::filesystem;

std::string fresh_dir(const std::string& name) {
  const fs::path p =
      fs::temp_directory_path() / ("tw_ckpt_async_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p.string();
}

std::vector<std::vector<uint8_t>> param_bytes(const NamedParameters& ps) {
  std::vector<std::vector<uint8_t>> out;
  for (const auto& [name, p] : ps) out.push_back(p->value().to_bytes());
  return out;
}

NamedParameters params_of(const std::vector<std::pair<std::string, Tensor>>& ts) {
  NamedParameters out;
  for (const auto& [name, t] : ts) out.emplace_back(name, std::make_shared<nn::Parameter>(t));
  return out;
}

TEST(CheckpointPipeline, SlicedRemoteTensorRoundTrips) {
  const Device d = testing::remote_test_device();
  manual_seed(7);
  // 2.75M floats (11 MiB): one whole 8 MiB slice and a partial one; a small tensor; 8 MiB and
  // 24 bytes of doubles.
  const NamedParameters ps = params_of({{"big", randn({11, 1 << 18}, kF32, d)},
                                        {"small", randn({3, 5}, kF32, d)},
                                        {"doubles", randn({(1 << 20) + 3}, kF64, d)}});
  const std::string dir = fresh_dir("sliced");
  Checkpoint ckpt(dir);
  const CheckpointInfo info = ckpt.save(1, ps);
  EXPECT_GT(info.bytes, uint64_t{11} << 20);
  const auto want = param_bytes(ps);
  const NamedParameters back = params_of({{"big", zeros({11, 1 << 18}, kF32, d)},
                                          {"small", zeros({3, 5}, kF32, d)},
                                          {"doubles", zeros({(1 << 20) + 3}, kF64, d)}});
  ASSERT_TRUE(ckpt.restore(back));
  EXPECT_EQ(param_bytes(back), want);
  fs::remove_all(dir);
}

TEST(CheckpointPipeline, SaveAsyncSavesTheTensorsOfItsCall) {
  for (const Device& d : {Device::cpu(), testing::remote_test_device()}) {
    manual_seed(8);
    nn::Linear lin(64, 32 << 10, true, {d, kF32});  // 8 MiB of weight: sliced on a remote device
    optim::Adam opt(lin.parameters(), {.lr = 1e-2});
    const Tensor x = randn({4, 64}, kF32, d);
    auto train = [&](int n) {
      for (int i = 0; i < n; ++i) {
        opt.zero_grad();
        lin.forward(x).square().mean().backward();
        opt.step();
      }
    };
    train(2);
    const auto at_save = param_bytes(lin.named_parameters());
    auto state_bytes = [&] {
      std::vector<std::vector<uint8_t>> out;
      for (Tensor* t : opt.state())
        out.push_back(t->defined() ? t->to_bytes() : std::vector<uint8_t>{});
      return out;
    };
    const auto state_at_save = state_bytes();
    const RngState rng_at_save = rng_state();

    const std::string dir = fresh_dir("async");
    Checkpoint ckpt(dir);
    ckpt.save_async(2, lin, &opt, {{"k", "v"}});
    train(3);  // training goes on while it writes: the parameters are replaced
    (void)randn({8});
    const std::optional<CheckpointInfo> info = ckpt.wait();
    ASSERT_TRUE(info);
    EXPECT_FALSE(ckpt.saving());
    EXPECT_FALSE(ckpt.wait());  // nothing left in progress
    EXPECT_EQ(info->step, 2);
    EXPECT_EQ(info->extra.at("k"), "v");
    EXPECT_NE(param_bytes(lin.named_parameters()), at_save);

    ASSERT_TRUE(ckpt.restore(lin, &opt));
    EXPECT_EQ(param_bytes(lin.named_parameters()), at_save) << d.str();
    EXPECT_EQ(state_bytes(), state_at_save) << d.str();
    EXPECT_EQ(rng_state().seed, rng_at_save.seed);
    EXPECT_EQ(rng_state().counter, rng_at_save.counter);

    // A second save_async waits for the first; the newest is the one latest() finds.
    ckpt.save_async(3, lin, &opt);
    ckpt.save_async(4, lin, &opt);
    EXPECT_EQ(ckpt.wait()->step, 4);
    EXPECT_EQ(ckpt.latest()->step, 4);
    fs::remove_all(dir);
  }
}

TEST(CheckpointPipeline, SpareFileIsReusedLargerOrSmaller) {
  const std::string dir = fresh_dir("spare");
  Checkpoint ckpt(dir, 1);
  manual_seed(9);
  const NamedParameters big = params_of({{"w", randn({1000, 100})}});
  const NamedParameters small = params_of({{"w", randn({10, 10})}});
  ckpt.save(1, big);
  ckpt.save(2, big);  // checkpoint 1's data file becomes the spare
  EXPECT_TRUE(fs::exists(fs::path(dir) / ".ckpt-spare.safetensors"));
  const CheckpointInfo info = ckpt.save(3, small);  // written over the larger spare, truncated
  EXPECT_EQ(fs::file_size(info.data), info.bytes);
  EXPECT_EQ(ckpt.list().size(), 1u);
  const NamedParameters back = params_of({{"w", zeros({10, 10})}});
  ASSERT_TRUE(ckpt.restore(back));
  EXPECT_EQ(param_bytes(back), param_bytes(small));
  ckpt.save(4, big);  // and a larger file over a smaller spare
  const NamedParameters back_big = params_of({{"w", zeros({1000, 100})}});
  ASSERT_TRUE(ckpt.restore(back_big));
  EXPECT_EQ(param_bytes(back_big), param_bytes(big));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tw
