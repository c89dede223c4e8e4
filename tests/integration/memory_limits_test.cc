// What the server-wide memory limit (--max-memory) counts beside the sessions' tensors, against
// real server processes with small limits: a large frame's bytes, reserved before it is read;
// the bytes a capability pins; and the buffer pool's cache, which never makes an op fail.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "integration/raw_client.h"
#include "support/server_process.h"
#include "tensorwire/remote.h"
#include "tensorwire/tensorwire.h"

namespace tw {
namespace {

namespace proto = protocol;
using testing::RawClient;
using testing::ServerProcess;

constexpr int64_t kChunk = 64 * 1024;  // f32 elements: 256 KiB a tensor
constexpr int64_t kMiBFloats = 256 * 1024;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

void expect_healthy(const Device& d, int64_t k) {
  Tensor x = arange(0, 100, 1, std::nullopt, d);  // i64
  EXPECT_EQ((x + k).sum().item<int64_t>(), 4950 + 100 * k) << "the well-behaved client broke";
}

// Holds 256 KiB tensors on `d` until one fails (or `most` are held); returns that error.
std::string fill(const Device& d, std::vector<Tensor>& held, int most) {
  for (int i = 0; i < most; ++i) {
    Tensor t = full({kChunk}, static_cast<double>(i), kF32, d);
    try {
      EXPECT_EQ(t.to_vector<float>().back(), static_cast<float>(i));
    } catch (const Error& e) {
      return e.what();
    }
    held.push_back(t);
  }
  return "";
}

bool server_holds_at_most(const Device& d, uint64_t bytes) {
  for (int i = 0; i < 500; ++i) {
    if (remote_stats(d).bytes_held <= bytes) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

std::unique_ptr<RawClient> raw_session(const std::string& url) {
  auto c = std::make_unique<RawClient>(url, 10000);
  auto w = c->hello();
  if (!w.ok() || w->kind != proto::ServerMsg::kWelcome) {
    ADD_FAILURE() << "handshake failed: " << (w.ok() ? w->refuse.message : w.status().message());
    return nullptr;
  }
  return c;
}

// A batch uploading `floats` f32 values as tensor `id`, then a sync.
proto::OutFrame upload(ir::TensorId id, int64_t floats, uint64_t sync) {
  std::vector<float> v(static_cast<size_t>(floats), 0.5f);
  ir::FromHost op;
  op.out = {id};
  op.shape = {floats};
  op.dtype = kF32;
  op.data = ir::Bytes{Buffer::copy_of(v.data(), v.size() * sizeof(float))};
  proto::BatchWriter b;
  b.add_op(op);
  b.add_sync(sync);
  return b.take();
}

TEST(MemoryLimits, UploadFrameOverWhatIsLeftFailsThatSessionOnly) {
  ServerProcess server({"--max-memory", "4M", "--session-memory", "8M"});
  Device a = Device::remote(server.url());
  std::vector<Tensor> held;
  ASSERT_EQ(fill(a, held, 12), "");  // 3 MiB of the 4
  auto b = raw_session(server.url());
  ASSERT_TRUE(b);
  // 2 MiB do not fit in what is left: refused before the server allocates the frame.
  ASSERT_TRUE(b->send_frame(upload(1, 2 * kMiBFloats, 7)));
  auto m = b->read_message();
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_EQ(m->kind, proto::ServerMsg::kSessionError);
  const std::string e = m->status.message();
  EXPECT_TRUE(contains(e, "frame of 2.0MiB")) << e;
  EXPECT_TRUE(contains(e, "server memory limit")) << e;
  EXPECT_TRUE(contains(e, "4.0MiB")) << e;
  EXPECT_TRUE(contains(e, "--max-memory")) << e;
  EXPECT_TRUE(b->closed_by_peer()) << "the session whose frame was refused stayed open";
  // The server and the other session go on, and a new session works.
  ASSERT_EQ(kill(server.pid(), 0), 0) << "the server died";
  EXPECT_EQ(held[11].to_vector<float>()[0], 11.0f);
  expect_healthy(a, 1);
  expect_healthy(Device::remote(server.url()), 2);
  // Once memory is free an upload of 3 MiB fits in 4: its tensor takes its bytes from the
  // frame's reservation, not a second time.
  held.clear();
  a.sync();
  ASSERT_TRUE(server_holds_at_most(a, 0)) << "the dropped tensors were not freed";
  auto c = raw_session(server.url());
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->send_frame(upload(1, 3 * kMiBFloats, 8)));
  m = c->read_message();
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_EQ(m->kind, proto::ServerMsg::kSyncResult) << m->status.message();
  proto::BatchWriter r;
  r.add_read(9, 1);
  ASSERT_TRUE(c->send_frame(r.take()));
  m = c->read_message();
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_EQ(m->kind, proto::ServerMsg::kReadResult);
  ASSERT_TRUE(m->status.ok()) << m->status.message();
  EXPECT_EQ(m->data.values<float>()[3 * kMiBFloats - 1], 0.5f);
}

TEST(MemoryLimits, ExportedBytesCountUntilTheCapabilityExpires) {
  ServerProcess server({"--max-memory", "4M", "--session-memory", "8M", "--capability-ttl", "2"});
  auto a = raw_session(server.url());
  ASSERT_TRUE(a);
  ir::Full f;
  f.out = {1};
  f.shape = {3 * kMiBFloats};
  f.dtype = kF32;
  f.value = ir::Scalar(1.0);
  proto::BatchWriter w;
  w.add_op(f);
  w.add_export(7, 1);
  w.add_drop({1});  // the capability keeps the 3 MiB alive all the same
  w.add_sync(8);
  ASSERT_TRUE(a->send_frame(w.take()));
  auto m = a->read_message();
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_EQ(m->kind, proto::ServerMsg::kCapabilityResult);
  ASSERT_TRUE(m->status.ok()) << m->status.message();
  m = a->read_message();
  ASSERT_TRUE(m.ok() && m->kind == proto::ServerMsg::kSyncResult);

  // Another session finds only what the pinned bytes leave.
  Device b = Device::remote(server.url());
  std::vector<Tensor> held;
  const std::string e = fill(b, held, 16);
  EXPECT_TRUE(contains(e, "server memory limit")) << e;
  EXPECT_TRUE(contains(e, "exported tensors not yet moved 3.0MiB")) << e;
  EXPECT_LE(held.size(), 4u);
  // Expired, the capability gives them back.
  std::this_thread::sleep_for(std::chrono::milliseconds(2200));
  held.clear();
  b.sync();
  ASSERT_TRUE(server_holds_at_most(b, 0));
  EXPECT_EQ(fill(b, held, 12), "");
  EXPECT_EQ(held.size(), 12u);
}

TEST(MemoryLimits, PoolCacheNeverFailsAnOp) {
  // The first session's 4 MiB go back to the server's buffer pool when dropped; the second
  // session's ops find them cached, counted as held, and freed rather than refused.
  ServerProcess server({"--max-memory", "4M", "--session-memory", "8M"});
  Device a = Device::remote(server.url());
  std::vector<Tensor> held;
  EXPECT_TRUE(contains(fill(a, held, 32), "server memory limit"));
  EXPECT_EQ(held.size(), 16u);
  held.clear();
  a.sync();
  ASSERT_TRUE(server_holds_at_most(a, 0));
  Device b = Device::remote(server.url());
  EXPECT_TRUE(contains(fill(b, held, 32), "server memory limit"));
  EXPECT_EQ(held.size(), 16u);
  held.clear();
  b.sync();
  ASSERT_TRUE(server_holds_at_most(b, 0));
  expect_healthy(a, 3);
}

}  // namespace
}  // namespace tw
