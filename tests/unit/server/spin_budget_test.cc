// SpinBudget (server/spin_budget.h): at most max() threads hold it at once; a thread's nested
// holds count once; a hold given back frees its place.
#include "server/spin_budget.h"

#include <gtest/gtest.h>

#include <thread>

namespace tw::server {
namespace {

// Whether another thread gets a hold on `budget` (given back at once).
bool another_thread_holds(SpinBudget& budget) {
  bool held = false;
  std::thread([&] {
    SpinBudget::Hold h(budget);
    held = static_cast<bool>(h);
  }).join();
  return held;
}

TEST(SpinBudget, AtMostMaxThreadsHoldItAndNestedHoldsCountOnce) {
  SpinBudget budget(1);
  {
    SpinBudget::Hold outer(budget);
    ASSERT_TRUE(outer);
    {
      SpinBudget::Hold inner(budget);  // the same thread: a direct poll inside the shard's spin
      EXPECT_TRUE(inner);
      EXPECT_EQ(budget.spinning(), 1);
    }
    EXPECT_EQ(budget.spinning(), 1) << "the inner hold gave back the outer one's place";
    EXPECT_FALSE(another_thread_holds(budget)) << "a second thread spins beside the one allowed";
  }
  EXPECT_EQ(budget.spinning(), 0);
  EXPECT_TRUE(another_thread_holds(budget)) << "the place was not given back";
}

TEST(SpinBudget, ABudgetBelowOneIsOne) {
  SpinBudget budget(0);  // one core: hardware_concurrency() - 1
  EXPECT_EQ(budget.max(), 1);
  SpinBudget::Hold h(budget);
  EXPECT_TRUE(h);
}

}  // namespace
}  // namespace tw::server
