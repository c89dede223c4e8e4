// The vulkan backend beyond the op table (which runs every case on it: tests/unit/ops): the
// validation layer is loaded and silent while ops run, a missing device is a clear error, and
// ops that are refused say so naming op, dtype and device. Runs on lavapipe in CI (CI=true: a
// missing Vulkan device fails instead of skipping).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <future>
#include <random>

#include "api/sink.h"
#include "backend/registry.h"
#include "support/local_backends.h"
#include "tensorwire/tensor.h"

namespace tw {
namespace {

// The validation layer is switched on before the process makes its first Vulkan context (the
// context is per process, and decides at creation).
const bool kValidation = [] {
  ::setenv("TW_VULKAN_VALIDATION", "1", 1);
  return true;
}();

std::string vulkan_unavailable() {
  const testing::LocalBackend* b = testing::local_backend_named("vulkan");
  if (!b) return "this build has no vulkan backend (libvulkan-dev and glslc were not found)";
  return b->unavailable;
}

TEST(Vulkan, ValidationLayerLoadedAndSilentWhileOpsRun) {
  TW_SKIP_IF_UNAVAILABLE(vulkan_unavailable());
  ASSERT_TRUE(kValidation);
  const Device d = Device::local("vulkan", 0);
  Backend& backend = d.sink()->backend();
  const std::optional<Backend::DebugLayer> before = backend.debug_layer();
  ASSERT_TRUE(before.has_value()) << "TW_VULKAN_VALIDATION=1 but no validation layer is loaded";
  EXPECT_EQ(before->name, "VK_LAYER_KHRONOS_validation");
  const uint64_t dispatches = backend.device_dispatches();
  // Elementwise kinds, broadcasting, views, casts: every path of the elementwise shader.
  const Tensor a = from_vector<float>({1, -2, 3, -4, 5, -6}, {2, 3}, d);
  const Tensor b = from_vector<float>({0.5f, 2, -1}, {3}, d);
  const Tensor c = where(a > b, (a + b).exp() * a.t().t(), b);
  const Tensor i = a.to(kI64) * 3 - 1;
  const Tensor h = a.to(kF16).to(kF32);
  EXPECT_EQ(c.shape(), (Shape{2, 3}));
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{2, -7, 8, -13, 14, -19}));
  EXPECT_EQ(h.to_vector<float>(), a.to_vector<float>());
  EXPECT_EQ(a.t().to_vector<float>(), (std::vector<float>{1, -4, -2, 5, 3, -6}));
  (void)c.to_vector<float>();
  d.sync();
  EXPECT_GT(backend.device_dispatches(), dispatches);
  const std::optional<Backend::DebugLayer> after = backend.debug_layer();
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(after->messages, 0u) << "the validation layer reported: " << after->last;
}

// The random ops run Philox on the device and give the cpu device's values: uniform (f32, f64),
// bernoulli and normal f32 bit for bit; normal f64 within 4 ulp (GLSL has no double log or cos:
// the shader computes them by series, within an ulp or so of the C library's).
TEST(Vulkan, RandomOpsGiveTheCpuDevicesValues) {
  TW_SKIP_IF_UNAVAILABLE(vulkan_unavailable());
  const Device d = Device::local("vulkan", 0);
  Backend& backend = d.sink()->backend();
  const uint64_t dispatches = backend.device_dispatches();
  auto both = [&](auto make) { return std::pair{make(Device::cpu()), make(d)}; };
  auto bytes_equal = [](const Tensor& a, const Tensor& b) { return a.to_bytes() == b.to_bytes(); };
  for (DType dt : {kF32, kF64}) {
    const auto [c, v] = both([&](const Device& dev) {
      manual_seed(5);
      return rand({3, 1000}, dt, dev);
    });
    EXPECT_TRUE(bytes_equal(c, v)) << "rand " << dtype_name(dt);
    const auto [cb, vb] = both([&](const Device& dev) {
      manual_seed(6);
      return bernoulli(rand({777}, dt, dev));
    });
    EXPECT_TRUE(bytes_equal(cb, vb)) << "bernoulli " << dtype_name(dt);
  }
  const auto [n32c, n32v] = both([&](const Device& dev) {
    manual_seed(7);
    return normal({4097}, 1.5, 2.0, kF32, dev);
  });
  EXPECT_TRUE(bytes_equal(n32c, n32v)) << "normal f32";
  const auto [n64c, n64v] = both([&](const Device& dev) {
    manual_seed(8);
    return randn({4097}, kF64, dev);
  });
  const std::vector<double> a = n64c.to_vector<double>(), b = n64v.to_vector<double>();
  ASSERT_EQ(a.size(), b.size());
  int differ = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    differ += a[i] != b[i];
    ASSERT_LE(std::abs(a[i] - b[i]), 4 * std::abs(std::nextafter(a[i], 0.0) - a[i])) << i;
  }
  RecordProperty("normal_f64_values_differing_by_an_ulp_or_more", differ);
  EXPECT_GT(backend.device_dispatches(), dispatches);
}

// The device describes itself (what the server's Welcome lists, protocol 16): its name and type,
// a heap of some size, every dtype but i8 (f64 with shaderFloat64), and every op it has a kernel
// for; lavapipe is a CPU device, so its tensors live in host memory.
TEST(Vulkan, DescribesItsDevice) {
  TW_SKIP_IF_UNAVAILABLE(vulkan_unavailable());
  Result<std::unique_ptr<Backend>> b = make_backend("vulkan:0");
  ASSERT_TRUE(b.ok()) << b.status().message();
  const Backend::Description d = (*b)->describe();
  EXPECT_NE(d.model.find("(Vulkan, "), std::string::npos) << d.model;
  EXPECT_GT(d.memory_total, uint64_t{1} << 20);
  EXPECT_LE(d.memory_free, d.memory_total);
  EXPECT_EQ(d.dtype_mask & (1u << static_cast<int>(kI8)), 0u);
  EXPECT_NE(d.dtype_mask & (1u << static_cast<int>(kF32)), 0u);
  EXPECT_EQ(d.ops.size(), static_cast<size_t>(ir::kNumOps - 6)) << "every op but the six "
                                                                   "quantization ops";
  if (d.model.find("llvmpipe") != std::string::npos) {
    EXPECT_TRUE(d.host_memory);
  }
}

TEST(Vulkan, AMissingDeviceIsAClearError) {
  TW_SKIP_IF_UNAVAILABLE(vulkan_unavailable());
  Result<std::unique_ptr<Backend>> r = make_backend("vulkan:99");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("no Vulkan device 99"), std::string::npos)
      << r.status().message();
  EXPECT_THROW(Device::local("vulkan", 99), Error);
}

TEST(Vulkan, RefusalsNameOpDtypeAndDevice) {
  TW_SKIP_IF_UNAVAILABLE(vulkan_unavailable());
  const Device d = Device::local("vulkan:0");
  EXPECT_EQ(d.str(), "vulkan:0");
  try {
    (void)from_vector<float>({1, 2, 3}, {3}, d).to(kI8).to(kF32).to_vector<float>();
    FAIL() << "a cast to i8 ran; the backend declares i8 unsupported";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_TRUE(testing::is_refusal(m)) << m;
    EXPECT_NE(m.find("cast"), std::string::npos) << m;
    EXPECT_NE(m.find("i8"), std::string::npos) << m;
    EXPECT_NE(m.find("vulkan:0"), std::string::npos) << m;
  }
}

// Distance in ulps between two finite doubles of one sign (or both zero).
double ulps(double got, double want) {
  if (got == want) return 0;
  if (std::isnan(got) || std::isnan(want)) return std::isnan(got) && std::isnan(want) ? 0 : 1e300;
  int64_t a, b;
  std::memcpy(&a, &got, 8);
  std::memcpy(&b, &want, 8);
  if ((a < 0) != (b < 0)) return 1e300;
  return static_cast<double>(a > b ? a - b : b - a);
}

// The f64 transcendentals the shaders compute themselves (math64.glsl: GLSL has none) within
// the ulp bounds docs/ops.md states, against the C library over each kind's range.
TEST(Vulkan, F64TranscendentalsWithinTheirUlpBounds) {
  TW_SKIP_IF_UNAVAILABLE(vulkan_unavailable());
  const Device d = Device::local("vulkan:0");
  struct K {
    const char* name;
    double lo, hi, bound;
    Tensor (*dev)(const Tensor&);
    double (*host)(double);
  };
  const K kinds[] = {
      {"exp", -700, 700, 2, [](const Tensor& t) { return t.exp(); },
       [](double x) { return std::exp(x); }},
      {"log", 1e-300, 1e300, 2, [](const Tensor& t) { return t.log(); },
       [](double x) { return std::log(x); }},
      {"log1p", -0.9, 100, 2, [](const Tensor& t) { return t.log1p(); },
       [](double x) { return std::log1p(x); }},
      {"sin", -1000, 1000, 2, [](const Tensor& t) { return t.sin(); },
       [](double x) { return std::sin(x); }},
      {"cos", -1000, 1000, 2, [](const Tensor& t) { return t.cos(); },
       [](double x) { return std::cos(x); }},
      {"tanh", -20, 20, 3, [](const Tensor& t) { return t.tanh(); },
       [](double x) { return std::tanh(x); }},
      {"erf", -6, 6, 8, [](const Tensor& t) { return t.erf(); },
       [](double x) { return std::erf(x); }},
  };
  std::mt19937_64 rng(7);
  for (const K& k : kinds) {
    std::vector<double> x(4096);
    const bool log_range = k.lo > 0;
    std::uniform_real_distribution<double> u(log_range ? std::log(k.lo) : k.lo,
                                             log_range ? std::log(k.hi) : k.hi);
    for (double& v : x) v = log_range ? std::exp(u(rng)) : u(rng);
    const std::vector<double> got =
        k.dev(from_vector<double>(x, {static_cast<int64_t>(x.size())}, d)).to_vector<double>();
    double worst = 0, at = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double e = ulps(got[i], k.host(x[i]));
      if (e > worst) {
        worst = e;
        at = x[i];
      }
    }
    EXPECT_LE(worst, k.bound) << k.name << " f64: " << worst << " ulp at x = " << at;
  }
  // Edge values: the C library's (signed zeros, infinities, NaN, subnormals).
  const std::vector<double> edge = {0.0, -0.0, INFINITY, -INFINITY, NAN, 1e-310, -1e-310};
  for (const K& k : kinds) {
    const std::vector<double> got =
        k.dev(from_vector<double>(edge, {static_cast<int64_t>(edge.size())}, d))
            .to_vector<double>();
    for (size_t i = 0; i < edge.size(); ++i) {
      const double want = k.host(edge[i]);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got[i])) << k.name << "(" << edge[i] << ") = " << got[i];
      } else {
        EXPECT_LE(ulps(got[i], want), k.bound) << k.name << "(" << edge[i] << ") = " << got[i];
        EXPECT_EQ(std::signbit(got[i]), std::signbit(want)) << k.name << "(" << edge[i] << ")";
      }
    }
  }
}

// Integer remainder takes the divisor's sign (Python's), and a zero divisor is the cpu
// backend's error, checked before the kernel runs.
TEST(Vulkan, IntegerRemainder) {
  TW_SKIP_IF_UNAVAILABLE(vulkan_unavailable());
  const Device d = Device::local("vulkan:0");
  const std::vector<int64_t> a = {7, -7, 7, -7, INT64_MIN, 0, 5};
  const std::vector<int64_t> b = {3, 3, -3, -3, -1, -4, 1};
  const std::vector<int64_t> got = from_vector<int64_t>(a, {7}, d)
                                       .remainder(from_vector<int64_t>(b, {7}, d))
                                       .to_vector<int64_t>();
  EXPECT_EQ(got, (std::vector<int64_t>{1, 2, -2, -1, 0, 0, 0}));
  try {
    (void)from_vector<int32_t>({1, 2}, {2}, d)
        .remainder(from_vector<int32_t>({1, 0}, {2}, d))
        .to_vector<int32_t>();
    FAIL() << "a remainder by zero ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("integer remainder by zero"), std::string::npos)
        << e.what();
  }
}

// Uploads and reads pass through the staging ring (a transfer up to 4 MiB takes a slice of one
// 16 MiB mapped buffer, free again once its submission is done): 40 MiB of uploads recorded
// before anything is read wrap it more than twice, and a transfer larger than a quarter of it
// has staging of its own. Asynchronous reads (to_vector_async) are all started before any is
// waited for; each value is checked, so a slice reused too early would show.
TEST(Vulkan, StagingRingAndAsynchronousReads) {
  TW_SKIP_IF_UNAVAILABLE(vulkan_unavailable());
  const Device d = Device::local("vulkan:0");
  const int64_t n = int64_t{1} << 18;  // 1 MiB of f32
  std::vector<Tensor> xs;
  for (int k = 0; k < 40; ++k) {
    std::vector<float> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>((i * 31 + k * 7) % 1000);
    xs.push_back(from_vector<float>(v, {n}, d));
  }
  std::vector<float> big(n * 9);  // 9 MiB: staging of its own
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i % 4093);
  const Tensor b = from_vector<float>(big, {n * 9}, d);
  std::vector<std::future<std::vector<float>>> pending;
  for (int k = 0; k < 40; ++k) pending.push_back((xs[k] * 2.0 + 1.0).to_vector_async<float>());
  EXPECT_EQ(b.to_vector<float>(), big);
  for (int k = 0; k < 40; ++k) {
    const std::vector<float> got = pending[k].get();
    ASSERT_EQ(got.size(), static_cast<size_t>(n));
    for (int64_t i = 0; i < n; i += 4099) {
      ASSERT_EQ(got[i], 2.0f * static_cast<float>((i * 31 + k * 7) % 1000) + 1.0f)
          << "tensor " << k << " element " << i;
    }
    // Read synchronously too (through the ring), and the transposed view of a slice.
    if (k % 10 == 0) {
      const std::vector<float> sync = xs[k].to_vector<float>();
      EXPECT_EQ(sync[12345], static_cast<float>((12345 * 31 + k * 7) % 1000));
    }
  }
  const Tensor m = xs[3].reshape({512, 512}).t();
  EXPECT_EQ(m.to_vector_async<float>().get()[1], static_cast<float>((512 * 31 + 3 * 7) % 1000));
  const std::optional<Backend::DebugLayer> layer = d.sink()->backend().debug_layer();
  ASSERT_TRUE(layer.has_value());
  EXPECT_EQ(layer->messages, 0u) << "the validation layer reported: " << layer->last;
}

}  // namespace
}  // namespace tw
