// server::Session driven directly, with no socket: batches encoded as a client would, decoded
// as the server does, and the replies the session hands its output decoded as a client would.
#include "server/session.h"

#include <gtest/gtest.h>

#include <cstring>

#include "protocol/messages.h"
#include "support/frames.h"

namespace tw::server {
namespace {

namespace proto = protocol;

Buffer payload_of(const proto::OutFrame& f) {
  std::vector<uint8_t> bytes = testing::flatten(f);
  return Buffer::copy_of(bytes.data(), bytes.size());
}

// Collects replies, decoded; reports fixed server figures to a stats task.
struct Replies : SessionOutput {
  std::vector<proto::ServerMessage> got;
  std::vector<uint64_t> stats_asked_by;
  void reply(proto::OutFrame f) override {
    auto m = proto::decode_server_message(payload_of(f));
    ASSERT_TRUE(m.ok()) << m.status().message();
    got.push_back(std::move(m).value());
  }
  proto::ServerStats server_stats(uint64_t asking) override {
    stats_asked_by.push_back(asking);
    proto::ServerStats s;
    s.sessions = 7;
    return s;
  }
};

// What the server does with a received batch frame.
struct Decoded {
  std::vector<proto::Task> tasks;
  Status status;
};
Decoded decode(const Buffer& payload) {
  Decoded d;
  d.status = proto::decode_batch(payload, d.tasks);
  return d;
}

ir::Full full(ir::TensorId out, int64_t n, double value) {
  ir::Full f;
  f.out = {out};
  f.shape = {n};
  f.dtype = kF32;
  f.value = ir::Scalar(value);
  return f;
}

std::vector<float> floats(const TensorData& d) {
  std::vector<float> v(d.bytes.size() / sizeof(float));
  std::memcpy(v.data(), d.bytes.data(), d.bytes.size());
  return v;
}

std::unique_ptr<Session> open_cpu(SessionTotals& totals, uint64_t quota = uint64_t{1} << 30) {
  auto s = Session::open(42, "cpu", quota, totals);
  EXPECT_TRUE(s.ok()) << s.status().message();
  return std::move(s).value();
}

TEST(Session, RunsTasksInOrderAndRepliesToReadsAndSyncs) {
  SessionTotals totals;
  auto session = open_cpu(totals);
  proto::BatchWriter b;
  b.add_op(full(1, 3, 1.5));
  ir::BinaryScalar mul;
  mul.kind = ir::BinaryKind::kMul;
  mul.a = {1};
  mul.s = ir::Scalar(int64_t{3});
  mul.out = {2};
  b.add_op(mul);
  b.add_read(7, 2);
  b.add_sync(8);
  b.add_read(9, 99);  // never made
  Decoded d = decode(payload_of(b.take()));
  ASSERT_TRUE(d.status.ok()) << d.status.message();
  Replies out;
  session->run(d.tasks, d.status, out);

  ASSERT_EQ(out.got.size(), 3u);
  EXPECT_EQ(out.got[0].kind, proto::ServerMsg::kReadResult);
  EXPECT_EQ(out.got[0].request_id, 7u);
  ASSERT_TRUE(out.got[0].status.ok()) << out.got[0].status.message();
  EXPECT_EQ(floats(out.got[0].data), (std::vector<float>{4.5f, 4.5f, 4.5f}));
  EXPECT_EQ(out.got[1].kind, proto::ServerMsg::kSyncResult);
  EXPECT_EQ(out.got[1].request_id, 8u);
  EXPECT_TRUE(out.got[1].status.ok());
  EXPECT_EQ(out.got[2].request_id, 9u);
  EXPECT_FALSE(out.got[2].status.ok());
  EXPECT_EQ(totals.ops_executed.load(), 2u);
  EXPECT_EQ(session->id(), 42u);
}

TEST(Session, TracksHeldBytesThroughDropsAndItsEnd) {
  SessionTotals totals;
  auto session = open_cpu(totals);
  proto::BatchWriter b;
  b.add_op(full(1, 1000, 0));
  b.add_op(full(2, 1000, 0));
  b.add_stats(3);
  Decoded d = decode(payload_of(b.take()));
  Replies out;
  session->run(d.tasks, d.status, out);
  EXPECT_GE(session->held(), 2 * 1000 * sizeof(float));
  EXPECT_EQ(totals.bytes_held.load(), static_cast<int64_t>(session->held()));
  ASSERT_EQ(out.got.size(), 1u);
  EXPECT_EQ(out.got[0].kind, proto::ServerMsg::kStatsResult);
  EXPECT_EQ(out.got[0].stats.sessions, 7u);  // the output's figures, asked for by this session
  EXPECT_EQ(out.stats_asked_by, std::vector<uint64_t>{42});

  b.add_drop({1});
  d = decode(payload_of(b.take()));
  uint64_t before = session->held();
  session->run(d.tasks, d.status, out);
  EXPECT_LT(session->held(), before);
  EXPECT_GT(session->held(), 0u);
  session.reset();
  EXPECT_EQ(totals.bytes_held.load(), 0);
}

TEST(Session, RefusesAnOpPastItsMemoryQuota) {
  SessionTotals totals;
  auto session = open_cpu(totals, 4096);
  proto::BatchWriter b;
  b.add_op(full(1, 10, 2));      // 40 bytes: fits
  b.add_op(full(2, 100000, 2));  // 400 KB: over the quota
  b.add_read(1, 1);
  b.add_read(2, 2);
  Decoded d = decode(payload_of(b.take()));
  Replies out;
  session->run(d.tasks, d.status, out);
  ASSERT_EQ(out.got.size(), 2u);
  EXPECT_TRUE(out.got[0].status.ok());
  EXPECT_EQ(out.got[1].status.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(out.got[1].status.message().find("session memory quota exceeded"), std::string::npos)
      << out.got[1].status.message();
  EXPECT_LE(session->held(), 4096u);
}

TEST(Session, ReportsAMalformedBatchAfterRunningTheTasksBeforeIt) {
  SessionTotals totals;
  auto session = open_cpu(totals);
  proto::BatchWriter b;
  b.add_op(full(1, 2, 5));
  b.add_read(4, 1);
  b.add_sync(5);
  std::vector<uint8_t> bytes = testing::flatten(b.take());
  bytes.resize(bytes.size() - 4);  // the sync task cut short
  Decoded d = decode(Buffer::copy_of(bytes.data(), bytes.size()));
  ASSERT_FALSE(d.status.ok());
  ASSERT_EQ(d.tasks.size(), 2u);
  Replies out;
  session->run(d.tasks, d.status, out);
  ASSERT_EQ(out.got.size(), 2u);
  EXPECT_EQ(out.got[0].request_id, 4u);
  EXPECT_EQ(floats(out.got[0].data), (std::vector<float>{5, 5}));
  EXPECT_EQ(out.got[1].kind, proto::ServerMsg::kSessionError);
  EXPECT_NE(out.got[1].status.message().find("malformed batch"), std::string::npos)
      << out.got[1].status.message();
}

TEST(Session, OpeningOnABackendThisBuildLacksFails) {
  SessionTotals totals;
  auto s = Session::open(1, "no-such-backend", 1024, totals);
  EXPECT_FALSE(s.ok());
}

}  // namespace
}  // namespace tw::server
