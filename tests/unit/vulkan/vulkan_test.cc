// The vulkan backend beyond the op table (which runs every case on it: tests/unit/ops): the
// validation layer is loaded and silent while ops run, a missing device is a clear error, and
// ops that are refused say so naming op, dtype and device. Runs on lavapipe in CI (CI=true: a
// missing Vulkan device fails instead of skipping).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

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
  const Tensor x = from_vector<double>({1, 2, 3}, {3}, d);
  try {
    (void)x.exp().to_vector<double>();
    FAIL() << "exp on f64 ran; the backend declares it unsupported";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_TRUE(testing::is_refusal(m)) << m;
    EXPECT_NE(m.find("exp"), std::string::npos) << m;
    EXPECT_NE(m.find("f64"), std::string::npos) << m;
    EXPECT_NE(m.find("vulkan:0"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace tw
