// Quantization (docs/ops.md, "Quantization") beyond the op table: the Q8_0 and Q4_0 byte layouts
// pinned by hand-checked bytes, i8 through safetensors, and nn::quantize on a GPT: packed
// parameters (state_dict and checkpoints carry the u8 blocks), generation close to f32, a remote
// device giving the local bytes with the packed weights uploaded as they are. The op table
// (tests/unit/ops) checks every op against the reference, at 1, 2 and 3 threads, and remote
// against local bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "support/remote_device.h"
#include "tensorwire/tensorwire.h"

namespace tw {
namespace {

std::vector<float> ramp() {  // x_j = j - 16, j = 0..31
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j - 16);
  return x;
}

TEST(BlockLayout, Q8_0BytesAsGgmlWritesThem) {
  const std::vector<uint8_t> b =
      pack_blocks(from_vector<float>(std::vector<float>(ramp()), {1, 32}), BlockFormat::kQ8_0)
          .to_vector<uint8_t>();
  ASSERT_EQ(b.size(), 34u);
  // d = 16 / 127 = 0.12598 -> f16 0x3008 (2^-3 * (1 + 8/1024)), little-endian.
  EXPECT_EQ(b[0], 0x08);
  EXPECT_EQ(b[1], 0x30);
  EXPECT_EQ(b[2], 0x81);       // q[0] = round(-16 * 127 / 16) = -127
  EXPECT_EQ(b[2 + 16], 0x00);  // q[16] = 0
  EXPECT_EQ(b[2 + 31], 119);   // q[31] = round(15 * 7.9375) = round(119.06)
}

TEST(BlockLayout, Q4_0BytesAsGgmlWritesThem) {
  const std::vector<uint8_t> b =
      pack_blocks(from_vector<float>(std::vector<float>(ramp()), {1, 32}), BlockFormat::kQ4_0)
          .to_vector<uint8_t>();
  ASSERT_EQ(b.size(), 18u);
  // The value of largest magnitude is -16: d = -16 / -8 = 2 (f16 0x4000), id = 0.5,
  // q[j] = min(15, trunc((j - 16) / 2 + 8.5)).
  EXPECT_EQ(b[0], 0x00);
  EXPECT_EQ(b[1], 0x40);
  EXPECT_EQ(b[2], 0x80);       // q[0] = 0 (low nibble), q[16] = 8 (high)
  EXPECT_EQ(b[2 + 15], 0xF8);  // q[15] = 8, q[31] = min(15, 16) = 15
  const std::vector<float> back =
      unpack_blocks(from_vector<uint8_t>(std::vector<uint8_t>(b), {1, 18}), BlockFormat::kQ4_0)
          .to_vector<float>();
  EXPECT_EQ(back[0], -16.0f);  // 2 * (0 - 8)
  EXPECT_EQ(back[31], 14.0f);  // 2 * (15 - 8): the top code clips 15 to 14
}

TEST(BlockLayout, RoundTripErrorWithinHalfAStep) {
  manual_seed(5);
  const Tensor x = randn({8, 256});
  for (BlockFormat f : {BlockFormat::kQ8_0, BlockFormat::kQ4_0}) {
    const Tensor back = unpack_blocks(pack_blocks(x, f), f);
    const std::vector<float> a = x.to_vector<float>(), b = back.to_vector<float>();
    for (size_t blk = 0; blk < a.size() / 32; ++blk) {
      float amax = 0;
      for (size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(a[blk * 32 + j]));
      // Q8_0: half a step of d = amax / 127. Q4_0: d = amax / 8 with codes -8..7 times d, so the
      // side opposite the largest magnitude ends at 7/8 amax: up to a whole step there. f16
      // rounding of d adds 2^-11 relative.
      const float bound = f == BlockFormat::kQ8_0 ? amax / 127 * 0.5f : amax / 8;
      for (size_t j = 0; j < 32; ++j) {
        const size_t i = blk * 32 + j;
        EXPECT_LE(std::fabs(a[i] - b[i]), bound + amax * 1e-3f) << i;
      }
    }
  }
  EXPECT_THROW((void)pack_blocks(full({2, 32}, NAN), BlockFormat::kQ8_0).to_vector<uint8_t>(),
               Error);
  EXPECT_THROW((void)pack_blocks(zeros({2, 33}), BlockFormat::kQ8_0), Error);  // not whole blocks
}

TEST(Int8, SafetensorsAndNumericRoundTrip) {
  const std::vector<int8_t> v = {-128, -1, 0, 1, 127, 5};
  const Tensor t = from_vector<int8_t>(std::vector<int8_t>(v), {2, 3});
  EXPECT_EQ(t.dtype(), kI8);
  const std::string path = ::testing::TempDir() + "/i8.safetensors";
  save_safetensors(path, {{"q", t}});
  const std::map<std::string, Tensor> back = load_safetensors(path);
  EXPECT_EQ(back.at("q").dtype(), kI8);
  EXPECT_EQ(back.at("q").to_vector<int8_t>(), v);
  std::remove(path.c_str());
  // Arithmetic wraps; u8 with i8 promotes to i32.
  EXPECT_EQ((t + t).to_vector<int8_t>(), (std::vector<int8_t>{0, -2, 0, 2, -2, 10}));
  EXPECT_EQ((t + from_vector<uint8_t>(std::vector<uint8_t>{200}, {1})).dtype(), kI32);
  const auto [wq, ws] = quantize_weight_int8(
      from_vector<float>(std::vector<float>{0.75f, -2, 0.5f, 0, 0, 0}, {2, 3}));
  EXPECT_EQ(wq.to_vector<int8_t>(), (std::vector<int8_t>{48, -127, 32, 0, 0, 0}));
  EXPECT_EQ(ws.to_vector<float>(), (std::vector<float>{2.0f / 127, 1.0f}));
}

nn::GPTConfig small() {
  return {.vocab_size = 40, .context = 16, .n_layer = 2, .n_head = 2, .n_embd = 64};
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

TEST(Quantize, GptPacksEveryLinearAndStaysCloseToF32) {
  for (const std::string scheme : {"q8", "q4"}) {
    manual_seed(11);
    nn::GPT model(small());
    const Tensor tokens = from_vector<int64_t>(std::vector<int64_t>{1, 5, 9, 3, 7, 2}, {1, 6});
    const std::vector<float> f32 = model.forward(tokens).to_vector<float>();
    // Per block: qkv, proj, mlp.0 and mlp.2 (in_features 64 or 256); and the head.
    EXPECT_EQ(nn::quantize(model, scheme), 2 * 4 + 1) << scheme;
    for (const auto& [name, t] : model.state_dict()) {
      if (name.ends_with("weight") && t.dim() == 2 && name.find("wte") == std::string::npos &&
          name.find("wpe") == std::string::npos) {
        EXPECT_EQ(t.dtype(), kU8) << name;
      }
    }
    const std::vector<float> q = model.forward(tokens).to_vector<float>();
    ASSERT_EQ(q.size(), f32.size());
    double err = 0;
    for (size_t i = 0; i < q.size(); ++i) err = std::max(err, std::fabs(double(q[i]) - f32[i]));
    // Relative to the logits' range: Q8_0 keeps 2^-8 of each block's range, Q4_0 2^-4.
    EXPECT_LT(err / max_abs(f32), scheme == "q8" ? 0.02 : 0.2) << scheme;
    EXPECT_GT(err, 0.0) << scheme;  // the weights did change
  }
  nn::Linear odd(40, 8);
  EXPECT_EQ(nn::quantize(odd, "q8"), 0);  // 40 features: not whole blocks, stays f32
  EXPECT_THROW(nn::quantize(odd, "q3"), Error);
}

TEST(Quantize, CheckpointCarriesPackedWeightsAndRemoteGivesTheLocalBytes) {
  manual_seed(12);
  nn::GPT model(small());
  ASSERT_GT(nn::quantize(model, "q4"), 0);
  const std::string path = ::testing::TempDir() + "/q4.safetensors";
  save_safetensors(path, model);
  // About 0.14 of the f32 weights' bytes for the packed ones.
  EXPECT_LT(std::filesystem::file_size(path), 100000u);
  manual_seed(99);  // other initial weights, replaced by the loaded ones
  nn::GPT loaded(small());
  nn::quantize(loaded, "q4");
  load_safetensors(path, loaded);
  std::remove(path.c_str());
  const Tensor tokens = from_vector<int64_t>(std::vector<int64_t>{3, 1, 4, 1, 5}, {1, 5});
  const std::vector<uint8_t> local = model.forward(tokens).to_bytes();
  EXPECT_EQ(loaded.forward(tokens).to_bytes(), local);

  testing::TransportServer server;
  const Device remote = server.device(testing::Transport::kTcp);
  loaded.to(remote);  // the u8 blocks are uploaded as they are
  EXPECT_EQ(loaded.forward(tokens.to(remote)).to_bytes(), local);
  nn::Generator gen(loaded, /*use_graph=*/true);
  std::vector<float> step = gen.step(3);
  nn::Generator local_gen(model, /*use_graph=*/false);
  EXPECT_EQ(step, local_gen.step(3));
}

}  // namespace
}  // namespace tw
