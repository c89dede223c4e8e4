// Every message declared once (TW_FIELDS, protocol/messages.h) round-trips with every field,
// nested ones included, set to something other than its default, so a field left out of a
// declaration, or read into the wrong place, fails here; its size (FieldSize) is what its encoder
// writes; a count larger than the bytes left fails before anything is allocated; and an error
// names the message and the field.
#include <gtest/gtest.h>

#include <algorithm>
#include <tuple>
#include <utility>

#include "protocol/messages.h"
#include "support/frames.h"

namespace tw::protocol {
namespace {

Buffer payload_of(const OutFrame& f) {
  std::vector<uint8_t> v = testing::flatten(f);
  return Buffer::copy_of(v.data(), v.size());
}

bool same(const Status& a, const Status& b) {
  return a.code() == b.code() && a.message() == b.message();
}
bool same(const TensorData& a, const TensorData& b);
bool same(const InSegment& a, const InSegment& b);
template <class T>
bool same(const Result<T>& a, const Result<T>& b);
template <class T>
bool same(const T& a, const T& b);
template <class T>
bool same(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!same(a[i], b[i])) return false;
  }
  return true;
}
template <class T>
bool same(const T& a, const T& b) {
  if constexpr (Declared<T>) {
    return std::apply(
        [&](const auto&... x) {
          return std::apply([&](const auto&... y) { return (same(x, y) && ...); }, b.tie());
        },
        a.tie());
  } else {
    return a == b;
  }
}

// Every field differs from a default-constructed message's, and so do the fields of every
// nested message; a list is non-empty and each of its items is set throughout.
template <class T>
void expect_every_field_set(const T& m, const std::string& where);
template <class T>
void expect_set(const T& v, const T& unset, const std::string& where) {
  EXPECT_FALSE(same(v, unset)) << where << " is left at its default";
  if constexpr (Declared<T>) expect_every_field_set(v, where);
}
template <class T>
void expect_set(const std::vector<T>& v, const std::vector<T>&, const std::string& where) {
  EXPECT_FALSE(v.empty()) << where << " is empty";
  for (size_t i = 0; i < v.size(); ++i)
    expect_set(v[i], T{}, where + "[" + std::to_string(i) + "]");
}
template <class T>
void expect_every_field_set(const T& m, const std::string& where) {
  const T unset{};
  auto names = std::vector<std::string>{};
  m.fields([&](const char* name, const auto&) { names.push_back(name); });
  std::apply(
      [&](const auto&... x) {
        std::apply(
            [&](const auto&... y) {
              size_t i = 0;
              (expect_set(x, y, where + "." + names[i++]), ...);
            },
            unset.tie());
      },
      m.tie());
}

template <class T>
uint64_t size_of(const T& m) {
  FieldSize size;
  m.fields(size);
  return size.bytes;
}

Hello full_hello() { return {3, 6, 7, "s3cret"}; }

Welcome full_welcome() {
  Welcome w;
  w.version = 5;
  w.session_id = 0x0102030405060708;
  w.server_id = "srv-1";
  w.device_index = 1;
  w.devices = {{"cpu:0", "cpu", 1 << 20, 0x3F}, {"cuda:0", "torch", uint64_t{8} << 30, 0x7}};
  w.limits = {64 << 20, 1 << 30, 12, 9};
  return w;
}

TEST(DeclaredMessages, EveryMessageRoundTripsWithEveryFieldSet) {
  {
    const Hello m = full_hello();
    expect_every_field_set(m, "Hello");
    OutFrame f;
    encode_hello(m, f);
    EXPECT_EQ(testing::flatten(f).size(), 1 + 4 + size_of(m));
    auto got = decode_hello(payload_of(f));
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_TRUE(same(*got, m));
  }
  {
    const Welcome m = full_welcome();
    expect_every_field_set(m, "Welcome");
    OutFrame f;
    encode_welcome(m, f);
    EXPECT_EQ(testing::flatten(f).size(), 1 + size_of(m));
    auto got = decode_server_message(payload_of(f));
    ASSERT_TRUE(got.ok()) << got.status().message();
    ASSERT_EQ(got->kind, ServerMsg::kWelcome);
    EXPECT_TRUE(same(got->welcome, m));
  }
  {
    const Refuse m{RefuseReason::kCannotHost, "no room"};
    expect_every_field_set(m, "Refuse");
    OutFrame f;
    encode_refuse(m, f);
    EXPECT_EQ(testing::flatten(f).size(), 1 + size_of(m));
    auto got = decode_server_message(payload_of(f));
    ASSERT_TRUE(got.ok()) << got.status().message();
    ASSERT_EQ(got->kind, ServerMsg::kRefuse);
    EXPECT_TRUE(same(got->refuse, m));
  }
  {
    const ServerStats m = testing::sample_stats();
    expect_every_field_set(m, "ServerStats");
    OutFrame f;
    encode_stats_result(42, m, kMemoryStatsVersion - 1, f);
    EXPECT_EQ(testing::flatten(f).size(), 1 + 8 + size_of(m));
    auto got = decode_server_message(payload_of(f));
    ASSERT_TRUE(got.ok()) << got.status().message();
    ASSERT_EQ(got->kind, ServerMsg::kStatsResult);
    EXPECT_EQ(got->request_id(), 42u);
    EXPECT_TRUE(same(got->stats.stats, m));
  }
  {
    // Protocol 12: the parked sessions follow, when there are any, and only for a session that
    // speaks 12 (an older client's decoder would refuse the trailing bytes).
    ServerStats m = testing::sample_stats();
    m.parked.sessions = {{7, 1 << 30, 59000}, {9, 4096, 100}};
    OutFrame old, now;
    encode_stats_result(42, m, kParkedStatsVersion - 1, old);
    encode_stats_result(42, m, kParkedStatsVersion, now);
    EXPECT_EQ(testing::flatten(old).size(), 1 + 8 + size_of(static_cast<const ServerStats&>(m)));
    EXPECT_EQ(testing::flatten(now).size(), testing::flatten(old).size() + 4 + 2 * 24);
    auto got = decode_server_message(payload_of(now));
    ASSERT_TRUE(got.ok()) << got.status().message();
    ASSERT_EQ(got->stats.stats.parked.sessions.size(), 2u);
    EXPECT_EQ(got->stats.stats.parked.sessions[0].bytes, 1u << 30);
    EXPECT_EQ(got->stats.stats.parked.sessions[1].ms_left, 100u);
    auto older = decode_server_message(payload_of(old));
    ASSERT_TRUE(older.ok()) << older.status().message();
    EXPECT_TRUE(older->stats.stats.parked.sessions.empty());
  }
  {
    // Protocol 14: the parked sessions' list always (empty here), then the memory figures.
    ServerStats m = testing::sample_stats();
    m.memory = {uint64_t{3} << 30, 123456};
    OutFrame old, now;
    encode_stats_result(42, m, kMemoryStatsVersion - 1, old);
    encode_stats_result(42, m, kMemoryStatsVersion, now);
    EXPECT_EQ(testing::flatten(now).size(), testing::flatten(old).size() + 4 + 16);
    auto got = decode_server_message(payload_of(now));
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_TRUE(got->stats.stats.parked.sessions.empty());
    EXPECT_EQ(got->stats.stats.memory.max_memory_bytes, uint64_t{3} << 30);
    EXPECT_EQ(got->stats.stats.memory.used_bytes, 123456u);
    auto older = decode_server_message(payload_of(old));
    ASSERT_TRUE(older.ok()) << older.status().message();
    EXPECT_EQ(older->stats.stats.memory.max_memory_bytes, 0u);
  }
  {
    const StoreRequest m{9, StoreOp::kGet, "g1/rank_0", std::string("\0v", 2)};
    expect_every_field_set(m, "StoreRequest");
    OutFrame f;
    encode_store_request(m, f);
    EXPECT_EQ(testing::flatten(f).size(), 1 + size_of(m));
    auto got = decode_store_request(payload_of(f));
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_TRUE(same(*got, m));
  }
  {
    const StoreReply m{9, not_found("no key"), true, "v"};
    expect_every_field_set(m, "StoreReply");
    OutFrame f;
    encode_store_reply(m, f);
    EXPECT_EQ(testing::flatten(f).size(), 1 + size_of(m));
    auto got = decode_store_reply(payload_of(f));
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_TRUE(same(*got, m));
  }
  {
    const Fetch m{1, 2, 3, "cap"};
    expect_every_field_set(m, "Fetch");
    OutFrame f;
    encode_fetch(m, f);
    EXPECT_EQ(testing::flatten(f).size(), 1 + size_of(m));
    auto got = decode_fetch(payload_of(f));
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_TRUE(same(*got, m));
  }
  {
    const AttachSegment m{1, 2, 3};
    expect_every_field_set(m, "AttachSegment");
    OutFrame f;
    encode_attach_segment(m, f);
    EXPECT_EQ(testing::flatten(f).size(), 1 + size_of(m));
    auto got = decode_attach_segment(payload_of(f));
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_TRUE(same(*got, m));
  }
}

bool same(const TensorData& a, const TensorData& b) {
  return a.meta == b.meta && a.bytes.size() == b.bytes.size() &&
         std::equal(a.bytes.data(), a.bytes.data() + a.bytes.size(), b.bytes.data());
}
bool same(const InSegment& a, const InSegment& b) { return a.meta == b.meta; }
template <class T>
bool same(const Result<T>& a, const Result<T>& b) {
  return same(a.status(), b.status()) && (!a.ok() || same(*a, *b));
}

// A reply encodes as its declaration says (its size is FieldSize's, after the type byte) and
// decodes into the member of its kind, with every field as sent.
template <class M>
void expect_reply_round_trips(const M& m, M ServerMessage::*member, ServerMsg kind,
                              const OutFrame& f, const std::string& name) {
  EXPECT_EQ(testing::flatten(f).size(), 1 + size_of(m)) << name;
  auto got = decode_server_message(payload_of(f));
  ASSERT_TRUE(got.ok()) << name << ": " << got.status().message();
  ASSERT_EQ(got->kind, kind) << name;
  EXPECT_TRUE(same((*got).*member, m)) << name;
  OutFrame again;  // and the generic encoder writes the same bytes
  encode_server_message(*got, again);
  EXPECT_EQ(testing::flatten(again), testing::flatten(f)) << name;
}

TEST(DeclaredMessages, EveryReplyRoundTripsOkAndFailed) {
  const uint8_t bytes[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  TensorData d;
  d.meta.shape = {3};
  d.meta.dtype = DType::kI32;
  d.bytes = Buffer::copy_of(bytes, sizeof bytes);
  auto read = [](const Result<TensorData>& r) {
    OutFrame f;
    encode_read_result(7, r, f);
    expect_reply_round_trips(ReadResult{7, r}, &ServerMessage::read, ServerMsg::kReadResult, f,
                             "ReadResult");
  };
  read(d);
  read(not_found("x"));
  for (const Status& s : {Status::OK(), invalid_argument("bad")}) {
    OutFrame f;
    encode_sync_result(8, s, f);
    expect_reply_round_trips(SyncResult{8, s}, &ServerMessage::sync, ServerMsg::kSyncResult, f,
                             "SyncResult");
    OutFrame e;
    encode_session_error(s, e);
    expect_reply_round_trips(SessionError{s}, &ServerMessage::error, ServerMsg::kSessionError, e,
                             "SessionError");
  }
  for (const Result<ir::GraphId>& r :
       {Result<ir::GraphId>(ir::GraphId{5}), Result<ir::GraphId>(resource_exhausted("full"))}) {
    OutFrame f;
    encode_graph_result(9, r, f);
    expect_reply_round_trips(GraphResult{9, r}, &ServerMessage::graph, ServerMsg::kGraphResult, f,
                             "GraphResult");
  }
  const Exported x{"cap", {{2, 3}, DType::kF32}};
  expect_every_field_set(x, "Exported");
  for (const Result<Exported>& r : {Result<Exported>(x), Result<Exported>(not_found("gone"))}) {
    OutFrame f;
    encode_capability_result(10, r, f);
    expect_reply_round_trips(CapabilityResult{10, r}, &ServerMessage::capability,
                             ServerMsg::kCapabilityResult, f, "CapabilityResult");
  }
  OutFrame f;
  encode_read_result_in_segment(11, {{4, 4}, DType::kF32}, f);
  expect_reply_round_trips(ReadResultInSegment{11, InSegment{{{4, 4}, DType::kF32}}},
                           &ServerMessage::in_segment, ServerMsg::kReadResultInSegment, f,
                           "ReadResultInSegment");
}

TEST(DeclaredMessages, ATensorsByteCountMustMatchItsShape) {
  const uint8_t bytes[8] = {};
  OutFrame f;
  TensorData d;
  d.meta.shape = {2};
  d.meta.dtype = DType::kI32;
  d.bytes = Buffer::copy_of(bytes, sizeof bytes);
  encode_read_result(7, d, f);
  std::vector<uint8_t> v = testing::flatten(f);
  v[1 + 8 + 1 + 1 + 4 + 8] = 9;  // the byte count, after type, id, status, dtype, rank, dim
  auto got = decode_server_message(Buffer::copy_of(v.data(), v.size()));
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("ReadResult.result: tensor carries 9 bytes, expected 8"),
            std::string::npos)
      << got.status().message();

  OutFrame g;
  encode_read_result_in_segment(3, {{2}, DType::kI32}, g);
  v = testing::flatten(g);
  v.back() = 9;  // the byte count's high byte
  auto seg = decode_server_message(Buffer::copy_of(v.data(), v.size()));
  ASSERT_FALSE(seg.ok());
  EXPECT_NE(seg.status().message().find("ReadResultInSegment.tensor: segment says"),
            std::string::npos)
      << seg.status().message();
}

TEST(DeclaredMessages, HugeListCountsFailWithoutAllocating) {
  // Welcome: type, version, session id, empty server id, device index, then 2^32-1 devices.
  std::vector<uint8_t> welcome = {1, 7, 0, 1, 0, 0, 0, 0,    0,    0,    0,   0,
                                  0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF};
  auto w = decode_server_message(Buffer::copy_of(welcome.data(), welcome.size()));
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("Welcome.devices"), std::string::npos)
      << w.status().message();
  // StatsResult: type, request id, the counters, then 2^32-1 sessions.
  std::vector<uint8_t> stats(1 + 8 + 4 + 8 * 8, 0);
  stats[0] = static_cast<uint8_t>(ServerMsg::kStatsResult);
  stats.insert(stats.end(), {0xFF, 0xFF, 0xFF, 0xFF, 1, 2, 3});
  auto s = decode_server_message(Buffer::copy_of(stats.data(), stats.size()));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("StatsResult.stats.per_session_bytes"), std::string::npos)
      << s.status().message();
}

TEST(DeclaredMessages, ErrorsNameTheMessageAndField) {
  OutFrame f;
  encode_store_reply({9, Status::OK(), true, "v"}, f);
  std::vector<uint8_t> v = testing::flatten(f);
  v[1 + 8 + 1] = 2;  // the present flag, after the type, request id and OK status
  auto got = decode_store_reply(Buffer::copy_of(v.data(), v.size()));
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("StoreResult.present"), std::string::npos)
      << got.status().message();

  OutFrame g;
  encode_store_request({9, StoreOp::kSet, "k", "v"}, g);
  v = testing::flatten(g);
  v[1 + 8] = 3;  // the op
  auto req = decode_store_request(Buffer::copy_of(v.data(), v.size()));
  ASSERT_FALSE(req.ok());
  EXPECT_NE(req.status().message().find("Store.op: unknown store operation 3"), std::string::npos)
      << req.status().message();
}

}  // namespace
}  // namespace tw::protocol
