// Results must not depend on the number of threads (docs/ops.md, General rules): every case of
// the table, and large inputs that are split across threads, give the same bytes with
// set_num_threads(1) and set_num_threads(2).
#include "unit/ops/devices.h"
#include "unit/ops/op_cases.h"

namespace tw::optest {
namespace {

// Runs a case at a given thread count and restores the previous count.
DeviceResult run_at(int threads, const OpCase& c, const Device& device) {
  const int before = get_num_threads();
  set_num_threads(threads);
  struct Restore {
    int n;
    ~Restore() { set_num_threads(n); }
  } restore{before};
  return run_bytes(c, device);
}

::testing::AssertionResult same_at(int threads_a, int threads_b, const OpCase& c, const Device& device) {
  try {
    return bit_identical(run_at(threads_a, c, device), run_at(threads_b, c, device));
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "the op threw: " << e.what();
  }
}

// Only local devices have an intra-op pool that set_num_threads controls.
Device cpu() { return Device::cpu(); }

TEST(ThreadIdentity, EveryTableCaseSameAtOneAndTwoThreads) {
  for (const OpCase& c : op_cases()) EXPECT_TRUE(same_at(1, 2, c, cpu())) << c.name;
}

class LargeCase : public ::testing::TestWithParam<size_t> {
 protected:
  const OpCase& test_case() const { return large_op_cases()[GetParam()]; }
};

TEST_P(LargeCase, SameAtOneAndTwoThreads) { EXPECT_TRUE(same_at(1, 2, test_case(), cpu())); }

TEST_P(LargeCase, SameTwiceAtTwoThreads) { EXPECT_TRUE(same_at(2, 2, test_case(), cpu())); }

INSTANTIATE_TEST_SUITE_P(Large, LargeCase, ::testing::Range(size_t{0}, large_op_cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) { return large_op_cases()[info.param].name; });

}  // namespace
}  // namespace tw::optest
