// Capabilities (server/transfer.h) signed and checked without a socket, and the move tasks run
// on Sessions directly: an export in one session and a same-server move into another share the
// storage; an import parks its session until the pull's outcome comes.
#include "server/transfer.h"

#include <gtest/gtest.h>

#include <cstring>

#include "protocol/messages.h"
#include "server/session.h"
#include "support/frames.h"
#include "support/session_replies.h"

namespace tw::server {
namespace {

namespace proto = protocol;

TensorData data_of(std::vector<float> v, Shape shape) {
  return TensorData::from<float>(shape, std::span<const float>(v));
}

// A clock the test moves by hand.
struct FakeClock {
  uint64_t now = 1000;
  CapabilityTable::Clock fn() {
    return [this] { return now; };
  }
};

Buffer payload_of(const proto::OutFrame& f) {
  std::vector<uint8_t> bytes = testing::flatten(f);
  return Buffer::copy_of(bytes.data(), bytes.size());
}

TEST(Capabilities, RedeemGivesTheTensorOnceAndSharesItsStorage) {
  FakeClock clock;
  CapabilityTable table("9f3a", std::chrono::seconds(60), clock.fn());
  TensorData d = data_of({1, 2, 3, 4, 5, 6}, {2, 3});
  auto token = table.issue(5, 17, d);
  ASSERT_TRUE(token.ok()) << token.status().message();
  EXPECT_EQ(table.outstanding(), 1u);
  auto c = CapabilityTable::parse(*token);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->server_id, "9f3a");
  EXPECT_EQ(c->session_id, 5u);
  EXPECT_EQ(c->tensor, 17u);
  EXPECT_EQ(c->meta, d.meta);
  EXPECT_EQ(c->expires_ms, 61000u);
  auto got = table.redeem(*token, 5, 17);
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(got->bytes.storage_id(), d.bytes.storage_id()) << "shared, not copied";
  EXPECT_EQ(got->meta, d.meta);
  EXPECT_EQ(table.outstanding(), 0u);
  // Replayed.
  auto again = table.redeem(*token, 5, 17);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(again.status().message().find("used already"), std::string::npos);
}

TEST(Capabilities, WrongTensorOrSessionIsRefusedAndLeavesTheCapability) {
  CapabilityTable table("9f3a");
  auto token = table.issue(5, 17, data_of({1}, {1}));
  ASSERT_TRUE(token.ok());
  for (auto [session, tensor] : {std::pair<uint64_t, uint64_t>{5, 18}, {6, 17}}) {
    auto r = table.redeem(*token, session, tensor);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().message(), "capability refused: it does not grant tensor " +
                                        std::to_string(tensor) + " of session " +
                                        std::to_string(session));
  }
  EXPECT_TRUE(table.redeem(*token, 5, 17).ok());
}

TEST(Capabilities, ExpiredIsRefusedAndForgotten) {
  FakeClock clock;
  CapabilityTable table("9f3a", std::chrono::milliseconds(500), clock.fn());
  auto token = table.issue(1, 2, data_of({1, 2}, {2}));
  ASSERT_TRUE(token.ok());
  clock.now += 499;
  auto early = table.issue(1, 3, data_of({1}, {1}));
  ASSERT_TRUE(early.ok());
  EXPECT_EQ(table.outstanding(), 2u);
  clock.now += 1;  // exactly at expiry: expired
  auto r = table.redeem(*token, 1, 2);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("expired 0 ms ago"), std::string::npos)
      << r.status().message();
  EXPECT_EQ(table.outstanding(), 1u);
  // Issuing sweeps what expired meanwhile.
  clock.now += 10000;
  ASSERT_TRUE(table.issue(1, 4, data_of({1}, {1})).ok());
  EXPECT_EQ(table.outstanding(), 1u);
}

// Protocol 17: a ticket capability is redeemed once its ticket is issued (a fetch before that is
// parked and woken by the issue, or by a sweep after the ttl), keyed by session and tensor and
// checked against the tensor's meta; a ticket issued with an error gives that error.
TEST(Capabilities, TicketsParkFetchesUntilIssued) {
  FakeClock clock;
  CapabilityTable table("9f3a", std::chrono::milliseconds(500), clock.fn());
  const std::string ticket(proto::kTicketBytes, 'k');
  const TensorData d = data_of({1, 2, 3}, {3});
  auto cap = [&](uint64_t session, ir::TensorId tensor, TensorMeta meta) {
    return proto::encode_ticket_capability({"9f3a", session, tensor, std::move(meta), ticket});
  };
  const std::string token = cap(5, 17, d.meta);
  auto parsed = CapabilityTable::parse(token);
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->meta, d.meta);
  int woken = 0;
  EXPECT_TRUE(table.park(token, [&] { ++woken; }));
  EXPECT_TRUE(table.park(token, [&] { ++woken; }));
  EXPECT_FALSE(table.park(proto::encode_ticket_capability({"other", 5, 17, d.meta, ticket}), [] {}))
      << "another server's ticket is refused at once";
  EXPECT_FALSE(table.park("not a ticket", [] {}));
  EXPECT_FALSE(table.redeem(token, 5, 17).ok()) << "not issued yet";
  table.issue_ticket(6, 17, ticket, d);  // another session's ticket: wakes nothing here
  EXPECT_EQ(woken, 0);
  table.issue_ticket(5, 17, ticket, d);
  EXPECT_EQ(woken, 2);
  EXPECT_FALSE(table.park(token, [] {})) << "issued: served at once";
  auto other = table.redeem(cap(5, 17, TensorMeta{{1, 3}, kF32}), 5, 17);
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("names a tensor f32[1, 3], tensor 17 is f32[3]"),
            std::string::npos)
      << other.status().message();
  EXPECT_FALSE(table.redeem(token, 5, 18).ok());
  auto got = table.redeem(token, 5, 17);
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(got->bytes.storage_id(), d.bytes.storage_id()) << "shared, not copied";
  EXPECT_FALSE(table.redeem(token, 5, 17).ok()) << "used once";
  // The other session's ticket is its own.
  EXPECT_TRUE(table.redeem(cap(6, 17, d.meta), 6, 17).ok());

  table.issue_ticket(5, 20, ticket, Status(StatusCode::kOutOfRange, "export of tensor 20: bad"));
  auto failed = table.redeem(cap(5, 20, d.meta), 5, 20);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().message(), "export of tensor 20: bad");

  // A fetch of a ticket never issued is woken by a sweep once its session has made no progress
  // for the ttl.
  const std::string never = proto::encode_ticket_capability(
      {"9f3a", 5, 21, d.meta, std::string(proto::kTicketBytes, 'n')});
  ASSERT_TRUE(table.park(never, [&] { ++woken; }));
  clock.now += 499;
  table.sweep();
  EXPECT_EQ(woken, 2);
  table.progress(6);  // another session's progress changes nothing
  table.progress(5);
  clock.now += 1;
  table.sweep();
  EXPECT_EQ(woken, 2) << "its session ran a batch: it waits another ttl";
  clock.now += 499;
  table.sweep();
  EXPECT_EQ(woken, 3);
  auto refused = table.redeem(never, 5, 21);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("no tensor was exported under its ticket"),
            std::string::npos)
      << refused.status().message();
}

TEST(Capabilities, EveryAlteredByteIsRefused) {
  CapabilityTable table("9f3a");
  auto token = table.issue(5, 17, data_of({1, 2, 3}, {3}));
  ASSERT_TRUE(token.ok());
  for (size_t i = 0; i < token->size(); ++i) {
    std::string t = *token;
    t[i] = static_cast<char>(t[i] ^ 0x20);
    auto r = table.redeem(t, 5, 17);
    ASSERT_FALSE(r.ok()) << "byte " << i;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().message().rfind("capability refused: ", 0), 0u) << r.status().message();
  }
  std::string shorter = token->substr(0, token->size() - 1);
  EXPECT_FALSE(table.redeem(shorter, 5, 17).ok());
  EXPECT_FALSE(table.redeem(*token + "x", 5, 17).ok());
  EXPECT_FALSE(table.redeem("", 5, 17).ok());
  EXPECT_TRUE(table.redeem(*token, 5, 17).ok()) << "the refusals did not use it up";
}

TEST(Capabilities, AnotherServersCapabilityIsRefused) {
  CapabilityTable a("aaaa"), b("bbbb"), same_id("aaaa");  // same_id: another secret
  auto token = a.issue(1, 1, data_of({1}, {1}));
  ASSERT_TRUE(token.ok());
  auto r = b.redeem(*token, 1, 1);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("issued by server aaaa, not by this one (bbbb)"),
            std::string::npos);
  auto s = same_id.redeem(*token, 1, 1);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("signature does not verify"), std::string::npos);
}

TEST(Capabilities, FetchIsAnsweredWithTheTensorOrTheRefusal) {
  CapabilityTable table("9f3a");
  TensorData d = data_of({1.5f, -2.0f}, {2});
  auto token = table.issue(3, 4, d);
  ASSERT_TRUE(token.ok());
  ServerMetrics metrics;
  auto answer = [&](const proto::Fetch& f) {
    proto::OutFrame req, rep;
    proto::encode_fetch(f, req);
    std::vector<uint8_t> bytes = testing::flatten(req);
    serve_fetch(table, metrics, Buffer::copy_of(bytes.data(), bytes.size()), rep);
    std::vector<uint8_t> out = testing::flatten(rep);
    auto m = proto::decode_server_message(Buffer::copy_of(out.data(), out.size()));
    EXPECT_TRUE(m.ok());
    return std::move(m).value();
  };
  proto::ServerMessage wrong = answer({9, 3, 5, *token});
  EXPECT_EQ(wrong.request_id(), 9u);
  EXPECT_FALSE(wrong.status().ok());
  proto::ServerMessage ok = answer({10, 3, 4, *token});
  EXPECT_EQ(ok.kind, proto::ServerMsg::kReadResult);
  EXPECT_EQ(ok.request_id(), 10u);
  ASSERT_TRUE(ok.status().ok()) << ok.status().message();
  EXPECT_EQ(std::vector<float>(ok.read.result.value().values<float>().begin(),
                               ok.read.result.value().values<float>().end()),
            (std::vector<float>{1.5f, -2.0f}));
  EXPECT_FALSE(answer({11, 3, 4, *token}).status().ok()) << "single use";
  EXPECT_EQ(metrics.transfers(Direction::kOut), 1u) << "refusals are not transfers";
  EXPECT_EQ(metrics.transfer_bytes(Direction::kOut), 8u);
}

// Protocol 10's FetchBound: a pull cut mid-transfer fetches again with the same pull id; no
// other pull, nor an unbound Fetch, gets the tensor; FetchDone uses the capability up.
TEST(Capabilities, BoundToOnePullUntilDone) {
  CapabilityTable table("9f3a");
  TensorData d = data_of({1.5f, -2.0f}, {2});
  auto token = table.issue(3, 4, d);
  ASSERT_TRUE(token.ok());
  const std::string pull(proto::kPullIdBytes, 'p'), other(proto::kPullIdBytes, 'q');
  ServerMetrics metrics;
  auto fetch = [&](const std::string& by) {
    proto::OutFrame req, rep;
    proto::encode_fetch_bound({7, 3, 4, *token, by}, req);
    serve_fetch(table, metrics, payload_of(req), rep);
    std::vector<uint8_t> out = testing::flatten(rep);
    auto m = proto::decode_server_message(Buffer::copy_of(out.data(), out.size()));
    EXPECT_TRUE(m.ok());
    return std::move(m).value().status();
  };
  EXPECT_TRUE(fetch(pull).ok());
  EXPECT_EQ(table.outstanding(), 1u) << "kept for a retry of the same pull";
  EXPECT_TRUE(fetch(pull).ok()) << "the same pull again (after a cut)";
  Status stolen = fetch(other);
  EXPECT_NE(stolen.message().find("used already"), std::string::npos) << stolen.message();
  EXPECT_FALSE(table.redeem(*token, 3, 4).ok()) << "an unbound Fetch of a bound capability";
  EXPECT_FALSE(fetch(std::string(3, 'p')).ok()) << "a pull id of the wrong length";
  table.done(*token, other);  // not that pull's: nothing
  EXPECT_EQ(table.outstanding(), 1u);
  proto::OutFrame done, none;
  proto::encode_fetch_done({*token, pull}, done);
  serve_fetch(table, metrics, payload_of(done), none);
  EXPECT_EQ(none.payload_size(), 0u) << "FetchDone has no reply";
  EXPECT_EQ(table.outstanding(), 0u);
  EXPECT_NE(fetch(pull).message().find("used already"), std::string::npos);
  EXPECT_EQ(metrics.transfers(Direction::kOut), 2u) << "each try sent counts";
}

// Protocol 11's FetchFrom: a retry asks for the bytes after those it received and gets only them
// (as a u8 vector, a slice of the exported storage); an offset past the tensor is a clear refusal.
TEST(Capabilities, FetchFromSendsOnlyTheRestAndRefusesAnOffsetPastTheEnd) {
  CapabilityTable table("9f3a");
  TensorData d = data_of({1.5f, -2.0f, 4.0f}, {3});
  auto token = table.issue(3, 4, d);
  ASSERT_TRUE(token.ok());
  const std::string pull(proto::kPullIdBytes, 'p');
  ServerMetrics metrics;
  auto fetch_from = [&](uint64_t offset, const std::string& by) {
    proto::OutFrame req, rep;
    proto::encode_fetch_from({7, 3, 4, *token, by, offset}, req);
    serve_fetch(table, metrics, payload_of(req), rep);
    std::vector<uint8_t> out = testing::flatten(rep);
    auto m = proto::decode_server_message(Buffer::copy_of(out.data(), out.size()));
    EXPECT_TRUE(m.ok());
    return std::move(m).value().read.result;
  };
  Result<TensorData> whole = fetch_from(0, pull);
  ASSERT_TRUE(whole.ok()) << whole.status().message();
  EXPECT_EQ(whole->meta, (TensorMeta{{12}, kU8}));
  Result<TensorData> rest = fetch_from(5, pull);
  ASSERT_TRUE(rest.ok()) << rest.status().message();
  EXPECT_EQ(rest->meta, (TensorMeta{{7}, kU8}));
  EXPECT_EQ(0, std::memcmp(rest->bytes.data(), d.bytes.data() + 5, 7)) << "the bytes from 5 on";
  EXPECT_TRUE(fetch_from(12, pull).ok()) << "nothing left is still an answer";
  Result<TensorData> past = fetch_from(13, pull);
  ASSERT_FALSE(past.ok());
  EXPECT_NE(past.status().message().find("offset 13 is past the end of tensor 4, which holds 12"),
            std::string::npos)
      << past.status().message();
  EXPECT_FALSE(fetch_from(~uint64_t{0}, pull).ok());
  EXPECT_FALSE(fetch_from(0, std::string(3, 'p')).ok()) << "a pull id of the wrong length";
  EXPECT_FALSE(fetch_from(0, std::string(proto::kPullIdBytes, 'q')).ok()) << "another pull";
  EXPECT_EQ(table.outstanding(), 1u) << "still bound to the pull";
  EXPECT_EQ(metrics.transfer_bytes(Direction::kOut), 12u + 7u) << "only the bytes sent count";
}

// ---- the move tasks on sessions ----

struct Out : testing::Replies {
  std::vector<proto::ImportTask> imports;
  Status begin_import(const proto::ImportTask& t) override {
    imports.push_back(t);
    return Status::OK();
  }
};

// Encodes `add`'s tasks as a client would and runs them on `s` as the server does; false when
// the session parked on an import.
bool run(Session& s, Out& out, const std::function<void(proto::BatchWriter&)>& add,
         Batch* keep = nullptr) {
  proto::BatchWriter w;
  add(w);
  Batch batch;
  batch.frame = payload_of(w.take());
  batch.decoded = proto::decode_batch(batch.frame, batch.tasks);
  batch.count = batch.tasks.size();
  Batch& b = keep ? *keep : batch;
  if (keep) *keep = std::move(batch);
  return s.run(b, out, Session::Clock::time_point::max());
}

ir::Op upload(ir::TensorId id, std::vector<float> v) {
  return from_host_of(data_of(std::move(v), {static_cast<int64_t>(v.size())}), id);
}

TEST(SessionMoves, ExportThenMoveLocalSharesTheStorage) {
  SessionTotals totals;
  totals.capabilities.configure("srv", std::chrono::seconds(60));
  auto s1 = Session::open(1, "cpu", uint64_t{1} << 30, totals);
  auto s2 = Session::open(2, "cpu", uint64_t{1} << 30, totals);
  ASSERT_TRUE(s1.ok() && s2.ok());
  Out o1, o2;
  std::vector<float> v(8192, 0.25f);
  ASSERT_TRUE(run(**s1, o1, [&](proto::BatchWriter& w) {
    w.add_op(upload(1, v));
    w.add_export(7, 1);
    w.add_read(8, 1);
  }));
  ASSERT_EQ(o1.got.size(), 2u);
  ASSERT_EQ(o1.got[0].kind, proto::ServerMsg::kCapabilityResult);
  ASSERT_TRUE(o1.got[0].status().ok()) << o1.got[0].status().message();
  const proto::Exported e = o1.got[0].capability.result.value();
  EXPECT_EQ(e.meta, (TensorMeta{{8192}, kF32}));
  proto::TensorSource src{1, 1, e.capability, "", ""};
  // The move adds no tensor memory: session 2's tensor is session 1's buffer.
  const size_t in_use = BufferPool::global().stats().bytes_in_use;
  ASSERT_TRUE(run(**s2, o2, [&](proto::BatchWriter& w) {
    w.add_move(proto::TaskKind::kMoveLocal, 5, e.meta, src);
  }));
  EXPECT_LT(BufferPool::global().stats().bytes_in_use, in_use + 4096);
  EXPECT_EQ((*s2)->held(), (*s1)->held());
  ASSERT_TRUE(run(**s2, o2, [&](proto::BatchWriter& w) {
    w.add_read(9, 5);
    w.add_move(proto::TaskKind::kMoveLocal, 6, e.meta, src);  // replayed: poisons 6
    w.add_read(10, 6);
  }));
  ASSERT_EQ(o2.got.size(), 2u);
  ASSERT_TRUE(o2.got[0].status().ok()) << o2.got[0].status().message();
  EXPECT_EQ(std::vector<float>(o2.got[0].read.result.value().values<float>().begin(),
                               o2.got[0].read.result.value().values<float>().end()),
            v);
  EXPECT_FALSE(o2.got[1].status().ok());
  EXPECT_NE(o2.got[1].status().message().find("used already"), std::string::npos);
  // A poisoned or unknown tensor is not exported.
  ASSERT_TRUE(run(**s1, o1, [&](proto::BatchWriter& w) { w.add_export(11, 99); }));
  EXPECT_FALSE(o1.got.back().status().ok());
  EXPECT_NE(o1.got.back().status().message().find("export of tensor 99"), std::string::npos);
}

TEST(SessionMoves, ImportParksTheSessionUntilThePullEnds) {
  SessionTotals totals;
  auto s = Session::open(1, "cpu", uint64_t{1} << 30, totals);
  ASSERT_TRUE(s.ok());
  Out out;
  const TensorMeta meta{{3}, kF32};
  proto::TensorSource src{4, 4, "cap", "tcp://127.0.0.1:1", ""};
  Batch batch;
  EXPECT_FALSE(run(
      **s, out,
      [&](proto::BatchWriter& w) {
        w.add_move(proto::TaskKind::kImport, 2, meta, src);
        w.add_read(1, 2);
      },
      &batch));
  EXPECT_TRUE((*s)->parked());
  ASSERT_EQ(out.imports.size(), 1u);
  EXPECT_EQ(out.imports[0].source.url, "tcp://127.0.0.1:1");
  EXPECT_EQ(totals.memory.used(), 12u) << "the bytes being received are reserved";
  EXPECT_FALSE((*s)->run(batch, out, Session::Clock::time_point::max())) << "still parked";
  EXPECT_TRUE(out.got.empty());
  (*s)->finish_import(data_of({1, 2, 3}, {3}));
  EXPECT_FALSE((*s)->parked());
  EXPECT_TRUE((*s)->run(batch, out, Session::Clock::time_point::max()));
  ASSERT_EQ(out.got.size(), 1u);
  ASSERT_TRUE(out.got[0].status().ok());
  EXPECT_EQ(out.got[0].read.result.value().value<float>(2), 3.0f);
  EXPECT_EQ(totals.metrics.transfers(Direction::kIn), 1u);
  EXPECT_EQ(totals.metrics.transfer_bytes(Direction::kIn), 12u);

  // A failed pull poisons the tensor with its error; a tensor over the quota never starts one.
  Batch b2;
  EXPECT_FALSE(run(
      **s, out,
      [&](proto::BatchWriter& w) {
        w.add_move(proto::TaskKind::kImport, 3, meta, src);
        w.add_read(2, 3);
        w.add_move(proto::TaskKind::kImport, 4, TensorMeta{{int64_t{1} << 30}, kF32}, src);
        w.add_read(3, 4);
      },
      &b2));
  (*s)->finish_import(unavailable("the source went away"));
  EXPECT_TRUE((*s)->run(b2, out, Session::Clock::time_point::max()));
  ASSERT_EQ(out.got.size(), 3u);
  EXPECT_EQ(out.got[1].status().message(), "the source went away");
  EXPECT_NE(out.got[2].status().message().find("session memory quota exceeded"), std::string::npos);
  EXPECT_EQ(out.imports.size(), 2u);
}

}  // namespace
}  // namespace tw::server
