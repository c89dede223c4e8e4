// The protocol 5 messages of the same-host shared-memory path (docs/protocol.md §3, §4, §8.11):
// the AttachSegment message, the upload-from-segment and read-into-segment tasks and the
// ReadResultInSegment reply round-trip, field by field in the documented order, and every
// truncated prefix is an error.
#include <gtest/gtest.h>

#include "protocol/messages.h"
#include "support/frames.h"

namespace tw::protocol {
namespace {

Buffer payload_of(const OutFrame& f) {
  std::vector<uint8_t> v = testing::flatten(f);
  return Buffer::copy_of(v.data(), v.size());
}

TEST(ShmCodec, SegmentTasksRoundTrip) {
  BatchWriter b;
  const TensorMeta meta{{3, 5}, kF64};
  b.add_from_segment(11, meta, {7, 64, 120, 9});
  b.add_read_to_segment(4, 11, {7, 128, 1 << 20, 0});
  std::vector<Task> t;
  ASSERT_TRUE(decode_batch(payload_of(b.take()), t).ok());
  ASSERT_EQ(t.size(), 2u);
  ASSERT_EQ(task_kind(t[0]), TaskKind::kFromSegment);
  EXPECT_EQ(std::get<FromSegmentTask>(t[0]).id, 11u);
  EXPECT_EQ(std::get<FromSegmentTask>(t[0]).meta, meta);
  EXPECT_EQ(std::get<FromSegmentTask>(t[0]).range.segment, 7u);
  EXPECT_EQ(std::get<FromSegmentTask>(t[0]).range.offset, 64u);
  EXPECT_EQ(std::get<FromSegmentTask>(t[0]).range.length, 120u);
  EXPECT_EQ(std::get<FromSegmentTask>(t[0]).range.sequence, 9u);
  ASSERT_EQ(task_kind(t[1]), TaskKind::kReadToSegment);
  EXPECT_EQ(std::get<ReadToSegmentTask>(t[1]).request_id, 4u);
  EXPECT_EQ(std::get<ReadToSegmentTask>(t[1]).id, 11u);
  EXPECT_EQ(std::get<ReadToSegmentTask>(t[1]).range.segment, 7u);
  EXPECT_EQ(std::get<ReadToSegmentTask>(t[1]).range.offset, 128u);
  EXPECT_EQ(std::get<ReadToSegmentTask>(t[1]).range.length, uint64_t{1} << 20);
}

// The wire layout, byte for byte as docs/protocol.md §4 lists the fields (kind 12: id, dtype,
// shape, segment, offset, length, sequence; kind 15: request id, id, segment, offset, length).
TEST(ShmCodec, TaskBytesFollowTheDocumentedOrder) {
  BatchWriter b;
  b.add_from_segment(2, TensorMeta{{4}, kU8}, {1, 0, 4, 3});
  std::vector<uint8_t> v = testing::flatten(b.take());
  // clang-format off
  const std::vector<uint8_t> want = {
      2,    1, 0, 0, 0,                               // Batch, 1 task
      12,                                             // FromSegment
      2,    0, 0, 0, 0, 0, 0, 0,                      // tensor 2
      4,                                              // u8
      1,    0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0,          // shape [4]
      1,    0, 0, 0, 0, 0, 0, 0,                      // segment 1
      0,    0, 0, 0, 0, 0, 0, 0,                      // offset 0
      4,    0, 0, 0, 0, 0, 0, 0,                      // length 4
      3,    0, 0, 0, 0, 0, 0, 0};                     // sequence 3
  // clang-format on
  EXPECT_EQ(v, want);
  BatchWriter r;
  r.add_read_to_segment(5, 2, {1, 8, 16, 0});
  std::vector<uint8_t> w = testing::flatten(r.take());
  ASSERT_EQ(w.size(), 5u + 1 + 5 * 8);
  EXPECT_EQ(w[5], 15);
  EXPECT_EQ(w[6], 5);    // request id
  EXPECT_EQ(w[14], 2);   // tensor
  EXPECT_EQ(w[22], 1);   // segment
  EXPECT_EQ(w[30], 8);   // offset
  EXPECT_EQ(w[38], 16);  // length
}

TEST(ShmCodec, AttachAndReadResultInSegmentRoundTrip) {
  OutFrame attach, res;
  encode_attach_segment({6, 2, uint64_t{1} << 28}, attach);
  encode_read_result_in_segment(6, TensorMeta{{2, 3}, kI32}, res);
  Buffer ab = payload_of(attach);
  ASSERT_EQ(ab.size(), 1u + 3 * 8);
  EXPECT_EQ(*peek_client_msg(ab), ClientMsg::kAttachSegment);
  auto a = decode_attach_segment(ab);
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->request_id, 6u);
  EXPECT_EQ(a->segment, 2u);
  EXPECT_EQ(a->capacity, uint64_t{1} << 28);
  auto m = decode_server_message(payload_of(res));
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->kind, ServerMsg::kReadResultInSegment);
  EXPECT_EQ(m->request_id(), 6u);
  EXPECT_EQ(m->in_segment.tensor.meta, (TensorMeta{{2, 3}, kI32}));
  EXPECT_EQ(m->in_segment.tensor.bytes(), 24u) << "2 x 3 i32 elements";
  EXPECT_EQ(res.payload_size(), 1 + 8 + (1 + 4 + 2 * 8) + 8)
      << "the bytes are in the segment, not the frame";
  EXPECT_FALSE(decode_attach_segment(payload_of(res)).ok()) << "not an AttachSegment";
}

TEST(ShmCodec, ByteCountDisagreeingWithTheShapeIsMalformed) {
  OutFrame res;
  encode_read_result_in_segment(1, TensorMeta{{4}, kF32}, res);
  std::vector<uint8_t> v = testing::flatten(res);
  v.back() = 0xff;  // nbytes' top byte: no longer 16
  EXPECT_FALSE(decode_server_message(Buffer::copy_of(v.data(), v.size())).ok());
  OutFrame attach;
  encode_attach_segment({1, 1, 4096}, attach);
  std::vector<uint8_t> t = testing::flatten(attach);
  t.push_back(0);
  EXPECT_FALSE(decode_attach_segment(Buffer::copy_of(t.data(), t.size())).ok()) << "trailing bytes";
}

TEST(ShmCodec, EveryTruncatedPrefixIsAnError) {
  OutFrame attach, res;
  encode_attach_segment({6, 2, 4096}, attach);
  encode_read_result_in_segment(6, TensorMeta{{2, 3}, kI32}, res);
  BatchWriter b;
  b.add_from_segment(11, TensorMeta{{2}, kF32}, {1, 0, 8, 1});
  b.add_read_to_segment(3, 11, {1, 0, 8, 0});
  OutFrame batch = b.take();
  for (const OutFrame* f : {&attach, &res, &batch}) {
    std::vector<uint8_t> v = testing::flatten(*f);
    for (size_t n = 0; n < v.size(); ++n) {
      Buffer p = Buffer::copy_of(v.data(), n);
      std::vector<Task> t;
      EXPECT_FALSE(decode_server_message(p).ok() && f == &res) << n;
      EXPECT_FALSE(decode_attach_segment(p).ok()) << n;
      EXPECT_FALSE(decode_batch(p, t).ok()) << n;
    }
  }
}

}  // namespace
}  // namespace tw::protocol
