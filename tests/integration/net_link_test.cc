// Real links (issue 34): compressed frames and deduplicated uploads (protocol 9), over a shaped
// link (tests/support/shaped_link.h: two network namespaces, a veth pair limited by tc tbf, a
// delaying relay) and over loopback. The shaped cases skip, saying why, only where network
// namespaces cannot be made (not root). Timings are bench/net_bench.cc's; these check behaviour
// and bytes on the wire.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "support/server_process.h"
#include "support/shaped_link.h"
#include "tensorwire/profile.h"
#include "tensorwire/remote.h"
#include "tensorwire/tensorwire.h"

namespace tw {
namespace {

using testing::ServerProcess;
using testing::ShapedLink;

uint64_t bytes_out(const std::string& url) {
  uint64_t n = 0;
  for (const auto& d : profile::devices())
    if (d.device.find(url) != std::string::npos) n += d.bytes_out;
  return n;
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937 rng(seed);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// Labels as int64, a typical data set's compressible bytes.
std::vector<uint8_t> labels(size_t n) {
  std::vector<uint8_t> v(n, 0);
  for (size_t i = 0; i < n; i += 8) v[i] = static_cast<uint8_t>((i / 8) * 7 % 10);
  return v;
}

std::vector<uint8_t> read_back(const Tensor& t) { return t.to_vector<uint8_t>(); }

struct Linked {
  std::unique_ptr<ShapedLink> link;
  std::unique_ptr<ServerProcess> server;
  std::string url;
};
Linked linked(uint32_t rtt_us, const std::string& rate) {
  Linked l;
  std::string why;
  l.link = ShapedLink::open({rtt_us, rate}, &why);
  if (!l.link) return l;
  l.server = l.link->in_server([] { return std::make_unique<ServerProcess>(); });
  const std::string& u = l.server->url();
  l.url = l.link->relay_to(static_cast<uint16_t>(std::stoi(u.substr(u.rfind(':') + 1))));
  return l;
}
#define SKIP_WITHOUT_LINK(l)    \
  if (!(l).link) {              \
    std::string why;            \
    ShapedLink::open({}, &why); \
    GTEST_SKIP() << why;        \
  }

TEST(NetLink, CompressibleUploadIsCompressedOnAnotherHost) {
  Linked l = linked(2000, "1gbit");
  SKIP_WITHOUT_LINK(l);
  Device d = Device::remote(l.url);
  l.link->in_client([&] { d.connect(); });
  const std::vector<uint8_t> host = labels(8 << 20);
  const uint64_t before = bytes_out(l.url);
  Tensor t = from_bytes(host, {static_cast<int64_t>(host.size())}, kU8, d);
  d.sync();
  const uint64_t wire = bytes_out(l.url) - before;
  EXPECT_LT(wire, host.size() / 8) << "8 MiB of labels took " << wire << " bytes";
  EXPECT_EQ(read_back(t), host);
  // Random bytes do not pay: they go raw (a few bytes of framing beside them).
  const std::vector<uint8_t> noise = random_bytes(1 << 20, 3);
  const uint64_t before_noise = bytes_out(l.url);
  Tensor r = from_bytes(noise, {static_cast<int64_t>(noise.size())}, kU8, d);
  EXPECT_EQ(read_back(r), noise);
  EXPECT_LT(bytes_out(l.url) - before_noise, noise.size() + 4096);
}

TEST(NetLink, ReuploadAfterReconnectSendsAHash) {
  Linked l = linked(2000, "1gbit");
  SKIP_WITHOUT_LINK(l);
  const std::vector<uint8_t> host = random_bytes(8 << 20, 5);
  {
    Device first = Device::remote(l.url);
    l.link->in_client([&] { first.connect(); });
    Tensor t = from_bytes(host, {static_cast<int64_t>(host.size())}, kU8, first);
    first.sync();
  }  // the session is gone: the server's cache keeps the bytes
  Device again = Device::remote(l.url);
  l.link->in_client([&] { again.connect(); });
  again.sync();
  const uint64_t before = bytes_out(l.url);
  Tensor t = from_bytes(host, {static_cast<int64_t>(host.size())}, kU8, again);
  again.sync();
  EXPECT_LE(bytes_out(l.url) - before, 1024u);
  EXPECT_EQ(read_back(t), host);
}

// Over loopback (no namespaces needed): a repeated upload is deduplicated, a changed one is
// not, and both read back exactly.
TEST(NetLink, DedupOnLoopbackKeepsBytesExact) {
  ServerProcess server;
  Device d = Device::remote(server.url());
  std::vector<uint8_t> host = random_bytes(4 << 20, 9);
  Tensor a = from_bytes(host, {static_cast<int64_t>(host.size())}, kU8, d);
  d.sync();
  uint64_t before = bytes_out(server.url());
  Tensor b = from_bytes(host, {static_cast<int64_t>(host.size())}, kU8, d);
  d.sync();
  EXPECT_LE(bytes_out(server.url()) - before, 1024u);
  host[12345] ^= 1;
  before = bytes_out(server.url());
  Tensor c = from_bytes(host, {static_cast<int64_t>(host.size())}, kU8, d);
  d.sync();
  EXPECT_GE(bytes_out(server.url()) - before, host.size());
  EXPECT_EQ(read_back(c), host);
  host[12345] ^= 1;
  EXPECT_EQ(read_back(b), host);
  EXPECT_EQ(read_back(a), host);
}

// Latency hiding: a thread that starts waiting for a reply (here an asynchronous read's) sends the
// ops it queued after its request at once, not after the idle flush (set to 10 s here), so the
// server works on them while the reply travels. (The server sleeps 100 ms per op, so the reply is
// not in yet when the wait starts.)
TEST(NetLink, WaitingSendsTheOpsQueuedAfterTheRequest) {
  ::setenv("TW_TEST_OP_DELAY_US", "100000", 1);
  ServerProcess server;
  ::unsetenv("TW_TEST_OP_DELAY_US");
  ::setenv("TW_FLUSH_IDLE_US", "10000000", 1);  // read as the device is made
  Device d = Device::remote(server.url());
  d.connect();
  ::unsetenv("TW_FLUSH_IDLE_US");
  Tensor x = from_vector<float>({1}, {1}, d);
  auto first = x.to_vector_async<float>();
  Tensor y = x + 1.0f;  // queued behind the read, fewer ops than a batch
  const uint64_t before = wire_counters(d).frames_out;
  EXPECT_EQ(first.get(), std::vector<float>{1.0f});
  EXPECT_EQ(wire_counters(d).frames_out, before + 1);
  EXPECT_EQ(y.item<float>(), 2.0f);
}

// A black-holed link (every packet dropped, no RST) is detected within TW_DEAD_PEER_MS (2 s
// here) and every waiter gets an error, as does every later call.
TEST(NetLink, BlackHoledLinkFailsEveryWaiter) {
  ::setenv("TW_DEAD_PEER_MS", "2000", 1);
  Linked l = linked(2000, "1gbit");
  if (!l.link) ::unsetenv("TW_DEAD_PEER_MS");
  SKIP_WITHOUT_LINK(l);
  Device d = Device::remote(l.url);
  l.link->in_client([&] { d.connect(); });
  ::unsetenv("TW_DEAD_PEER_MS");  // (set on the sockets already)
  Tensor x = from_vector<float>({1, 2, 3}, {3}, d);
  d.sync();
  ASSERT_TRUE(l.link->blackhole(true));
  const auto t0 = std::chrono::steady_clock::now();
  constexpr int kWaiters = 3;
  std::vector<std::string> errors(kWaiters);
  std::vector<double> seconds(kWaiters);
  std::vector<std::thread> waiters;
  for (int i = 0; i < kWaiters; ++i) {
    waiters.emplace_back([&, i] {
      try {
        (void)(x + static_cast<float>(i)).to_vector<float>();
      } catch (const Error& e) {
        errors[i] = e.what();
      }
      seconds[i] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    });
  }
  for (auto& t : waiters) t.join();
  for (int i = 0; i < kWaiters; ++i) {
    EXPECT_FALSE(errors[i].empty()) << "waiter " << i << " got a value through a black hole";
    EXPECT_LT(seconds[i], 10.0) << "waiter " << i << ": " << errors[i];
  }
  EXPECT_THROW(d.sync(), Error);
}

}  // namespace
}  // namespace tw
