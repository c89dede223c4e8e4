// Remote execution against real server processes on 127.0.0.1 (port 0).
#include "tensorwire/remote.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <thread>

#include "support/server_process.h"
#include "tensorwire/server.h"
#include "tensorwire/tensorwire.h"

namespace tw {
namespace {

using testing::ServerProcess;

TEST(Remote, OpsMatchCpuBitForBit) {
  ServerProcess server;
  Device remote = Device::remote(server.url(), 0);
  Device cpu = Device::cpu();
  // Otherwise the comparison below would be of the CPU with itself.
  ASSERT_EQ(remote.kind(), Device::Kind::kRemote);
  auto run = [](const Device& d) {
    manual_seed(42);
    Tensor a = randn({64, 32}, kF32, d);
    Tensor b = randn({32, 16}, kF32, d);
    Tensor c = (a.matmul(b).relu() + 1.5).softmax(-1).sum(0);
    return c;
  };
  const Tensor on_remote = run(remote);
  EXPECT_EQ(run(cpu).to_bytes(), on_remote.to_bytes());
  ASSERT_EQ(on_remote.shape(), Shape{16});
  // Each of the 64 softmax rows sums to 1, so the column sums add up to 64: a check that does
  // not come from the CPU backend (two equally wrong results would still agree).
  double total = 0;
  for (float v : on_remote.to_vector<float>()) total += v;
  EXPECT_NEAR(total, 64.0, 1e-3);
}

// Batches start at 16 ops after a reply was waited for and double up to TW_BATCH_OPS, so an
// idle server gets work at once (docs/remote.md, Batching). The idle flush is pushed far out so
// that only the op counts send frames here.
TEST(Remote, BatchesStartSmallAfterAReplyAndDouble) {
  ServerProcess server;
  ::setenv("TW_FLUSH_IDLE_US", "30000000", 1);
  ::setenv("TW_BATCH_OPS", "64", 1);
  Device d = Device::remote(server.url());
  ::unsetenv("TW_FLUSH_IDLE_US");
  ::unsetenv("TW_BATCH_OPS");
  d.connect();
  std::vector<Tensor> keep;  // no drops: only the ops count
  auto frames = [&] { return wire_counters(d).frames_out; };
  auto ops = [&](int n) {
    for (int i = 0; i < n; ++i) keep.push_back(full({1}, static_cast<double>(i), kF32, d));
  };
  for (int pass = 0; pass < 2; ++pass) {
    const uint64_t f0 = frames();
    ops(15);
    EXPECT_EQ(frames(), f0) << "pass " << pass;
    ops(1);  // the 16th op sends the first batch
    EXPECT_EQ(frames(), f0 + 1) << "pass " << pass;
    ops(31);
    EXPECT_EQ(frames(), f0 + 1) << "pass " << pass;
    ops(1);  // then 32
    EXPECT_EQ(frames(), f0 + 2) << "pass " << pass;
    ops(64);  // then 64, the TW_BATCH_OPS cap ...
    EXPECT_EQ(frames(), f0 + 3) << "pass " << pass;
    ops(64);  // ... which holds
    EXPECT_EQ(frames(), f0 + 4) << "pass " << pass;
    // Waiting for a reply starts the sizes over.
    EXPECT_EQ(keep.back().item<float>(), 63.0f);
  }
}

TEST(Remote, UploadAndReadBack) {
  ServerProcess server;
  Device d = Device::remote(server.url());
  std::vector<float> v(1000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.5f;
  Tensor t = from_vector<float>(v, {10, 100}, d);
  EXPECT_EQ(t.to_vector<float>(), v);
  EXPECT_EQ(t.device().kind(), Device::Kind::kRemote);
  // An async read completes while others are in flight, in any order.
  std::vector<std::future<std::vector<float>>> futs;
  for (int i = 0; i < 8; ++i) {
    futs.push_back(std::async(std::launch::async,
                              [&, i] { return (t * static_cast<double>(i)).to_vector<float>(); }));
  }
  for (int i = 0; i < 8; ++i) {
    auto r = futs[i].get();
    ASSERT_EQ(r.size(), v.size());
    EXPECT_FLOAT_EQ(r[999], v[999] * static_cast<float>(i));
  }
}

// Replies are read by whichever waiting thread holds the socket (or by the I/O thread): many
// threads on one device, small and large replies (past the client's 64 KiB staging buffer),
// plus futures nobody waits on through the device, must all complete with the right values.
TEST(Remote, OneDeviceManyThreadsReadingConcurrently) {
  ServerProcess server;
  Device d = Device::remote(server.url());
  Tensor big = arange(0, 50000, 1, kF32, d);  // 200 KB per read
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < 60; ++k) {
        if ((k + t) % 5 == 0) {
          std::vector<float> v = (big + static_cast<double>(t)).to_vector<float>();
          if (v.size() != 50000 || v[49999] != 49999.0f + static_cast<float>(t)) bad++;
        } else {
          float x = (full({1}, static_cast<double>(k), kF32, d) * 2.0).item<float>();
          if (x != 2.0f * static_cast<float>(k)) bad++;
        }
      }
    });
  }
  // A future taken straight from the sink's async read: it completes without this thread
  // reading, after the callers above have come and gone.
  for (int k = 0; k < 20; ++k) {
    auto fut = (big * 3.0).to_vector_async<float>();
    std::this_thread::sleep_for(std::chrono::microseconds(300 * (k % 4)));
    std::vector<float> v = fut.get();
    if (v.size() != 50000 || v[2] != 6.0f) bad++;
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  auto late = (big * 2.0).to_vector_async<float>();
  EXPECT_EQ(late.get()[10], 20.0f);
}

TEST(Remote, EnumerationAndThreeDevices) {
  ServerProcess server({"--devices", "3"});
  auto devs = remote_devices(server.url());
  ASSERT_EQ(devs.size(), 3u);
  EXPECT_EQ(devs[2].name, "cpu:2");
  // Each device describes itself (protocol 16): the host's CPU and memory, every dtype, every op.
  for (const RemoteDeviceInfo& d : devs) {
    EXPECT_NE(d.model.find("threads"), std::string::npos) << d.model;
    EXPECT_TRUE(d.host_memory);
    EXPECT_GT(d.memory_total, uint64_t{1} << 20);
    EXPECT_GT(d.memory_free, 0u);
    EXPECT_LE(d.memory_free, d.memory_total);
    EXPECT_EQ(d.dtypes.size(), static_cast<size_t>(kNumDTypes));
    EXPECT_NE(std::find(d.ops.begin(), d.ops.end(), "MatMul"), d.ops.end());
    EXPECT_NE(std::find(d.ops.begin(), d.ops.end(), "LinearBlocks"), d.ops.end());
  }
  for (int i = 0; i < 3; ++i) {
    Device d = Device::remote(server.url(), i);
    EXPECT_EQ(remote_handshake(d).device.index, i);
    EXPECT_EQ((ones({3}, kF32, d) * static_cast<double>(i)).sum().item<float>(), 3.0f * i);
  }
}

TEST(Remote, TwoServersOneClient) {
  ServerProcess s1, s2;
  Device d1 = Device::remote(s1.url()), d2 = Device::remote(s2.url());
  Tensor a = arange(0, 10, 1, kF32, d1);
  Tensor b = a.to(d2) * 2.0;
  EXPECT_EQ(b.device(), d2);
  EXPECT_EQ(b.to(Device::cpu()).sum().item<float>(), 90.0f);
  EXPECT_THROW(a + b, Error);  // different devices
}

TEST(Remote, SixtyFourConcurrentSessions) {
  ServerProcess server;
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 64; ++i) {
    threads.emplace_back([&, i] {
      Device d = Device::remote(server.url());
      Tensor x = full({100}, i, kI64, d);
      for (int k = 0; k < 20; ++k) x = x + 1;
      if (x.sum().item<int64_t>() == 100 * (i + 20)) ok++;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 64);
}

TEST(Remote, ShapeErrorsAtTheCallSite) {
  ServerProcess server;
  Device d = Device::remote(server.url());
  try {
    Tensor c = ones({2, 3}, kF32, d).matmul(ones({4, 5}, kF32, d));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("matmul: inner dimensions differ: [2, 3] x [4, 5]"),
              std::string::npos)
        << e.what();
  }
}

TEST(Remote, FailedOpPoisonsDependentsAndSessionGoesOn) {
  ServerProcess server;
  Device d = Device::remote(server.url());
  Tensor x = arange(0, 5, 1, kF32, d);
  Tensor bad_index = tensor<int64_t>({0, 7}, d);
  Tensor g = x.index_select(0, bad_index);  // index 7 out of range: fails on the server
  Tensor h = g * 2.0;                       // depends on the failure
  try {
    h.to_vector<float>();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("index_select"), std::string::npos) << m;
    EXPECT_NE(m.find("7"), std::string::npos) << m;
  }
  EXPECT_EQ((x + 1.0).sum().item<float>(), 15.0f);  // the session is still usable
}

TEST(Remote, ServerKilledFailsEveryCallWithinASecond) {
  auto server = std::make_unique<ServerProcess>();
  std::string url = server->url();
  Device d = Device::remote(url);
  Tensor x = ones({1000}, kF32, d);
  EXPECT_EQ(x.sum().item<float>(), 1000.0f);
  server->kill_hard();
  auto t0 = std::chrono::steady_clock::now();
  try {
    (x * 2.0).to_vector<float>();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(url), std::string::npos) << e.what();
  }
  EXPECT_THROW(ones({3}, kF32, d).to_vector<float>(), Error);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
}

TEST(Remote, ConnectFailureIsAnErrorNotAHang) {
  // Find a free port and leave it closed.
  ServerProcess server;
  std::string url = server.url();
  server.stop();
  Device d = Device::remote(url);
  EXPECT_THROW(d.connect(), Error);
  EXPECT_THROW(ones({2}, kF32, d), Error);
}

TEST(Remote, HostingValidation) {
  ServerProcess server;
  try {
    auto s = serve(Device::remote(server.url()));
    FAIL() << "serving a remote device must fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("remote device only forwards ops"), std::string::npos)
        << e.what();
  }
  ServerOptions bad;
  bad.backend = "quantum";
  EXPECT_THROW(serve(bad), Error);
}

TEST(Remote, InProcessServerOnEphemeralPort) {
  auto server = serve(Device::cpu());
  Device d = Device::remote(server->url());
  EXPECT_EQ(arange(0, 4, 1, kI64, d).sum().item<int64_t>(), 6);
  EXPECT_GE(server->stats().ops_executed, 2u);
}

TEST(Remote, UnixSocket) {
  std::string path = "/tmp/tw-test-" + std::to_string(getpid()) + ".sock";
  ServerProcess server({"--listen", "unix://" + path});
  ASSERT_EQ(server.urls().size(), 2u);
  Device d = Device::remote("unix://" + path);
  EXPECT_EQ(ones({5}, kF32, d).sum().item<float>(), 5.0f);
}

}  // namespace
}  // namespace tw
