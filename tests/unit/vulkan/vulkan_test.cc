// The vulkan backend beyond the op table (which runs every case on it: tests/unit/ops): the
// validation layer is loaded and silent while ops run, a missing device is a clear error, and
// ops that are refused say so naming op, dtype and device. Runs on lavapipe in CI (CI=true: a
// missing Vulkan device fails instead of skipping).
#include <gtest/gtest.h>

#include <cstdlib>

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
