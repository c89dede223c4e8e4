// Results must not depend on the number of threads (docs/ops.md, General rules): every case of
// the table, and large inputs that are split across threads, give the same bytes with
// set_num_threads(1) and set_num_threads(2).
#include "unit/ops/devices.h"
#include "unit/ops/op_cases.h"

namespace tw::optest {
namespace {

// Runs a case at each thread count (on the same inputs) and compares every result with the
// first. The count is restored afterwards.
::testing::AssertionResult same_at(std::vector<int> thread_counts, const OpCase& c,
                                   const Device& device) {
  const int before = get_num_threads();
  struct Restore {
    int n;
    ~Restore() { set_num_threads(n); }
  } restore{before};
  try {
    const std::vector<ref::HostTensor> inputs = make_host_inputs(c);
    std::vector<DeviceResult> results;
    for (int n : thread_counts) {
      set_num_threads(n);
      Tensor t = run_on_device(c, inputs, device);
      results.push_back(DeviceResult{t.shape(), t.dtype(), t.to_bytes()});
    }
    for (size_t k = 1; k < results.size(); ++k) {
      ::testing::AssertionResult r = bit_identical(results[0], results[k]);
      if (!r) return r << " (" << thread_counts[0] << " vs " << thread_counts[k] << " threads)";
    }
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "the op threw: " << e.what();
  }
}

// Only local devices have an intra-op pool that set_num_threads controls.
Device cpu() { return Device::cpu(); }

TEST(ThreadIdentity, EveryTableCaseSameAtOneAndTwoThreads) {
  for (const OpCase& c : op_cases()) EXPECT_TRUE(same_at({1, 2}, c, cpu())) << c.name;
}

class LargeCase : public ::testing::TestWithParam<size_t> {
 protected:
  const OpCase& test_case() const { return large_op_cases()[GetParam()]; }
};

// Measured: oneDNN's matmul and convolution (f32) give the same bytes at 1, 2 and 3 threads for
// every large case here, including shapes where it could split the reduction dim (tall-skinny
// matmul, many input channels), so no op is exempt. A third count, odd, catches partitions that
// assume an even split.
TEST_P(LargeCase, SameAtOneTwoAndThreeThreads) {
  EXPECT_TRUE(same_at({1, 2, 3}, test_case(), cpu()));
}

INSTANTIATE_TEST_SUITE_P(Large, LargeCase, ::testing::Range(size_t{0}, large_op_cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           return large_op_cases()[info.param].name;
                         });

}  // namespace
}  // namespace tw::optest
