// Resumable sessions on the wire (protocol 9, docs/protocol.md §8.13): the resuming Hello's token
// and count, the Welcome's session token, and the Ack, each round-tripped; a Hello or Welcome
// without them is exactly the older form.
#include <gtest/gtest.h>

#include "protocol/messages.h"
#include "support/frames.h"

namespace tw::protocol {
namespace {

Buffer payload_of(const OutFrame& f) { return testing::payload_buffer(f); }

TEST(ResumeCodec, ResumingHelloCarriesTokenAndAcked) {
  Hello h;
  h.device_index = kResumeSession;
  h.credential = "secret";
  h.resume = {std::string(64, 'a'), 12345};
  OutFrame f;
  encode_hello(h, f);
  auto got = decode_hello(payload_of(f));
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(got->device_index, kResumeSession);
  EXPECT_EQ(got->credential, "secret");
  EXPECT_EQ(got->resume.token, std::string(64, 'a'));
  EXPECT_EQ(got->resume.acked, 12345u);
}

TEST(ResumeCodec, PlainHelloHasNoResumePartAndRejectsTrailingBytes) {
  Hello h;
  h.device_index = 0;
  h.resume = {"ignored", 7};  // not sent: the device index is not kResumeSession
  OutFrame plain, base;
  encode_hello(h, plain);
  encode_hello(Hello{}, base);
  EXPECT_EQ(plain.head.size(), base.head.size());
  plain.head.push_back(0);
  EXPECT_FALSE(decode_hello(payload_of(plain)).ok());
}

TEST(ResumeCodec, WelcomeTokenRoundTripsAndIsOptional) {
  Welcome w;
  w.version = kDeviceDescriptionVersion - 1;  // from 16 on the token part is always sent
  w.session_id = 9;
  OutFrame without;
  encode_welcome(w, without);
  auto a = decode_server_message(payload_of(without));
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_TRUE(a->welcome.session.token.empty());
  w.session = {std::string(64, 'f'), 77};
  OutFrame with;
  encode_welcome(w, with);
  EXPECT_GT(with.head.size(), without.head.size());
  auto b = decode_server_message(payload_of(with));
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(b->welcome.session_id, 9u);
  EXPECT_EQ(b->welcome.session.token, std::string(64, 'f'));
  EXPECT_EQ(b->welcome.session.received, 77u);
}

// Found by the server-message fuzzer (tests/fuzz/regress/server_msg/welcome_empty_session_token):
// a session part with an empty token decoded, but a Welcome re-encodes without it, so the same
// bytes meant two things. A token is sent only when there is one: an empty one is refused.
TEST(ResumeCodec, WelcomeWithAnEmptySessionTokenIsRefused) {
  OutFrame f;
  Welcome older;
  older.version = kDeviceDescriptionVersion - 1;
  encode_welcome(older, f);
  WireWriter w(f.head);
  Welcome::SessionToken{"", 5}.fields(FieldWriter{w});
  auto got = decode_server_message(payload_of(f));
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("session token is empty"), std::string::npos)
      << got.status().message();
}

// Protocol 16: the Welcome ends with one DeviceDescription per device, after the session token,
// which is then always sent (empty when the session cannot be resumed).
TEST(ResumeCodec, WelcomeDescribesEachDeviceFromVersion16) {
  Welcome w;
  w.devices = {{"cpu:0", "cpu", 1u << 30, 0x1ff}, {"vulkan:0", "vulkan", 1u << 30, 0x0f}};
  w.descriptions = {{"AMD EPYC (2 threads)", 24ull << 30, 20ull << 30, true, {1, 2, 40}},
                    {"llvmpipe", 2ull << 30, 1ull << 30, false, {1, 3}}};
  OutFrame f;
  encode_welcome(w, f);
  auto got = decode_server_message(payload_of(f));
  ASSERT_TRUE(got.ok()) << got.status().message();
  ASSERT_EQ(got->welcome.descriptions.size(), 2u);
  EXPECT_TRUE(got->welcome.session.token.empty());
  EXPECT_EQ(got->welcome.descriptions[0].model, "AMD EPYC (2 threads)");
  EXPECT_EQ(got->welcome.descriptions[0].memory_free, 20ull << 30);
  EXPECT_EQ(got->welcome.descriptions[1].ops, (std::vector<uint16_t>{1, 3}));
  EXPECT_FALSE(got->welcome.descriptions[1].host_memory);
  // The same bytes again (the fuzzers' round trip).
  OutFrame again;
  encode_welcome(got->welcome, again);
  EXPECT_EQ(again.head, f.head);
  // A description count that does not match the device list is refused, naming both.
  w.descriptions.pop_back();
  OutFrame short_list;
  encode_welcome(w, short_list);
  auto bad = decode_server_message(payload_of(short_list));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("describes 1 devices but lists 2"), std::string::npos)
      << bad.status().message();
  // To a client of protocol 15 the server sends neither part: the older form.
  w.version = kDeviceDescriptionVersion - 1;
  OutFrame older;
  encode_welcome(w, older);
  auto old_got = decode_server_message(payload_of(older));
  ASSERT_TRUE(old_got.ok()) << old_got.status().message();
  EXPECT_TRUE(old_got->welcome.descriptions.empty());
  EXPECT_LT(older.head.size(), short_list.head.size());
}

TEST(ResumeCodec, AckRoundTrips) {
  OutFrame f;
  encode_ack({1u << 20, kAckResumable | kAckGoodbye}, f);
  const Buffer p = payload_of(f);
  auto kind = peek_client_msg(p);
  ASSERT_TRUE(kind.ok());
  EXPECT_EQ(*kind, ClientMsg::kAck);
  auto got = decode_ack(p);
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(got->acked, 1u << 20);
  EXPECT_EQ(got->flags, kAckResumable | kAckGoodbye);
  EXPECT_STREQ(refuse_reason_name(RefuseReason::kCannotResume), "cannot resume the session");
}

}  // namespace
}  // namespace tw::protocol
