// server::Session's segment table (protocol 5, docs/protocol.md §8.11) with no socket: segments
// made in process (the same memfd the session maps a second time), attached as server.cc
// attaches them; their bytes count in the server's budget and in an allowance the size of the
// session quota, but not in the quota its tensors use; replacing an id gives its bytes back, and
// the table is bounded.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>

#include "net/shm.h"
#include "protocol/messages.h"
#include "server/session.h"
#include "support/frames.h"
#include "support/session_replies.h"

namespace tw::server {
namespace {

namespace proto = protocol;

using testing::Replies;

// The session's side of a segment the "client" made: a second mapping of its memfd.
std::shared_ptr<net::SharedSegment> peer_of(const net::SharedSegment& s) {
  auto a = net::SharedSegment::adopt(::dup(s.fd()), s.capacity());
  EXPECT_TRUE(a.ok()) << a.status().message();
  return a.ok() ? *a : nullptr;
}

// Attaches `seg` as `id` the way a received AttachSegment is run: the SyncResult's status.
Status attach(Session& s, uint64_t id, const net::SharedSegment& seg) {
  Batch b;
  b.attach = Batch::Attach{{id, id, seg.capacity()}, peer_of(seg), Status::OK()};
  Replies r;
  EXPECT_TRUE(s.run(b, r, Session::Clock::time_point::max()));
  EXPECT_EQ(r.got.size(), 1u);
  return r.got.empty() ? internal_error("no reply") : r.got[0].status();
}

TEST(SessionShm, SegmentsCountInTheServerBudgetAndTheirOwnAllowance) {
  SessionTotals totals;
  auto opened = Session::open(1, "cpu", 1 << 20, totals);  // a 1 MiB quota
  ASSERT_TRUE(opened.ok());
  Session& s = **opened;
  auto big = net::SharedSegment::create(2 << 20), small = net::SharedSegment::create(600 << 10);
  ASSERT_TRUE(big.ok() && small.ok());
  Status over = attach(s, 1, **big);
  EXPECT_EQ(over.code(), StatusCode::kResourceExhausted) << over.message();
  EXPECT_NE(over.message().find("allowance of 1.0MiB"), std::string::npos) << over.message();
  ASSERT_TRUE(attach(s, 1, **small).ok());
  EXPECT_EQ(s.segment_bytes(), 600u << 10);
  EXPECT_EQ(totals.memory.used(), 600u << 10) << "the server's budget counts the segment";
  // An upload of 600 KiB beside the 600 KiB segment fits the 1 MiB quota: the quota counts
  // tensors only, as it does on the socket path.
  std::memset((*small)->data(), 3, 600 << 10);
  std::vector<proto::Task> tasks = {
      proto::FromSegmentTask{5, {{600 << 10}, kU8}, {1, 0, 600 << 10, 1}},
      proto::ReadTask{9, 5},
  };
  Replies r;
  s.run(tasks, Status::OK(), r);
  ASSERT_EQ(r.got.size(), 1u);
  ASSERT_TRUE(r.got[0].status().ok()) << r.got[0].status().message();
  ASSERT_EQ(r.got[0].read.result.value().bytes.size(), 600u << 10);
  EXPECT_EQ(r.got[0].read.result.value().value<uint8_t>(1234), 3);
  EXPECT_EQ((*small)->consumed().load(), 1u) << "the server says it copied the upload out";
  // Replacing the id with a smaller segment gives the larger one's bytes back.
  const uint64_t before = totals.memory.used();
  auto tiny = net::SharedSegment::create(4096);
  ASSERT_TRUE(tiny.ok());
  ASSERT_TRUE(attach(s, 1, **tiny).ok());
  EXPECT_EQ(s.segment_bytes(), 4096u);
  EXPECT_EQ(s.segment_count(), 1u);
  EXPECT_EQ(totals.memory.used(), before - (600u << 10) + 4096);
}

TEST(SessionShm, TheTableIsBounded) {
  SessionTotals totals;
  auto opened = Session::open(1, "cpu", uint64_t{1} << 30, totals);
  ASSERT_TRUE(opened.ok());
  auto seg = net::SharedSegment::create(4096);
  ASSERT_TRUE(seg.ok());
  for (uint64_t id = 0; id < Session::kMaxSegments; ++id) {
    ASSERT_TRUE(attach(**opened, id, **seg).ok()) << id;
  }
  Status more = attach(**opened, 99, **seg);
  EXPECT_EQ(more.code(), StatusCode::kResourceExhausted) << more.message();
  EXPECT_TRUE(attach(**opened, 3, **seg).ok()) << "replacing an attached id is not one more";
}

}  // namespace
}  // namespace tw::server
