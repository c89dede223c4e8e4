// SpinBudget (server/spin_budget.h): at most max() threads hold it at once; a thread's nested
// holds count once; a hold given back frees its place.
#include "server/spin_budget.h"

#include <gtest/gtest.h>

#include <thread>

namespace tw::server {
namespace {

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
    bool other_held = true;
    std::thread([&] {
      SpinBudget::Hold h(budget);
      other_held = static_cast<bool>(h);
    }).join();
    EXPECT_FALSE(other_held) << "a second thread spins beside the one allowed";
  }
  EXPECT_EQ(budget.spinning(), 0);
  bool other_held = false;
  std::thread([&] {
    SpinBudget::Hold h(budget);
    other_held = static_cast<bool>(h);
  }).join();
  EXPECT_TRUE(other_held) << "the place was not given back";
}

TEST(SpinBudget, ABudgetBelowOneIsOne) {
  SpinBudget budget(0);  // one core: hardware_concurrency() - 1
  EXPECT_EQ(budget.max(), 1);
  SpinBudget::Hold h(budget);
  EXPECT_TRUE(h);
}

}  // namespace
}  // namespace tw::server
