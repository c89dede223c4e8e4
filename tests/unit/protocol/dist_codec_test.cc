// The protocol 3 messages of collectives (docs/protocol.md §3, §4, §8.10): the Collective task,
// the peer's Store and the StoreResult round-trip; truncations and bad enum values are errors.
#include <gtest/gtest.h>

#include "protocol/messages.h"
#include "support/frames.h"

namespace tw::protocol {
namespace {

Buffer payload_of(const OutFrame& f) {
  std::vector<uint8_t> v = testing::flatten(f);
  return Buffer::copy_of(v.data(), v.size());
}

CollectiveSpec sample() {
  CollectiveSpec c;
  c.kind = CollectiveKind::kAllGather;
  c.reduce = ReduceKind::kMax;
  c.rank = 2;
  c.size = 3;
  c.root = 1;
  c.group = "g0123456789abcdef";
  c.store_url = "tls://10.0.0.1:5000";
  c.fingerprint = "AB:CD";
  c.timeout_ms = 2500;
  c.input = 17;
  c.output = 18;
  c.out_meta = {{6, 4}, kF64};
  return c;
}

TEST(DistCodec, CollectiveTaskRoundTrips) {
  BatchWriter b;
  b.add_collective(sample());
  std::vector<Task> t;
  ASSERT_TRUE(decode_batch(payload_of(b.take()), t).ok());
  ASSERT_EQ(t.size(), 1u);
  ASSERT_EQ(task_kind(t[0]), TaskKind::kCollective);
  const CollectiveSpec& c = std::get<CollectiveTask>(t[0]).collective;
  const CollectiveSpec want = sample();
  EXPECT_EQ(c.kind, want.kind);
  EXPECT_EQ(c.reduce, want.reduce);
  EXPECT_EQ(c.rank, 2u);
  EXPECT_EQ(c.size, 3u);
  EXPECT_EQ(c.root, 1u);
  EXPECT_EQ(c.group, want.group);
  EXPECT_EQ(c.store_url, want.store_url);
  EXPECT_EQ(c.fingerprint, want.fingerprint);
  EXPECT_EQ(c.timeout_ms, 2500u);
  EXPECT_EQ(c.input, 17u);
  EXPECT_EQ(c.output, 18u);
  EXPECT_EQ(c.out_meta, want.out_meta);
}

TEST(DistCodec, EveryTruncationAndBadEnumIsAnError) {
  BatchWriter b;
  b.add_collective(sample());
  std::vector<uint8_t> full = testing::flatten(b.take());
  for (size_t n = 0; n < full.size(); ++n) {
    std::vector<Task> t;
    EXPECT_FALSE(decode_batch(Buffer::copy_of(full.data(), n), t).ok()) << n << " bytes";
  }
  // Byte 5 is the task kind; 6 the collective, 7 the reduction.
  for (size_t at : {size_t{6}, size_t{7}}) {
    for (uint8_t bad : {uint8_t{0}, uint8_t{9}}) {
      std::vector<uint8_t> v = full;
      v[at] = bad;
      std::vector<Task> t;
      EXPECT_FALSE(decode_batch(Buffer::copy_of(v.data(), v.size()), t).ok());
    }
  }
}

TEST(DistCodec, StoreMessagesRoundTrip) {
  OutFrame f;
  encode_store_request({9, StoreOp::kSet, "g1/rank_0",
                        std::string("\x00\x01"
                                    "addr",
                                    6)},
                       f);
  Result<StoreRequest> r = decode_store_request(payload_of(f));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->request_id, 9u);
  EXPECT_EQ(r->op, StoreOp::kSet);
  EXPECT_EQ(r->key, "g1/rank_0");
  EXPECT_EQ(r->value, std::string("\x00\x01"
                                  "addr",
                                  6));
  EXPECT_EQ(*peek_client_msg(payload_of(f)), ClientMsg::kStore);

  OutFrame g;
  encode_store_reply({9, Status::OK(), true, "v"}, g);
  Result<StoreReply> rep = decode_store_reply(payload_of(g));
  ASSERT_TRUE(rep.ok());
  EXPECT_TRUE(rep->present);
  EXPECT_EQ(rep->value, "v");
  OutFrame e;
  encode_store_reply({3, resource_exhausted("full"), false, ""}, e);
  rep = decode_store_reply(payload_of(e));
  ASSERT_TRUE(rep.ok());
  EXPECT_EQ(rep->status.code(), StatusCode::kResourceExhausted);
  EXPECT_FALSE(rep->present);

  std::vector<uint8_t> v = testing::flatten(f);
  v[9] = 7;  // the op
  EXPECT_FALSE(decode_store_request(Buffer::copy_of(v.data(), v.size())).ok());
  for (size_t n = 0; n < v.size(); ++n) {
    EXPECT_FALSE(decode_store_request(Buffer::copy_of(v.data(), n)).ok()) << n;
  }
}

}  // namespace
}  // namespace tw::protocol
