// The same-host shared-memory path (protocol 5, docs/protocol.md §8.11) against a real server
// process on a Unix socket: tensors cross bit for bit both ways below and above the threshold,
// a large transfer leaves the socket almost empty (the client's wire counters), TW_SHM=0 sends
// the bytes through the socket, a read result the program holds keeps its bytes, and a bad
// segment (a pipe, an unsealed memfd, no descriptor, a range outside it, an unknown id) fails
// that session's request only while the server goes on serving everyone.
#include "net/shm.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "client/connection.h"
#include "raw_client.h"
#include "support/server_process.h"
#include "tensorwire/remote.h"
#include "tensorwire/tensor.h"

namespace tw {
namespace {

using testing::RawClient;
using testing::ServerProcess;
namespace proto = protocol;

constexpr size_t kMin = client::Connection::kShmMinBytes;

// A server listening on a Unix socket of this test's own (its tcp:// address is urls()[0]).
struct UnixServer {
  explicit UnixServer(const std::string& tag, std::vector<std::string> extra = {})
      : path("/tmp/tw-shm-" + tag + "-" + std::to_string(getpid()) + ".sock"),
        server(with_listen(path, std::move(extra))) {}
  static std::vector<std::string> with_listen(const std::string& path, std::vector<std::string> a) {
    a.insert(a.begin(), {"--listen", "unix://" + path});
    return a;
  }
  std::string url() const { return "unix://" + path; }
  std::string path;
  ServerProcess server;
};

// Bytes that differ at every position (xorshift), so a misplaced or stale byte shows.
std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (auto& b : v) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    b = static_cast<uint8_t>(x);
  }
  return v;
}

Tensor upload(const std::vector<uint8_t>& host, const Device& d) {
  return from_bytes(host, {static_cast<int64_t>(host.size())}, kU8, d);
}

TEST(Shm, BytesIdenticalBothWaysBelowAndAboveTheThresholdAndOddSizes) {
  UnixServer s("bytes");
  Device d = Device::remote(s.url());
  for (size_t n : {size_t{1000}, kMin - 1, kMin, kMin + 3, 5 * kMin + 7, 64 * kMin + 1}) {
    std::vector<uint8_t> host = pattern(n, static_cast<uint32_t>(n));
    Tensor t = upload(host, d);
    EXPECT_EQ(t.to_bytes(), host) << n << " bytes";
    // What the server computes from it is what it computes from the socket's bytes: the sum
    // checked against the host's.
    const int64_t want = std::accumulate(host.begin(), host.end(), int64_t{0});
    EXPECT_EQ(t.to(kI64).sum().item<int64_t>(), want) << n << " bytes";
  }
  // f32 of an odd shape, computed on: the result read back through a segment as well.
  const int64_t rows = 3, cols = 333'337;  // 4 MB
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 1013) * 0.25f - 7.0f;
  Tensor x = from_vector<float>(v, {rows, cols}, d);
  std::vector<float> doubled = (x * 2.0).to_vector<float>();
  ASSERT_EQ(doubled.size(), v.size());
  for (size_t i = 0; i < v.size(); i += 997) EXPECT_EQ(doubled[i], v[i] * 2.0f) << i;
  EXPECT_EQ(doubled.back(), v.back() * 2.0f);
}

TEST(Shm, LargeTransfersLeaveTheSocketAlmostEmpty) {
  UnixServer s("wire");
  Device d = Device::remote(s.url());
  const size_t n = 16 * kMin + 5;
  std::vector<uint8_t> host = pattern(n, 7);
  WireCounters before = wire_counters(d);
  Tensor t = upload(host, d);
  d.sync();
  WireCounters mid = wire_counters(d);
  EXPECT_LT(mid.bytes_out - before.bytes_out, 4096u)
      << "an upload of " << n << " bytes sent its bytes through the socket";
  std::vector<uint8_t> back = t.to_bytes();
  WireCounters after = wire_counters(d);
  EXPECT_LT(after.bytes_in - mid.bytes_in, 4096u)
      << "a download of " << n << " bytes came through the socket";
  EXPECT_EQ(back, host);
  // Again, reusing the pool's segments (no new attach: frames out stay a handful).
  Tensor u = upload(pattern(n, 8), d);
  EXPECT_EQ(u.to_bytes(), pattern(n, 8));
  WireCounters again = wire_counters(d);
  EXPECT_LT(again.bytes_out - after.bytes_out, 4096u);
  EXPECT_LT(again.bytes_in - after.bytes_in, 4096u);
}

TEST(Shm, TwShm0SendsTheBytesThroughTheSocket) {
  UnixServer s("off");
  ::setenv("TW_SHM", "0", 1);
  Device d = Device::remote(s.url());
  ::unsetenv("TW_SHM");
  const size_t n = 4 * kMin + 1;
  std::vector<uint8_t> host = pattern(n, 3);
  WireCounters before = wire_counters(d);
  Tensor t = upload(host, d);
  std::vector<uint8_t> back = t.to_bytes();
  WireCounters after = wire_counters(d);
  EXPECT_GE(after.bytes_out - before.bytes_out, n);
  EXPECT_GE(after.bytes_in - before.bytes_in, n);
  EXPECT_EQ(back, host);
}

TEST(Shm, AReadResultTheProgramHoldsKeepsItsBytes) {
  UnixServer s("held");
  Device d = Device::remote(s.url());
  const size_t n = 2 * kMin;
  std::vector<uint8_t> a = pattern(n, 1), b = pattern(n, 2);
  Tensor ta = upload(a, d), tb = upload(b, d);
  detail::HostValues va = ta.host_values();
  // More reads and uploads than the pool has segments, while `va` holds one of them.
  for (int i = 0; i < 2 * static_cast<int>(client::Connection::kMaxSegments); ++i) {
    detail::HostValues vb = tb.host_values();
    ASSERT_EQ(0, std::memcmp(vb.data, b.data(), n)) << i;
    Tensor tc = upload(pattern(n, 10 + i), d);
    EXPECT_EQ(tc.to_bytes(), pattern(n, 10 + i)) << i;
  }
  EXPECT_EQ(0, std::memcmp(va.data, a.data(), n)) << "a held result was overwritten";
}

// Segments do not count in the session quota its tensors use (a tensor that fits it uploads as
// on the socket path), but in an allowance the size of the quota: a segment over it is refused
// and the client sends that transfer through the socket instead, byte for byte the same, and a
// later transfer that fits takes a segment again.
TEST(Shm, ASegmentOverItsAllowanceFallsBackToTheSocket) {
  UnixServer s("quota", {"--session-memory", std::to_string(12 << 20)});  // 12 MiB
  Device d = Device::remote(s.url());
  {
    // 5 MiB: its segment (8 MiB) and the tensor are more than 12 MiB together, and both fit.
    std::vector<uint8_t> host = pattern(5 * kMin, 10);
    WireCounters before = wire_counters(d);
    Tensor t = upload(host, d);
    EXPECT_EQ(t.to_bytes(), host);
    EXPECT_LT(wire_counters(d).bytes_out - before.bytes_out, 4096u);
  }
  const size_t n = 9 * kMin;  // 9 MiB fits the quota, its 16 MiB segment does not
  std::vector<uint8_t> host = pattern(n, 11);
  WireCounters before = wire_counters(d);
  Tensor t = upload(host, d);
  EXPECT_EQ(t.to_bytes(), host);
  WireCounters after = wire_counters(d);
  EXPECT_GE(after.bytes_out - before.bytes_out, n) << "the upload went through the socket";
  t = Tensor();
  d.sync();
  // 1 MiB + 1: a 2 MiB segment and the tensor fit in the quota.
  std::vector<uint8_t> small = pattern(kMin + 1, 12);
  Tensor u = upload(small, d);
  d.sync();
  WireCounters last = wire_counters(d);
  EXPECT_LT(last.bytes_out - after.bytes_out, 4096u) << "a transfer that fits uses a segment";
  EXPECT_EQ(u.to_bytes(), small);
}

// A raw session on protocol 5 whose requests are hand-made.
class RawSession {
 public:
  explicit RawSession(const std::string& url) : c_(url) {
    proto::Hello h;
    auto w = c_.hello(h);
    if (!w.ok() || w->kind != proto::ServerMsg::kWelcome || w->welcome.version < 5) {
      throw std::runtime_error("no protocol 5 welcome");
    }
  }
  // Attaches `fd` (or none, -1) as segment `id` of `capacity`: the SyncResult's status.
  Status attach(uint64_t id, uint64_t capacity, int fd) {
    proto::OutFrame f;
    proto::encode_attach_segment({++req_, id, capacity}, f);
    bool sent = fd >= 0 ? c_.send_frame_with_fd(f, fd) : c_.send_frame(f);
    if (!sent) return unavailable("send failed");
    return reply(proto::ServerMsg::kSyncResult).status();
  }
  // Sends the batch and returns the reply to its last request.
  proto::ServerMessage run(proto::BatchWriter& b, proto::ServerMsg kind) {
    if (!c_.send_frame(b.take())) return {};
    return reply(kind);
  }
  uint64_t next_request() { return ++req_; }
  proto::ServerMessage reply(proto::ServerMsg kind) {
    auto m = c_.read_message();
    if (!m.ok()) {
      ADD_FAILURE() << m.status().message();
      return {};
    }
    EXPECT_EQ(static_cast<int>(m->kind), static_cast<int>(kind));
    return *m;
  }

 private:
  RawClient c_;
  uint64_t req_ = 0;
};

void expect_refused(const Status& st, const std::string& says) {
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find(says), std::string::npos) << st.message();
}

TEST(Shm, ABadSegmentFailsThatSessionOnlyAndTheServerServesOthers) {
  UnixServer s("bad");
  Device good = Device::remote(s.url());
  Tensor g = upload(pattern(3 * kMin, 5), good);
  RawSession raw(s.url());

  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  expect_refused(raw.attach(1, 4096, p[0]), "not a memfd");
  ::close(p[0]);
  ::close(p[1]);
  expect_refused(raw.attach(1, 4096, -1), "no descriptor");
  int unsealed = ::memfd_create("unsealed", MFD_CLOEXEC);
  ASSERT_GE(unsealed, 0);
  ASSERT_EQ(::ftruncate(unsealed, 8192), 0);
  expect_refused(raw.attach(1, 4096, unsealed), "not sealed");
  ::close(unsealed);
  auto seg = net::SharedSegment::create(4096);
  ASSERT_TRUE(seg.ok());
  expect_refused(raw.attach(1, 1 << 20, (*seg)->fd()), "fewer than");
  ASSERT_TRUE(raw.attach(1, 4096, (*seg)->fd()).ok());

  // An upload outside the segment, one of the wrong length, one from an unknown segment: each
  // poisons its tensor, which a read reports.
  proto::BatchWriter b;
  b.add_from_segment(10, TensorMeta{{16}, kU8}, {1, 4090, 16, 1});
  b.add_from_segment(11, TensorMeta{{16}, kU8}, {1, 0, 15, 2});
  b.add_from_segment(12, TensorMeta{{16}, kU8}, {99, 0, 16, 3});
  b.add_from_segment(13, TensorMeta{{16}, kU8}, {1, UINT64_MAX, 16, 4});
  const uint64_t r10 = raw.next_request(), r11 = raw.next_request(), r12 = raw.next_request(),
                 r13 = raw.next_request();
  b.add_read(r10, 10);
  b.add_read(r11, 11);
  b.add_read(r12, 12);
  b.add_read(r13, 13);
  proto::ServerMessage m10 = raw.run(b, proto::ServerMsg::kReadResult);
  proto::ServerMessage m11 = raw.reply(proto::ServerMsg::kReadResult);
  proto::ServerMessage m12 = raw.reply(proto::ServerMsg::kReadResult);
  proto::ServerMessage m13 = raw.reply(proto::ServerMsg::kReadResult);
  EXPECT_EQ(m10.request_id(), r10);
  EXPECT_EQ(m13.request_id(), r13);
  EXPECT_NE(m10.status().message().find("outside segment 1"), std::string::npos)
      << m10.status().message();
  EXPECT_NE(m11.status().message().find("15 bytes for a tensor"), std::string::npos)
      << m11.status().message();
  EXPECT_EQ(m11.request_id(), r11);
  EXPECT_NE(m12.status().message().find("segment 99 is not attached"), std::string::npos)
      << m12.status().message();
  EXPECT_EQ(m12.request_id(), r12);
  EXPECT_NE(m13.status().message().find("outside segment 1"), std::string::npos)
      << m13.status().message();
  // Reading into an unknown segment or past its end: the read fails, nothing is written.
  std::memset((*seg)->data(), 0xAB, 4096);
  proto::BatchWriter w;
  w.add_op(ir::Full{ir::Out{20}, {8}, kF32, ir::Scalar(1.5)});
  w.add_read_to_segment(raw.next_request(), 20, {1, 4000, 200, 0});
  proto::ServerMessage past = raw.run(w, proto::ServerMsg::kReadResult);
  EXPECT_FALSE(past.status().ok());
  EXPECT_EQ((*seg)->data()[4000], std::byte{0xAB});
  // A good read into it lands there.
  proto::BatchWriter ok;
  ok.add_read_to_segment(raw.next_request(), 20, {1, 64, 32, 0});
  proto::ServerMessage in = raw.run(ok, proto::ServerMsg::kReadResultInSegment);
  EXPECT_EQ(in.in_segment.tensor.bytes(), 32u);
  float first = 0;
  std::memcpy(&first, (*seg)->data() + 64, sizeof first);
  EXPECT_EQ(first, 1.5f);
  // The well-behaved session was never disturbed.
  EXPECT_EQ(g.to_bytes(), pattern(3 * kMin, 5));
  EXPECT_EQ(ones({5}, kF32, good).sum().item<float>(), 5.0f);
}

TEST(Shm, AnUploadWhoseSegmentIsWrittenAfterwardsKeepsWhatWasCopied) {
  // The server copies an upload out of the segment before using it: writing the segment after
  // the upload ran changes nothing the server holds.
  UnixServer s("copy");
  RawSession raw(s.url());
  auto seg = net::SharedSegment::create(4096);
  ASSERT_TRUE(seg.ok());
  ASSERT_TRUE(raw.attach(3, 4096, (*seg)->fd()).ok());
  std::vector<uint8_t> v = pattern(256, 9);
  std::memcpy((*seg)->data(), v.data(), v.size());
  proto::BatchWriter b;
  b.add_from_segment(5, TensorMeta{{256}, kU8}, {3, 0, 256, 1});
  b.add_sync(raw.next_request());
  (void)raw.run(b, proto::ServerMsg::kSyncResult);
  EXPECT_EQ((*seg)->consumed().load(), 1u) << "the server says it has copied the upload out";
  std::memset((*seg)->data(), 0, 256);
  proto::BatchWriter r;
  r.add_read(raw.next_request(), 5);
  proto::ServerMessage m = raw.run(r, proto::ServerMsg::kReadResult);
  ASSERT_TRUE(m.status().ok()) << m.status().message();
  ASSERT_EQ(m.read.result.value().bytes.size(), v.size());
  EXPECT_EQ(0, std::memcmp(m.read.result.value().bytes.data(), v.data(), v.size()));
}

}  // namespace
}  // namespace tw
