// Random tensors (docs/ops.md, Creation): a counter-based generator, so element i of a tensor
// made with seed s is a pure function of (s, i), the same on every device and for any thread
// count. Each random call takes the next seed of the sequence manual_seed starts.
#include <cmath>
#include <cstring>

#include "core/philox.h"
#include "tensorwire/nn.h"
#include "unit/ops/devices.h"
#include "unit/ops/op_cases.h"

namespace tw::optest {
namespace {

class Random : public ::testing::TestWithParam<DeviceFactory> {
 protected:
  Device device() const { return GetParam().make(); }
};

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// The seed the next random call will use, without disturbing the sequence.
uint64_t peek_seed(uint64_t start) {
  manual_seed(start);
  uint64_t s = next_seed();
  manual_seed(start);
  return s;
}

TEST_P(Random, SameSeedSameValues) {
  manual_seed(1234);
  auto a = rand({1000}, kF32, device()).to_vector<float>();
  auto b = randn({1000}, kF64, device()).to_vector<double>();
  manual_seed(1234);
  EXPECT_TRUE(same_bits(a, rand({1000}, kF32, device()).to_vector<float>()));
  EXPECT_TRUE(same_bits(b, randn({1000}, kF64, device()).to_vector<double>()));
}

TEST_P(Random, SuccessiveCallsAndSeedsDiffer) {
  manual_seed(1);
  auto a = rand({64}, kF32, device()).to_vector<float>();
  auto b = rand({64}, kF32, device()).to_vector<float>();
  manual_seed(2);
  auto c = rand({64}, kF32, device()).to_vector<float>();
  int same_ab = 0, same_ac = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    same_ab += a[i] == b[i];
    same_ac += a[i] == c[i];
  }
  EXPECT_LE(same_ab, 1);
  EXPECT_LE(same_ac, 1);
}

TEST_P(Random, SeedSequenceRestarts) {
  manual_seed(77);
  uint64_t s0 = next_seed(), s1 = next_seed();
  EXPECT_NE(s0, s1);
  manual_seed(77);
  EXPECT_EQ(next_seed(), s0);
  EXPECT_EQ(next_seed(), s1);
}

// Element i = low + (high - low) * philox_uniform_f32(seed, i), one fused multiply-add in f32.
TEST_P(Random, UniformF32MatchesPhilox) {
  const uint64_t seed = peek_seed(99);
  auto got = uniform({4097}, -2.0, 3.0, kF32, device()).to_vector<float>();
  ASSERT_EQ(got.size(), 4097u);
  const float lo = -2.0f, hi = 3.0f;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    float want = std::fma(hi - lo, philox_uniform_f32(seed, i), lo);
    if (std::memcmp(&want, &got[i], 4) != 0 && ++bad <= 5)
      ADD_FAILURE() << "element " << i << ": " << got[i] << " vs " << want;
  }
  EXPECT_EQ(bad, 0);
}

TEST_P(Random, RandF32IsPhiloxUniform) {
  const uint64_t seed = peek_seed(5);
  auto got = rand({3, 5, 7}, kF32, device()).to_vector<float>();
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], philox_uniform_f32(seed, i)) << i;
}

TEST_P(Random, UniformF64MatchesPhilox) {
  const uint64_t seed = peek_seed(100);
  auto got = uniform({2049}, 0.5, 1.5, kF64, device()).to_vector<double>();
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(got[i], std::fma(1.5 - 0.5, philox_uniform_f64(seed, i), 0.5)) << i;
}

// Element i = mean + std * philox_normal(seed, i), one fused multiply-add in double, then
// converted.
TEST_P(Random, NormalMatchesPhilox) {
  uint64_t seed = peek_seed(7);
  auto f = normal({1025}, 1.5, 2.0, kF32, device()).to_vector<float>();
  for (size_t i = 0; i < f.size(); ++i)
    ASSERT_EQ(f[i], static_cast<float>(std::fma(2.0, philox_normal(seed, i), 1.5))) << i;
  seed = peek_seed(8);
  auto d = randn({1025}, kF64, device()).to_vector<double>();
  // The cpu backend's devices give the C library's log and cos exactly; a GPU backend computes
  // them itself (GLSL has no double log or cos), within 4 ulp (docs/vulkan.md).
  const bool cpu_math = GetParam().name == "cpu" || GetParam().same_bytes_as == "cpu";
  for (size_t i = 0; i < d.size(); ++i) {
    const double want = 0.0 + 1.0 * philox_normal(seed, i);
    if (cpu_math) {
      ASSERT_EQ(d[i], want) << i;
    } else {
      ASSERT_LE(std::abs(d[i] - want), 4 * std::abs(std::nextafter(want, 0.0) - want)) << i;
    }
  }
}

// Element i = (philox_uniform_f64(seed, i) < p[i]) ? 1 : 0, in p's dtype and shape.
TEST_P(Random, BernoulliMatchesPhilox) {
  for (DType dt : {kF32, kF64}) {
    std::vector<double> pv(2000);
    // p from -0.1 to 1.1 (outside [0, 1] the formula gives 0 or 1) and some NaN (never < NaN: 0).
    for (size_t i = 0; i < pv.size(); ++i)
      pv[i] = i % 97 == 5 ? NAN : static_cast<double>(i % 13) / 10.0 - 0.1;
    Tensor p = from_vector<double>(pv, {40, 50}, device()).to(dt);
    const uint64_t seed = peek_seed(31);
    Tensor b = bernoulli(p);
    ASSERT_EQ(b.dtype(), dt);
    ASSERT_EQ(b.shape(), (Shape{40, 50}));
    std::vector<double> got = b.to(kF64).to_vector<double>();
    for (size_t i = 0; i < got.size(); ++i) {
      double pi = dt == kF32 ? static_cast<double>(static_cast<float>(pv[i])) : pv[i];
      ASSERT_EQ(got[i], philox_uniform_f64(seed, i) < pi ? 1.0 : 0.0)
          << dtype_name(dt) << " element " << i;
    }
  }
}

TEST_P(Random, Shapes) {
  EXPECT_EQ(rand({}, kF32, device()).shape(), Shape{});
  EXPECT_EQ(rand({0, 3}, kF64, device()).to_vector<double>().size(), 0u);
  EXPECT_EQ(randn({2, 0}, kF32, device()).numel(), 0);
  const uint64_t seed = peek_seed(3);
  EXPECT_EQ(rand({}, kF32, device()).item<float>(), philox_uniform_f32(seed, 0));
}

// Sanity of the distributions over 100k samples (bounds are 5 standard errors or more).
TEST_P(Random, DistributionSanity) {
  const int n = 100000;
  manual_seed(2024);
  auto stats = [](const std::vector<double>& v) {
    double m = 0, s = 0;
    for (double x : v) m += x;
    m /= v.size();
    for (double x : v) s += (x - m) * (x - m);
    return std::pair<double, double>{m, s / v.size()};
  };
  auto u = rand({n}, kF64, device()).to_vector<double>();
  for (double x : u) ASSERT_TRUE(x >= 0.0 && x < 1.0) << x;
  auto [um, uv] = stats(u);
  EXPECT_NEAR(um, 0.5, 0.005);
  EXPECT_NEAR(uv, 1.0 / 12, 0.002);

  auto uf = uniform({n}, -2.0, 3.0, kF32, device()).to(kF64).to_vector<double>();
  for (double x : uf) ASSERT_TRUE(x >= -2.0 && x <= 3.0) << x;
  EXPECT_NEAR(stats(uf).first, 0.5, 0.03);

  auto g = randn({n}, kF32, device()).to(kF64).to_vector<double>();
  auto [gm, gv] = stats(g);
  EXPECT_NEAR(gm, 0.0, 0.016);
  EXPECT_NEAR(gv, 1.0, 0.025);
  int beyond3 = 0;
  for (double x : g) beyond3 += std::fabs(x) > 3.0;
  EXPECT_NEAR(beyond3 / static_cast<double>(n), 0.0027, 0.0012);

  auto gn = normal({n}, 10.0, 0.5, kF64, device()).to_vector<double>();
  auto [nm, nv] = stats(gn);
  EXPECT_NEAR(nm, 10.0, 0.008);
  EXPECT_NEAR(nv, 0.25, 0.007);

  auto b = bernoulli(full({n}, 0.3, kF64, device())).to_vector<double>();
  EXPECT_NEAR(stats(b).first, 0.3, 0.008);
}

// The same seed gives the same values at any thread count.
TEST_P(Random, ThreadCountDoesNotMatter) {
  const int before = get_num_threads();
  std::vector<std::vector<float>> runs;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    manual_seed(55);
    Tensor r = rand({1 << 20}, kF32, device());
    Tensor g = randn({1 << 20}, kF32, device());
    Tensor b = bernoulli(r);
    std::vector<float> all = r.to_vector<float>();
    for (float v : g.to_vector<float>()) all.push_back(v);
    for (float v : b.to_vector<float>()) all.push_back(v);
    runs.push_back(std::move(all));
  }
  set_num_threads(before);
  EXPECT_TRUE(same_bits(runs[0], runs[1]));
}

// nn::Dropout in training: keep = bernoulli(1 - p) from the seeded sequence, y = x * (keep /
// (1 - p)). The kept elements are those the Philox draw keeps (element i: U(seed, i) < 1 - p in
// x's dtype), and output and gradient have the same bytes at 1, 2 and 3 threads as the local
// device of the same backend at 1 thread (the cpu device for the remote ones).
TEST_P(Random, DropoutIsSeededAndTheSameEverywhere) {
  const double p = 0.3;
  const int64_t rows = 64, cols = 97;
  auto run = [&](const Device& dev) {
    manual_seed(77);
    nn::Dropout drop(p);
    Tensor x = (arange(1, 1 + rows * cols, 1, kF32, dev) * 0.01).reshape({rows, cols}).detach();
    x.set_requires_grad();
    Tensor y = drop(x);
    (y * 2.0).sum().backward();
    return std::pair{y.to_vector<float>(), x.grad().to_vector<float>()};
  };
  const DeviceFactory& f = GetParam();
  const Device base =
      f.same_bytes_as.empty() ? device() : test_device_named(f.same_bytes_as).make();
  const int before = get_num_threads();
  set_num_threads(1);
  const auto want = run(base);
  const uint64_t seed = peek_seed(77);  // Dropout's draw is the first random call after the seed
  const double keep_p = static_cast<double>(static_cast<float>(1.0 - p));
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    const auto [y, g] = run(device());
    EXPECT_TRUE(same_bits(y, want.first)) << threads << " threads";
    EXPECT_TRUE(same_bits(g, want.second)) << threads << " threads";
    ASSERT_EQ(y.size(), static_cast<size_t>(rows * cols));
    int kept = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      const bool keep = philox_uniform_f64(seed, i) < keep_p;
      kept += keep;
      const double x = static_cast<double>(i + 1) * 0.01;
      ASSERT_NEAR(y[i], keep ? x / (1 - p) : 0.0, 1e-5 * x) << "element " << i;
      ASSERT_NEAR(g[i], keep ? 2 / (1 - p) : 0.0, 1e-5) << "element " << i;
    }
    EXPECT_NEAR(kept / static_cast<double>(y.size()), 1 - p, 0.03);
  }
  set_num_threads(before);
}

INSTANTIATE_TEST_SUITE_P(Devices, Random, ::testing::ValuesIn(complete_test_devices()),
                         [](const ::testing::TestParamInfo<DeviceFactory>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace tw::optest
