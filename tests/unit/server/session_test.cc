// server::Session driven directly, with no socket: batches encoded as a client would, decoded
// as the server does, and the replies the session hands its output decoded as a client would.
#include "server/session.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "protocol/messages.h"
#include "support/frames.h"
#include "support/helpers.h"
#include "support/session_replies.h"

namespace tw::server {
namespace {

namespace proto = protocol;
using testing::full_op;

Buffer payload_of(const proto::OutFrame& f) {
  std::vector<uint8_t> bytes = testing::flatten(f);
  return Buffer::copy_of(bytes.data(), bytes.size());
}

// Collects replies, decoded; reports fixed server figures to a stats task.
struct Replies : testing::Replies {
  Replies() { stats.sessions = 7; }
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
  b.add_op(full_op(1, {3}, kF32, 1.5));
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
  EXPECT_EQ(out.got[0].request_id(), 7u);
  ASSERT_TRUE(out.got[0].status().ok()) << out.got[0].status().message();
  EXPECT_EQ(floats(out.got[0].read.result.value()), (std::vector<float>{4.5f, 4.5f, 4.5f}));
  EXPECT_EQ(out.got[1].kind, proto::ServerMsg::kSyncResult);
  EXPECT_EQ(out.got[1].request_id(), 8u);
  EXPECT_TRUE(out.got[1].status().ok());
  EXPECT_EQ(out.got[2].request_id(), 9u);
  EXPECT_FALSE(out.got[2].status().ok());
  EXPECT_EQ(totals.ops_executed.load(), 2u);
  EXPECT_EQ(session->id(), 42u);
}

TEST(Session, TracksHeldBytesThroughDropsAndItsEnd) {
  SessionTotals totals;
  auto session = open_cpu(totals);
  proto::BatchWriter b;
  b.add_op(full_op(1, {1000}, kF32, 0.0));
  b.add_op(full_op(2, {1000}, kF32, 0.0));
  b.add_stats(3);
  Decoded d = decode(payload_of(b.take()));
  Replies out;
  session->run(d.tasks, d.status, out);
  EXPECT_GE(session->held(), 2 * 1000 * sizeof(float));
  EXPECT_EQ(totals.bytes_held.load(), static_cast<int64_t>(session->held()));
  ASSERT_EQ(out.got.size(), 1u);
  EXPECT_EQ(out.got[0].kind, proto::ServerMsg::kStatsResult);
  EXPECT_EQ(out.got[0].stats.stats.sessions,
            7u);  // the output's figures, asked for by this session
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
  b.add_op(full_op(1, {10}, kF32, 2.0));      // 40 bytes: fits
  b.add_op(full_op(2, {100000}, kF32, 2.0));  // 400 KB: over the quota
  b.add_read(1, 1);
  b.add_read(2, 2);
  Decoded d = decode(payload_of(b.take()));
  Replies out;
  session->run(d.tasks, d.status, out);
  ASSERT_EQ(out.got.size(), 2u);
  EXPECT_TRUE(out.got[0].status().ok());
  EXPECT_EQ(out.got[1].status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(out.got[1].status().message().find("session memory quota exceeded"), std::string::npos)
      << out.got[1].status().message();
  EXPECT_LE(session->held(), 4096u);
}

TEST(Session, ReportsAMalformedBatchAfterRunningTheTasksBeforeIt) {
  SessionTotals totals;
  auto session = open_cpu(totals);
  proto::BatchWriter b;
  b.add_op(full_op(1, {2}, kF32, 5.0));
  b.add_read(4, 1);
  b.add_sync(5);
  std::vector<uint8_t> bytes = testing::flatten(b.take());
  bytes.erase(
      bytes.end() - 4,
      bytes.end());  // the sync task cut short (GCC 12 -O1 sees resize(size - 4) as a 2^64 memset)
  Decoded d = decode(Buffer::copy_of(bytes.data(), bytes.size()));
  ASSERT_FALSE(d.status.ok());
  ASSERT_EQ(d.tasks.size(), 2u);
  Replies out;
  session->run(d.tasks, d.status, out);
  ASSERT_EQ(out.got.size(), 2u);
  EXPECT_EQ(out.got[0].request_id(), 4u);
  EXPECT_EQ(floats(out.got[0].read.result.value()), (std::vector<float>{5, 5}));
  EXPECT_EQ(out.got[1].kind, proto::ServerMsg::kSessionError);
  EXPECT_NE(out.got[1].status().message().find("malformed batch"), std::string::npos)
      << out.got[1].status().message();
}

// A received batch as the server queues it: undecoded, for run() to decode a window at a time.
Batch queued(const Buffer& frame) {
  Batch b;
  b.decoder = proto::BatchDecoder(frame);
  if (!b.decoder.more()) b.decoded = b.decoder.status();
  b.frame = frame;
  return b;
}

// A batch run in slices: with its time used up, each call runs one task and stops, the next
// call resumes where it stopped; the replies are those of the whole batch run at once, in the
// same order, bit for bit. `mults` sets the batch's length: past Batch::kWindow tasks, run()
// decodes it in several windows as it goes.
void run_in_slices(int mults) {
  auto frame_of = [mults] {
    proto::BatchWriter b;
    b.add_op(full_op(1, {4}, kF32, 1.25));
    for (int i = 0; i < mults; ++i) {
      ir::BinaryScalar mul;
      mul.kind = ir::BinaryKind::kMul;
      mul.a = {static_cast<ir::TensorId>(1 + i)};
      mul.s = ir::Scalar(1.5);
      mul.out = {static_cast<ir::TensorId>(2 + i)};
      b.add_op(mul);
      b.add_read(10000 + i, 2 + i);
    }
    b.add_sync(20);
    std::vector<uint8_t> bytes = testing::flatten(b.take());
    bytes.push_back(0xEE);  // an unknown task kind: the batch is malformed after its tasks
    return Buffer::copy_of(bytes.data(), bytes.size());
  };
  SessionTotals totals;
  Decoded whole = decode(frame_of());
  ASSERT_FALSE(whole.status.ok());
  const size_t n = whole.tasks.size();
  ASSERT_EQ(n, static_cast<size_t>(2 * mults + 2));
  Replies at_once;
  open_cpu(totals)->run(whole.tasks, whole.status, at_once);
  ASSERT_EQ(at_once.got.size(), static_cast<size_t>(mults + 2));  // reads, the sync, the error

  auto session = open_cpu(totals);
  Batch batch = queued(frame_of());
  Replies sliced;
  const Session::Clock::time_point spent = Session::Clock::now();  // already past
  int calls = 0;
  while (!session->run(batch, sliced, spent)) {
    ++calls;
    ASSERT_EQ(sliced.got.size(), static_cast<size_t>((calls - 1) / 2)) << "one task a call";
    ASSERT_LT(calls, 4 * mults + 10);
  }
  EXPECT_EQ(calls + 1, static_cast<int>(n));  // the last call ran the last task and finished
  EXPECT_LE(batch.tasks.capacity(), Batch::kWindow) << "decoded a window at a time";
  ASSERT_EQ(sliced.got.size(), at_once.got.size());
  for (size_t i = 0; i < sliced.got.size(); ++i) {
    EXPECT_EQ(sliced.got[i].kind, at_once.got[i].kind) << i;
    EXPECT_EQ(sliced.got[i].request_id(), at_once.got[i].request_id()) << i;
    const Buffer& x = sliced.got[i].read.result.value().bytes;
    const Buffer& y = at_once.got[i].read.result.value().bytes;
    ASSERT_EQ(x.size(), y.size()) << i;
    // (a sync's reply carries no data, and memcmp may not be given its null pointer)
    if (x.size() > 0) {
      EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size()), 0) << i;
    }
  }
  EXPECT_EQ(sliced.got.back().kind, proto::ServerMsg::kSessionError);  // reported once, at the end
  EXPECT_EQ(sliced.got.back().status().message(), at_once.got.back().status().message());

  // With time left a call runs the whole batch: a short batch is never cut.
  Batch fresh = queued(frame_of());
  Replies one_call;
  auto other = open_cpu(totals);
  EXPECT_TRUE(other->run(fresh, one_call, Session::Clock::now() + std::chrono::hours(1)));
  EXPECT_EQ(one_call.got.size(), at_once.got.size());
}

TEST(Session, RunsALongBatchInSlicesInOrder) { run_in_slices(5); }

// A batch of several decoding windows: each slice resumes across the windows' seams, and what
// the session holds decoded stays one window.
TEST(Session, RunsABatchOfManyWindowsInSlicesInOrder) {
  run_in_slices(static_cast<int>(2 * Batch::kWindow + 7));
}

// Every session's tensors draw on one server-wide budget: past it an op fails naming the
// server's limit, while the session's own quota is far off; freeing tensors, or a session's
// end, gives the bytes back, and reserve()/release() count in the same budget.
TEST(Session, SharesTheServerWideMemoryBudget) {
  SessionTotals totals;
  totals.memory.set_limit(16384);
  auto a = open_cpu(totals);
  auto b = open_cpu(totals);
  auto run_one = [](Session& s, proto::BatchWriter& w) {
    Decoded d = decode(payload_of(w.take()));
    Replies out;
    s.run(d.tasks, d.status, out);
    return out;
  };
  // Sizes of the buffer pool's classes (core/buffer.h), so that storage is what was asked.
  proto::BatchWriter w;
  w.add_op(full_op(1, {2048}, kF32, 1.0));  // 8 KiB
  w.add_read(1, 1);
  EXPECT_TRUE(run_one(*a, w).got.at(0).status().ok());
  EXPECT_EQ(totals.memory.used(), 8192u);
  w.add_op(full_op(1, {3072}, kF32, 1.0));  // 12 KiB more: over the server's 16 KiB
  w.add_read(1, 1);
  Status refused = run_one(*b, w).got.at(0).status();
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.message().find("server memory limit"), std::string::npos) << refused.message();
  EXPECT_NE(refused.message().find("--max-memory"), std::string::npos) << refused.message();
  EXPECT_EQ(totals.memory.used(), 8192u) << "a refused op keeps nothing reserved";

  EXPECT_FALSE(b->reserve(10000, "graph registration").ok());
  ASSERT_TRUE(b->reserve(6000, "graph registration").ok());
  EXPECT_EQ(totals.memory.used(), 14192u);
  b->release(1000);
  EXPECT_EQ(totals.memory.used(), 13192u);

  w.add_drop({1});
  run_one(*a, w);
  EXPECT_EQ(totals.memory.used(), 5000u);
  w.add_op(full_op(2, {2048}, kF32, 1.0));
  w.add_read(2, 2);
  EXPECT_TRUE(run_one(*b, w).got.at(0).status().ok());
  EXPECT_EQ(totals.memory.used(), 13192u);
  b.reset();  // its tensors and what it still had reserved
  EXPECT_EQ(totals.memory.used(), 0u);
}

TEST(MemoryBudget, NeverPassesItsLimitUnderConcurrentReservations) {
  MemoryBudget budget(1000);
  std::vector<std::thread> threads;
  std::atomic<uint64_t> granted{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        if (budget.try_reserve(7)) {
          granted.fetch_add(7);
          EXPECT_LE(budget.used(), 1000u);
          budget.release(7);
          granted.fetch_sub(7);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(budget.used(), 0u);
  EXPECT_TRUE(budget.try_reserve(1000));
  EXPECT_FALSE(budget.try_reserve(1));
  EXPECT_FALSE(MemoryBudget(10).try_reserve(UINT64_MAX));
}

// A poisoned tensor too large for a frame reports why it was poisoned, not its size.
TEST(Session, ReadOfAPoisonedHugeTensorReportsItsPoisoningError) {
  SessionTotals totals;
  auto session = open_cpu(totals);
  proto::BatchWriter b;
  ir::Full labels;
  labels.out = {1};
  labels.shape = {8};
  labels.dtype = kI64;
  labels.value = ir::Scalar(int64_t{3});
  b.add_op(labels);
  ir::OneHot hot;
  hot.x = {1};
  hot.num_classes = int64_t{1} << 40;  // i64[8, 2^40]: 64 TiB, over the quota
  hot.out = {2};
  b.add_op(hot);
  b.add_read(7, 2);
  Decoded d = decode(payload_of(b.take()));
  Replies out;
  session->run(d.tasks, d.status, out);
  ASSERT_EQ(out.got.size(), 1u);
  const std::string m = out.got[0].status().message();
  EXPECT_NE(m.find("session memory quota exceeded"), std::string::npos) << m;
  EXPECT_EQ(m.find("more than one frame"), std::string::npos) << m;
}

TEST(Session, OpeningOnABackendThisBuildLacksFails) {
  SessionTotals totals;
  auto s = Session::open(1, "no-such-backend", 1024, totals);
  EXPECT_FALSE(s.ok());
}

}  // namespace
}  // namespace tw::server
