// The client's transport options against real server processes on 127.0.0.1 (port 0): a
// caller that spins on the stream before blocking for a reply (TW_SPIN_US) gets the same bytes
// as one that blocks at once, for replies that come within the spin and ones that come after.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <vector>

#include "support/server_process.h"
#include "tensorwire/remote.h"
#include "tensorwire/tensorwire.h"

namespace tw {
namespace {

using testing::ServerProcess;

// Round trips small and large, several reads in flight, and a reply slower than any spin.
std::vector<std::vector<uint8_t>> exchange(const Device& d) {
  manual_seed(11);
  std::vector<std::vector<uint8_t>> out;
  Tensor x = full({1}, 1.0, kF32, d);
  for (int i = 0; i < 200; ++i) {
    x = x * 1.5 + 0.25;
    out.push_back(x.to_bytes());
  }
  Tensor a = randn({256, 256}, kF32, d);
  Tensor slow = a;
  for (int i = 0; i < 20; ++i) slow = slow.matmul(a).tanh();
  std::vector<Tensor> many;
  for (int64_t n : {1, 1000, 70'000, 1 << 20}) many.push_back(arange(0, n, 1, kF32, d) * 0.5);
  for (const Tensor& t : many) out.push_back(t.to_bytes());
  out.push_back(slow.to_bytes());
  return out;
}

TEST(Transport, SpinningForRepliesGivesWhatBlockingDoes) {
  ServerProcess blocking_server, spinning_server;
  ::unsetenv("TW_SPIN_US");
  Device blocking = Device::remote(blocking_server.url(), 0);
  auto expected = exchange(blocking);
  ::setenv("TW_SPIN_US", "200", 1);
  Device spinning = Device::remote(spinning_server.url(), 0);
  auto got = exchange(spinning);
  ::unsetenv("TW_SPIN_US");
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], expected[i]) << "reply " << i;
  EXPECT_EQ(got, exchange(Device::cpu()));
}

}  // namespace
}  // namespace tw
