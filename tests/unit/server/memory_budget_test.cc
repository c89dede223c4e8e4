// What the server-wide budget (--max-memory) counts beside the sessions' tensors: the buffer
// pool's cached free blocks, given back before they could refuse a reservation, and the bytes
// that only capabilities keep alive, until they are used or expire.
#include "server/memory_budget.h"

#include <gtest/gtest.h>

#include "server/transfer.h"

namespace tw::server {
namespace {

constexpr uint64_t kMiB = 1 << 20;

TEST(MemoryBudget, PoolCacheCountsAsHeldAndIsFreedRatherThanRefuse) {
  BufferPool pool(64 * kMiB);
  { Buffer b = pool.allocate(kMiB); }  // back on the free list: 1 MiB cached
  ASSERT_EQ(pool.stats().bytes_cached, kMiB);
  MemoryBudget budget(2 * kMiB);
  budget.set_pool(&pool);
  EXPECT_EQ(budget.cached(), kMiB);
  // Beside the cached MiB there is room for half a MiB without touching the cache ...
  ASSERT_TRUE(budget.try_reserve(kMiB / 2));
  EXPECT_EQ(pool.stats().bytes_cached, kMiB) << "the cache was freed though nothing needed it";
  // ... but not for a whole one: the cache goes back to the system instead of the refusal.
  ASSERT_TRUE(budget.try_reserve(kMiB));
  EXPECT_EQ(pool.stats().bytes_cached, 0u);
  EXPECT_EQ(budget.used(), kMiB + kMiB / 2);
  // What is really held still bounds it.
  EXPECT_FALSE(budget.try_reserve(kMiB));
  EXPECT_EQ(budget.used(), kMiB + kMiB / 2);
}

TEST(MemoryBudget, WithoutAPoolNothingIsCached) {
  MemoryBudget budget(kMiB);
  EXPECT_EQ(budget.cached(), 0u);
  EXPECT_TRUE(budget.try_reserve(kMiB));
  EXPECT_FALSE(budget.try_reserve(1));
}

TensorData bytes_of(uint64_t n) {
  return TensorData{{{static_cast<int64_t>(n)}, kU8}, Buffer::zeros(static_cast<size_t>(n))};
}

TEST(MemoryBudget, BytesOnlyCapabilitiesKeepAliveCountUntilUsedOrExpired) {
  uint64_t now = 1000;
  CapabilityTable table("9f3a", std::chrono::milliseconds(500), [&] { return now; });
  MemoryBudget budget(4 * kMiB);
  budget.set_pinned([&] { return table.pinned_bytes(); });
  // While the session holds the tensor its bytes count there, not a second time here ...
  TensorData held = bytes_of(3 * kMiB);
  Result<std::string> a = table.issue(1, 10, held);
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(budget.pinned(), 0u);
  EXPECT_TRUE(budget.try_reserve(kMiB / 2));
  budget.release(kMiB / 2);
  // ... once it drops it, the capability alone keeps them alive, and they count.
  held = {};
  EXPECT_EQ(budget.pinned(), 3 * kMiB);
  EXPECT_FALSE(budget.try_reserve(2 * kMiB));
  EXPECT_TRUE(budget.try_reserve(kMiB));
  budget.release(kMiB);
  // Redeeming hands them to whoever imports the tensor.
  ASSERT_TRUE(table.redeem(*a, 1, 10).ok());
  EXPECT_EQ(budget.pinned(), 0u);
  // Expiry frees them, once swept.
  ASSERT_TRUE(table.issue(1, 12, bytes_of(kMiB)).ok());
  EXPECT_EQ(budget.pinned(), kMiB);
  EXPECT_FALSE(table.sweep());
  now += 501;
  EXPECT_TRUE(table.sweep());
  EXPECT_EQ(budget.pinned(), 0u);
  EXPECT_EQ(table.outstanding(), 0u);
}

}  // namespace
}  // namespace tw::server
