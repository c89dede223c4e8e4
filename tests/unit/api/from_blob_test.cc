// tw::from_blob: a CPU tensor over borrowed memory (what the Python module's from_numpy uses).
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "tensorwire/server.h"
#include "tensorwire/tensor.h"

namespace {

TEST(FromBlob, CpuTensorSharesTheMemoryAndHoldsItsOwner) {
  auto data = std::make_shared<std::vector<float>>(std::vector<float>{1, 2, 3, 4, 5, 6});
  std::weak_ptr<std::vector<float>> watch = data;
  tw::Tensor t = tw::from_blob(data->data(), {2, 3}, tw::kF32, data);
  float* p = data->data();
  data.reset();
  ASSERT_FALSE(watch.expired());  // the tensor keeps the memory alive
  p[4] = 50;                      // a write to the memory is seen by the tensor
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 50, 6}));
  EXPECT_EQ(t.sum().item<float>(), 66);
  // A read of a contiguous CPU tensor shares the same memory.
  EXPECT_EQ(t.host_values().data, static_cast<const void*>(p));
  tw::Tensor view = t.reshape({6});
  t = tw::Tensor();
  EXPECT_FALSE(watch.expired());  // a view still holds it
  view = tw::Tensor();
  EXPECT_TRUE(watch.expired());
}

TEST(FromBlob, OtherDevicesCopyAtOnce) {
  auto server = tw::serve(tw::Device::cpu());
  const tw::Device remote = tw::Device::remote(server->url());
  auto data = std::make_shared<std::vector<int64_t>>(std::vector<int64_t>{1, 2, 3});
  std::weak_ptr<std::vector<int64_t>> watch = data;
  tw::Tensor t = tw::from_blob(data->data(), {3}, tw::kI64, data, remote);
  (*data)[0] = 100;
  data.reset();
  EXPECT_TRUE(watch.expired());  // released at once: the bytes were copied
  EXPECT_EQ(t.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3}));
}

TEST(FromBlob, RejectsBadShapes) {
  std::vector<float> v(4);
  EXPECT_THROW(tw::from_blob(v.data(), {-1, 4}, tw::kF32, nullptr), tw::Error);
  EXPECT_THROW(tw::from_blob(v.data(), {int64_t{1} << 40, int64_t{1} << 40}, tw::kF32, nullptr),
               tw::Error);
  EXPECT_THROW(tw::from_blob(nullptr, {2}, tw::kF32, nullptr), tw::Error);
  EXPECT_EQ(tw::from_blob(nullptr, {0, 3}, tw::kF32, nullptr).numel(), 0);
}

}  // namespace
