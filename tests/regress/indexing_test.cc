// Regression tests for indexing bugs (tests/regress: one test per bug, named after what broke).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "regress/devices.h"
#include "tensorwire/tensorwire.h"

namespace tw {
namespace {

// Issue 52: a negative index tensor (x[tw.tensor([-1])] in Python, which numpy and PyTorch
// wrap) was refused as out of range. index_select, gather, scatter_add and their gradients now
// take [-size, size), a negative index counting from the end; outside it the error still names
// the index, the dim and its size.
TEST(Regress, NegativeIndexTensorsWereRefused) {
  testing::RegressDevices devs;
  for (const Device& d : devs.all) {
    SCOPED_TRACE(d.str());
    Tensor x = from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2}, d);
    Tensor last = x.index_select(0, tensor<int64_t>({-1, 0, -3}, d));
    EXPECT_EQ(last.to_vector<float>(), (std::vector<float>{5, 6, 1, 2, 1, 2}));
    EXPECT_EQ(x.index_select(1, tensor<int32_t>({-2}, d)).to_vector<float>(),
              (std::vector<float>{1, 3, 5}));
    Tensor idx = from_vector<int64_t>({-1, 0, 1, -2}, {2, 2}, d);
    EXPECT_EQ(x.gather(1, idx).to_vector<float>(), (std::vector<float>{2, 1, 4, 3}));
    // The gradients take the same indices (IndexSelectBackward and scatter_add).
    Tensor leaf = x.detach();
    leaf.set_requires_grad();
    (leaf.index_select(0, tensor<int64_t>({-1, 2}, d)).sum() + leaf.gather(1, idx).sum())
        .backward();
    EXPECT_EQ(leaf.grad().to_vector<float>(), (std::vector<float>{1, 1, 1, 1, 2, 2}));
    Tensor s = zeros({3}, kF32, d)
                   .scatter_add(0, tensor<int64_t>({-1, -1, 0}, d), tensor<float>({1, 2, 4}, d));
    EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{4, 0, 3}));
    // Out of range either way: a clear error naming the index and the size.
    for (int64_t bad : {3, -4}) {
      try {
        (void)x.index_select(0, tensor<int64_t>({0, bad}, d)).to_vector<float>();
        ADD_FAILURE() << "index " << bad << " was accepted";
      } catch (const Error& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("index " + std::to_string(bad) + " out of range"), std::string::npos) << m;
        EXPECT_NE(m.find("size 3"), std::string::npos) << m;
      }
    }
  }
}

}  // namespace
}  // namespace tw
