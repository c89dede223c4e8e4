// The limits that keep a server safe with several clients, against real server processes: the
// handshake deadline, the server-wide memory limit (and what it counts beside tensors: frames
// being received, exported tensors, the buffer pool's cache), fairness between sessions on one
// worker, and what a read of a poisoned huge tensor reports.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "integration/raw_client.h"
#include "support/forwarding_backend.h"
#include "support/helpers.h"
#include "support/server_process.h"
#include "tensorwire/remote.h"
#include "tensorwire/server.h"
#include "tensorwire/tensorwire.h"

namespace tw {
namespace {

namespace proto = protocol;
using testing::contains;
using testing::expect_healthy;
using testing::full_op;
using testing::RawClient;
using testing::ServerProcess;
using Clock = std::chrono::steady_clock;

std::unique_ptr<RawClient> raw_session(const std::string& url, int timeout_ms = 5000) {
  auto c = std::make_unique<RawClient>(url, timeout_ms);
  auto w = c->hello();
  if (!w.ok() || w->kind != proto::ServerMsg::kWelcome) {
    ADD_FAILURE() << "handshake failed: " << (w.ok() ? w->refuse.message : w.status().message());
    return nullptr;
  }
  return c;
}

// ------------------------------------------------------------------------- handshake deadline

TEST(Limits, HandshakeDeadlineDropsASilentPeerAndFreesItsSlot) {
  ServerProcess server({"--max-sessions", "1", "--handshake-timeout", "0.3"});
  RawClient silent(server.url());  // connects, never says Hello
  {
    // While it holds the only slot, a client is refused as busy ...
    RawClient other(server.url());
    auto m = other.hello();
    ASSERT_TRUE(m.ok()) << m.status().message();
    ASSERT_EQ(m->kind, proto::ServerMsg::kRefuse);
    EXPECT_EQ(m->refuse.reason, proto::RefuseReason::kServerBusy);
  }
  // ... until the deadline drops it.
  EXPECT_TRUE(silent.closed_by_peer()) << "a peer that never said Hello was not dropped";
  std::unique_ptr<RawClient> c;
  for (int i = 0; i < 100 && !c; ++i) {  // the refused client's slot is never taken
    auto probe = std::make_unique<RawClient>(server.url());
    auto m = probe->hello();
    if (m.ok() && m->kind == proto::ServerMsg::kWelcome) c = std::move(probe);
  }
  ASSERT_TRUE(c) << "the silent peer's slot was not freed";
  // A session past its handshake may stay idle longer than the deadline.
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  proto::BatchWriter b;
  b.add_sync(5);
  ASSERT_TRUE(c->send_frame(b.take()));
  auto m = c->read_message();
  ASSERT_TRUE(m.ok()) << "an idle session was dropped: " << m.status().message();
  EXPECT_EQ(m->kind, proto::ServerMsg::kSyncResult);
  EXPECT_EQ(m->request_id(), 5u);
}

TEST(Limits, HandshakeTimeoutFlagIsChecked) {
  EXPECT_THROW(ServerProcess({"--handshake-timeout", "0"}), std::runtime_error);
  EXPECT_THROW(ServerProcess({"--max-memory", "4X"}), std::runtime_error);
}

// --------------------------------------------------------------------- server-wide memory limit

constexpr int64_t kChunk = 64 * 1024;  // f32 elements: 256 KiB a tensor

// Holds 256 KiB tensors on `d` until one fails (or `most` are held); returns that error.
std::string fill(const Device& d, std::vector<Tensor>& held, int most) {
  for (int i = 0; i < most; ++i) {
    Tensor t = full({kChunk}, static_cast<double>(i), kF32, d);
    try {
      std::vector<float> v = t.to_vector<float>();
      EXPECT_EQ(v.back(), static_cast<float>(i));
    } catch (const Error& e) {
      return e.what();
    }
    held.push_back(t);
  }
  return "";
}

// Whether the server's sessions come to hold at most `bytes` within a few seconds. Drops travel
// with a device's next request and run after it is answered, so a sync does not wait for them.
bool server_holds_at_most(const Device& d, uint64_t bytes) {
  for (int i = 0; i < 500; ++i) {
    if (remote_stats(d).bytes_held <= bytes) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

TEST(Limits, ServerWideMemoryLimitFailsTheOpNotTheServer) {
  // 4 sessions, each allowed 8 MiB, together 4 MiB: the scaled-down form of four sessions
  // trying to hold 8 GiB on a server of --max-memory 4G (bench/remote_bench.cc runs that).
  ServerProcess server({"--max-memory", "4M", "--session-memory", "8M"});
  std::vector<Device> devices;
  for (int i = 0; i < 4; ++i) devices.push_back(Device::remote(server.url()));
  std::vector<std::vector<Tensor>> held(4);
  std::vector<std::string> errors(4);
  for (int i = 0; i < 4; ++i) errors[i] = fill(devices[i], held[i], 32);  // 32 x 256 KiB: 8 MiB
  size_t total = 0;
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(contains(errors[i], "server memory limit")) << i << ": " << errors[i];
    EXPECT_TRUE(contains(errors[i], "--max-memory")) << i << ": " << errors[i];
    EXPECT_TRUE(contains(errors[i], "4.0MiB")) << i << ": " << errors[i];
    total += held[i].size();
  }
  EXPECT_EQ(held[0].size(), 16u);  // the first took all 4 MiB; the others found none left
  EXPECT_EQ(total, 16u);
  EXPECT_LE(remote_stats(devices[3]).bytes_held, 4u << 20);
  // The server and every session go on: what they hold reads back, small work on the
  // sessions that hold nothing still fails cleanly, and freeing memory lets the others in.
  EXPECT_EQ(held[0][15].to_vector<float>()[0], 15.0f);
  ASSERT_EQ(kill(server.pid(), 0), 0) << "the server died";
  held[0].resize(8);  // frees 2 MiB
  ASSERT_TRUE(server_holds_at_most(devices[0], 2u << 20)) << "the dropped tensors were not freed";
  EXPECT_EQ(fill(devices[1], held[1], 4), "");
  EXPECT_EQ(fill(devices[2], held[2], 4), "");
  EXPECT_TRUE(contains(fill(devices[3], held[3], 1), "server memory limit"));
  held.clear();
  for (Device& d : devices) d.sync();
  ASSERT_TRUE(server_holds_at_most(devices[3], 0)) << "the dropped tensors were not freed";
  expect_healthy(devices[3], 3);
  expect_healthy(Device::remote(server.url()), 4);
}

// A device with memory of its own (a GPU: Backend::Description::host_memory false) has a budget
// of its own, 90% of what it had free when the server started (issue 47 §3): its tensors count
// there, not in --max-memory, running out names the device, and the Welcome describes it.
class SmallDeviceMemory final : public testing::ForwardingBackend {
 public:
  Description describe() override {
    Description d = inner_->describe();
    d.model = "test device of 8 MiB";
    d.host_memory = false;
    d.memory_total = 8 << 20;
    d.memory_free = 5 << 20;  // a budget of 4.5 MiB: 18 tensors of kChunk
    return d;
  }
};

TEST(Limits, ADeviceWithItsOwnMemoryHasItsOwnBudget) {
  ASSERT_TRUE(register_backend("small_gpu", []() -> Result<std::unique_ptr<Backend>> {
    return std::unique_ptr<Backend>(new SmallDeviceMemory);
  }));
  ServerOptions opts;
  opts.backend = "small_gpu";
  opts.max_memory_bytes = 64 << 20;
  opts.session_memory_bytes = 64 << 20;
  auto server = serve(opts);
  const std::vector<RemoteDeviceInfo> devs = remote_devices(server->url());
  ASSERT_EQ(devs.size(), 1u);
  EXPECT_EQ(devs[0].model, "test device of 8 MiB");
  EXPECT_FALSE(devs[0].host_memory);
  EXPECT_EQ(devs[0].memory_total, 8u << 20);
  EXPECT_EQ(devs[0].memory_free, 9u << 19);  // no more than its budget: 90% of the 5 MiB free
  Device d = Device::remote(server->url());
  std::vector<Tensor> held;
  const std::string error = fill(d, held, 32);
  EXPECT_TRUE(contains(error, "memory of device small_gpu:0 full")) << error;
  EXPECT_TRUE(contains(error, "4.5MiB")) << error;
  EXPECT_EQ(held.size(), 18u);
  // The host's budget (--max-memory) held none of it, and the Welcome now says what is left.
  EXPECT_LT(remote_stats(d).memory_used_bytes, 1u << 20);
  EXPECT_LE(remote_devices(server->url())[0].memory_free, 1u << 20);
  // Freeing lets the session go on.
  held.resize(4);
  ASSERT_TRUE(server_holds_at_most(d, 4u * kChunk * 4)) << "the dropped tensors were not freed";
  EXPECT_EQ(fill(d, held, 4), "");
  expect_healthy(d, 5);
}

// The per-session quota still speaks for itself when it is what was hit.
TEST(Limits, SessionQuotaIsNamedBeforeTheServerLimit) {
  ServerProcess server({"--max-memory", "64M", "--session-memory", "1M"});
  Device d = Device::remote(server.url());
  std::vector<Tensor> held;
  std::string e = fill(d, held, 8);
  EXPECT_EQ(held.size(), 4u);
  EXPECT_TRUE(contains(e, "session memory quota")) << e;
}

// What else the server-wide limit counts beside the sessions' tensors: a large frame's bytes,
// reserved before it is read; the bytes only a capability keeps alive; and the buffer pool's
// cache, which never makes an op fail.

constexpr int64_t kMiBFloats = 256 * 1024;

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

TEST(Limits, UploadFrameOverWhatIsLeftFailsThatSessionOnly) {
  ServerProcess server({"--max-memory", "4M", "--session-memory", "8M"});
  Device a = Device::remote(server.url());
  std::vector<Tensor> held;
  ASSERT_EQ(fill(a, held, 12), "");  // 3 MiB of the 4
  auto b = raw_session(server.url(), 10000);
  ASSERT_TRUE(b);
  // 2 MiB do not fit in what is left: refused before the server allocates the frame.
  // The server refuses on the frame's header and closes the session lingering: it reads and
  // drops the rest of the body, so the send completes and no reset takes the refusal with it.
  ASSERT_TRUE(b->send_frame(upload(1, 2 * kMiBFloats, 7)));
  auto m = b->read_message();
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_EQ(m->kind, proto::ServerMsg::kSessionError);
  const std::string e = m->status().message();
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
  auto c = raw_session(server.url(), 10000);
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->send_frame(upload(1, 3 * kMiBFloats, 8)));
  m = c->read_message();
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_EQ(m->kind, proto::ServerMsg::kSyncResult) << m->status().message();
  proto::BatchWriter r;
  r.add_read(9, 1);
  ASSERT_TRUE(c->send_frame(r.take()));
  m = c->read_message();
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_EQ(m->kind, proto::ServerMsg::kReadResult);
  ASSERT_TRUE(m->status().ok()) << m->status().message();
  EXPECT_EQ(m->read.result.value().value<float>(3 * kMiBFloats - 1), 0.5f);
}

TEST(Limits, ExportedBytesCountUntilTheCapabilityExpires) {
  ServerProcess server({"--max-memory", "4M", "--session-memory", "8M", "--capability-ttl", "2"});
  auto a = raw_session(server.url(), 10000);
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
  ASSERT_TRUE(m->status().ok()) << m->status().message();
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

// A session cannot hold more than its quota by exporting tensors and dropping them: what only
// its capabilities keep alive counts in its own quota (not another session's) until expired.
TEST(Limits, ExportedBytesCountInTheExportingSessionsQuota) {
  ServerProcess server({"--session-memory", "4M", "--capability-ttl", "2"});
  auto a = raw_session(server.url(), 10000);
  ASSERT_TRUE(a);
  auto full_of = [](ir::TensorId id, int64_t floats) {
    ir::Full f;
    f.out = {id};
    f.shape = {floats};
    f.dtype = kF32;
    f.value = ir::Scalar(1.0);
    return f;
  };
  proto::BatchWriter w;
  w.add_op(full_of(1, 3 * kMiBFloats));
  w.add_export(7, 1);
  w.add_drop({1});  // the capability keeps the 3 MiB alive all the same
  w.add_sync(8);
  ASSERT_TRUE(a->send_frame(w.take()));
  auto m = a->read_message();
  ASSERT_TRUE(m.ok() && m->kind == proto::ServerMsg::kCapabilityResult && m->status().ok());
  m = a->read_message();
  ASSERT_TRUE(m.ok() && m->kind == proto::ServerMsg::kSyncResult);
  auto try_two_mib = [&](ir::TensorId id) {
    proto::BatchWriter b;
    b.add_op(full_of(id, 2 * kMiBFloats));
    b.add_read(100 + id, id);
    EXPECT_TRUE(a->send_frame(b.take()));
    auto r = a->read_message();
    EXPECT_TRUE(r.ok() && r->kind == proto::ServerMsg::kReadResult);
    return r.ok() ? r->status() : r.status();
  };
  Status over = try_two_mib(2);
  ASSERT_FALSE(over.ok()) << "2 MiB fitted beside 3 MiB exported in a 4 MiB quota";
  EXPECT_TRUE(contains(over.message(), "session memory quota exceeded")) << over.message();
  EXPECT_TRUE(contains(over.message(), "exported tensors not yet moved 3.0MiB")) << over.message();
  // Another session's quota is its own.
  Device b = Device::remote(server.url());
  EXPECT_EQ(tw::full({3 * kMiBFloats}, 2.0, tw::kF32, b).sum().item<float>(), 6.0f * kMiBFloats);
  // Expired, the capability gives them back.
  std::this_thread::sleep_for(std::chrono::milliseconds(2200));
  Status fits = try_two_mib(3);
  EXPECT_TRUE(fits.ok()) << fits.message();
}

TEST(Limits, PoolCacheNeverFailsAnOp) {
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

// ------------------------------------------------------------------------------------ fairness

// With one worker thread, a session's long batch yields between ops: another session's sync
// is answered while the batch is still running, before the batch's own final sync. Order, not
// time: without the yield the light sync waits for the whole batch.
TEST(Limits, LightSessionIsServedWhileAHeavyBatchRuns) {
  ServerProcess server({"--workers", "1"});
  auto heavy = raw_session(server.url(), 60000);
  auto light = raw_session(server.url(), 60000);
  ASSERT_TRUE(heavy && light);

  constexpr int64_t kN =
      512;  // about a millisecond a matmul here: the batch takes a second or more
  constexpr int kMatmuls = 1000;
  proto::BatchWriter b;
  b.add_op(full_op(1, {kN, kN}, kF32, 1.0));
  b.add_op(full_op(2, {kN, kN}, kF32, 0.5));
  b.add_sync(1);  // answered once the batch has begun
  for (int i = 0; i < kMatmuls; ++i) {
    ir::MatMul m;
    m.a = {1};
    m.b = {2};
    m.out = {static_cast<ir::TensorId>(10 + i)};
    b.add_op(m);
    b.add_drop({static_cast<ir::TensorId>(10 + i)});
  }
  b.add_sync(2);
  ASSERT_TRUE(heavy->send_frame(b.take()));
  auto started = heavy->read_message();
  ASSERT_TRUE(started.ok()) << started.status().message();
  ASSERT_EQ(started->request_id(), 1u);

  // The heavy session's last reply, timed on its own thread.
  auto heavy_done = std::async(std::launch::async, [&] {
    auto m = heavy->read_message();
    EXPECT_TRUE(m.ok()) << m.status().message();
    if (m.ok()) {
      EXPECT_EQ(m->request_id(), 2u);
    }
    return Clock::now();
  });
  proto::BatchWriter s;
  s.add_sync(3);
  ASSERT_TRUE(light->send_frame(s.take()));
  auto m = light->read_message();
  Clock::time_point light_done = Clock::now();
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->request_id(), 3u);
  EXPECT_LT(light_done, heavy_done.get())
      << "the light session's sync waited for the heavy session's whole batch";
}

// ------------------------------------------------------------------------ poisoned huge reads

TEST(Limits, ReadOfAPoisonedHugeTensorReportsThePoisoningError) {
  ServerProcess server;
  Device d = Device::remote(server.url());
  Tensor labels = arange(0, 8, 1, std::nullopt, d);  // i64[8]
  Tensor huge = one_hot(labels, int64_t{1} << 40);   // i64[8, 2^40]: 64 TiB, refused
  try {
    (void)huge.to_vector<int64_t>();
    ADD_FAILURE() << "the read of a refused op succeeded";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "one_hot")) << e.what();
    EXPECT_TRUE(contains(e.what(), "session memory quota exceeded")) << e.what();
    EXPECT_FALSE(contains(e.what(), "more than one frame")) << e.what();
  }
  expect_healthy(d, 5);
}

}  // namespace
}  // namespace tw
