// f16 and bf16 (storage-only dtypes): raw bytes uploaded with from_bytes and cast to f32 agree
// with core/half.h for every bit pattern; f32 -> f16/bf16 rounds to nearest even as half.h does;
// representable values survive a round trip exactly; f64 -> f16/bf16 goes through f32.
#include "core/half.h"

#include <cmath>
#include <cstring>
#include <random>

#include "unit/ops/devices.h"
#include "unit/ops/op_cases.h"

namespace tw::optest {
namespace {

class Half : public ::testing::TestWithParam<DeviceFactory> {
 protected:
  Device device() const { return GetParam().make(); }
};

std::vector<uint16_t> all_patterns() {
  std::vector<uint16_t> v(65536);
  for (uint32_t i = 0; i < 65536; ++i) v[i] = static_cast<uint16_t>(i);
  return v;
}

Tensor upload16(const std::vector<uint16_t>& bits, DType dt, const Device& d) {
  std::vector<uint8_t> bytes(bits.size() * 2);
  std::memcpy(bytes.data(), bits.data(), bytes.size());
  return from_bytes(std::span<const uint8_t>(bytes), {static_cast<int64_t>(bits.size())}, dt, d);
}

std::vector<uint16_t> download16(const Tensor& t) {
  std::vector<uint8_t> bytes = t.to_bytes();
  std::vector<uint16_t> bits(bytes.size() / 2);
  std::memcpy(bits.data(), bytes.data(), bytes.size());
  return bits;
}

// Same f32 bits, or both NaN.
bool same_f32(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || f32_to_bits(a) == f32_to_bits(b);
}

TEST_P(Half, EveryF16PatternToF32) {
  auto bits = all_patterns();
  auto got = upload16(bits, kF16, device()).to(kF32).to_vector<float>();
  ASSERT_EQ(got.size(), bits.size());
  int bad = 0;
  for (size_t i = 0; i < bits.size(); ++i) {
    float want = f16_to_f32(bits[i]);
    if (!same_f32(got[i], want) && ++bad <= 5)
      ADD_FAILURE() << std::hex << "f16 0x" << bits[i] << ": got " << got[i] << " want " << want;
  }
  EXPECT_EQ(bad, 0);
}

TEST_P(Half, EveryBF16PatternToF32) {
  auto bits = all_patterns();
  auto got = upload16(bits, kBF16, device()).to(kF32).to_vector<float>();
  int bad = 0;
  for (size_t i = 0; i < bits.size(); ++i) {
    float want = bf16_to_f32(bits[i]);
    if (!same_f32(got[i], want) && ++bad <= 5)
      ADD_FAILURE() << std::hex << "bf16 0x" << bits[i] << ": got " << got[i] << " want " << want;
  }
  EXPECT_EQ(bad, 0);
}

TEST_P(Half, EveryF16PatternToF64) {
  auto bits = all_patterns();
  auto got = upload16(bits, kF16, device()).to(kF64).to_vector<double>();
  for (size_t i = 0; i < bits.size(); ++i) {
    double want = f16_to_f32(bits[i]);
    ASSERT_TRUE((std::isnan(got[i]) && std::isnan(want)) || got[i] == want) << std::hex << bits[i];
  }
}

// Every finite f16 (bf16) value, as f32, goes to f16 (bf16) and back unchanged (signed zeros too).
TEST_P(Half, RepresentableValuesRoundTripExactly) {
  for (DType dt : {kF16, kBF16}) {
    std::vector<float> values;
    for (uint16_t b : all_patterns()) {
      float v = dt == kF16 ? f16_to_f32(b) : bf16_to_f32(b);
      if (!std::isnan(v)) values.push_back(v);
    }
    Tensor t = from_vector<float>(values, {static_cast<int64_t>(values.size())}, device());
    auto back = t.to(dt).to(kF32).to_vector<float>();
    int bad = 0;
    for (size_t i = 0; i < values.size(); ++i)
      if (f32_to_bits(back[i]) != f32_to_bits(values[i]) && ++bad <= 5)
        ADD_FAILURE() << dtype_name(dt) << ": " << values[i] << " came back as " << back[i];
    EXPECT_EQ(bad, 0) << dtype_name(dt);
  }
}

// Arbitrary f32 values (random bit patterns, halfway points, overflow, subnormals) round to
// nearest even exactly as half.h does.
std::vector<float> tricky_f32() {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          65504.0f,
                          65519.99f,
                          65520.0f,
                          1e6f,
                          -1e6f,
                          1e-8f,
                          6e-8f,
                          3e-8f,
                          2.98e-8f,
                          5.96e-8f,
                          1e-40f,
                          3.4e38f,
                          -3.4e38f,
                          INFINITY,
                          -INFINITY,
                          NAN,
                          1.0f + 0x1p-11f,
                          1.0f + 0x1p-11f + 0x1p-23f,
                          1.0f + 0x1p-10f + 0x1p-11f,
                          1.0f + 0x1p-8f,
                          1.0f + 0x1p-8f + 0x1p-23f,
                          1.0f + 0x1p-7f + 0x1p-8f};
  std::mt19937 rng(12345);
  for (int i = 0; i < 200000; ++i) v.push_back(bits_to_f32(static_cast<uint32_t>(rng())));
  std::uniform_real_distribution<float> small(-70000.0f, 70000.0f);
  for (int i = 0; i < 50000; ++i) v.push_back(small(rng));
  return v;
}

TEST_P(Half, F32ToF16AndBF16RoundNearestEven) {
  const std::vector<float> v = tricky_f32();
  Tensor t = from_vector<float>(v, {static_cast<int64_t>(v.size())}, device());
  for (DType dt : {kF16, kBF16}) {
    auto got = download16(t.to(dt));
    ASSERT_EQ(got.size(), v.size());
    int bad = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      uint16_t want = dt == kF16 ? f32_to_f16(v[i]) : f32_to_bf16(v[i]);
      bool nan = std::isnan(v[i]);
      if (nan) {
        float back = dt == kF16 ? f16_to_f32(got[i]) : bf16_to_f32(got[i]);
        if (!std::isnan(back) && ++bad <= 5) ADD_FAILURE() << "NaN did not stay NaN";
      } else if (got[i] != want && ++bad <= 5) {
        ADD_FAILURE() << dtype_name(dt) << std::hex << ": f32 0x" << f32_to_bits(v[i]) << " ("
                      << v[i] << ") gave 0x" << got[i] << ", want 0x" << want;
      }
    }
    EXPECT_EQ(bad, 0) << dtype_name(dt);
  }
}

// The test's own reference conversions (reference.cc, written from the IEEE definitions) agree
// with half.h: two independent implementations of the same rounding.
TEST(HalfReference, AgreesWithHalfH) {
  for (float x : tricky_f32()) {
    if (std::isnan(x)) continue;
    ASSERT_EQ(ref::encode_f16(x), f32_to_f16(x)) << x;
    ASSERT_EQ(ref::encode_bf16(x), f32_to_bf16(x)) << x;
  }
  for (uint16_t b : all_patterns()) {
    double f = ref::decode_f16(b), bf = ref::decode_bf16(b);
    if (std::isnan(f))
      ASSERT_TRUE(std::isnan(f16_to_f32(b)));
    else
      ASSERT_EQ(f, f16_to_f32(b)) << b;
    if (std::isnan(bf))
      ASSERT_TRUE(std::isnan(bf16_to_f32(b)));
    else
      ASSERT_EQ(bf, bf16_to_f32(b)) << b;
  }
}

// f64 -> f16/bf16 rounds to f32 first: 1 + 2^-11 + 2^-40 becomes the tie 1 + 2^-11 in f32, which
// goes to even (1.0) in f16; rounding the double directly would give 1 + 2^-10.
TEST_P(Half, F64GoesThroughF32) {
  std::vector<double> v = {1.0 + 0x1p-11 + 0x1p-40,
                           -(1.0 + 0x1p-11 + 0x1p-40),
                           1.0 + 0x1p-8 + 0x1p-40,
                           65519.999999999,
                           1e300,
                           -1e-300,
                           0.1,
                           1.0 / 3.0};
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(-1e5, 1e5);
  for (int i = 0; i < 10000; ++i) v.push_back(u(rng));
  Tensor t = from_vector<double>(v, {static_cast<int64_t>(v.size())}, device());
  auto f16 = download16(t.to(kF16));
  auto bf16 = download16(t.to(kBF16));
  for (size_t i = 0; i < v.size(); ++i) {
    ASSERT_EQ(f16[i], f32_to_f16(static_cast<float>(v[i]))) << v[i];
    ASSERT_EQ(bf16[i], f32_to_bf16(static_cast<float>(v[i]))) << v[i];
  }
  EXPECT_EQ(f16[0], 0x3c00);  // 1.0
}

// Movement keeps the bits of every pattern, NaN payloads included.
TEST_P(Half, MovementCopiesBits) {
  auto bits = all_patterns();
  for (DType dt : {kF16, kBF16}) {
    Tensor t = upload16(bits, dt, device()).reshape({256, 256});
    auto got = download16(t.t().t().flip({0}).flip({0}).reshape({65536}));
    EXPECT_EQ(got, bits) << dtype_name(dt);
    auto cat_bits = download16(cat({t, t}, 0).slice(0, 256, 512).reshape({65536}));
    EXPECT_EQ(cat_bits, bits) << dtype_name(dt);
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, Half, ::testing::ValuesIn(complete_test_devices()),
                         [](const ::testing::TestParamInfo<DeviceFactory>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace tw::optest
