// The protocol 3 messages of tensor moves (docs/protocol.md §3, §4, §8.9): export, import and
// same-server move tasks, the capability result and the peer's Fetch round-trip, every truncated
// prefix is an error, and the worked examples match the encoder.
#include <gtest/gtest.h>

#include "protocol/messages.h"
#include "support/doc_examples.h"
#include "support/frames.h"

namespace tw::protocol {
namespace {

Buffer payload_of(const OutFrame& f) {
  std::vector<uint8_t> v = testing::flatten(f);
  return Buffer::copy_of(v.data(), v.size());
}

TensorSource sample_source() {
  return {42, 7, std::string("\x01\x00\xffsigned", 9), "tls://10.0.0.2:5000", "AB:CD:EF"};
}

TEST(MovesCodec, TasksRoundTrip) {
  BatchWriter b;
  b.add_export(3, 7);
  const TensorMeta meta{{2, 0, 5}, kI64};
  b.add_move(TaskKind::kImport, 11, meta, sample_source());
  b.add_move(TaskKind::kMoveLocal, 12, TensorMeta{{}, kF32}, sample_source());
  std::vector<Task> t;
  ASSERT_TRUE(decode_batch(payload_of(b.take()), t).ok());
  ASSERT_EQ(t.size(), 3u);
  ASSERT_EQ(task_kind(t[0]), TaskKind::kExport);
  EXPECT_EQ(std::get<ExportTask>(t[0]).request_id, 3u);
  EXPECT_EQ(std::get<ExportTask>(t[0]).id, 7u);
  ASSERT_EQ(task_kind(t[1]), TaskKind::kImport);
  EXPECT_EQ(std::get<ImportTask>(t[1]).id, 11u);
  EXPECT_EQ(std::get<ImportTask>(t[1]).meta, meta);
  EXPECT_EQ(std::get<ImportTask>(t[1]).source.session_id, 42u);
  EXPECT_EQ(std::get<ImportTask>(t[1]).source.tensor, 7u);
  EXPECT_EQ(std::get<ImportTask>(t[1]).source.capability, sample_source().capability);
  EXPECT_EQ(std::get<ImportTask>(t[1]).source.url, "tls://10.0.0.2:5000");
  EXPECT_EQ(std::get<ImportTask>(t[1]).source.fingerprint, "AB:CD:EF");
  ASSERT_EQ(task_kind(t[2]), TaskKind::kMoveLocal);
  EXPECT_EQ(std::get<MoveLocalTask>(t[2]).meta, (TensorMeta{{}, kF32}));
  EXPECT_EQ(std::get<MoveLocalTask>(t[2]).source.capability, sample_source().capability);
  EXPECT_TRUE(std::get<MoveLocalTask>(t[2]).source.url.empty())
      << "a same-server move carries no address";
}

// Protocol 17: the ExportAs task round-trips, and a ticket capability's fields come back from
// its bytes; another format, a truncated one or one with bytes after the ticket is not one.
TEST(MovesCodec, ExportAsAndTicketCapabilityRoundTrip) {
  BatchWriter b;
  const std::string ticket(kTicketBytes, '\x5a');
  b.add(ExportAsTask{7, ticket});
  std::vector<Task> t;
  ASSERT_TRUE(decode_batch(payload_of(b.take()), t).ok());
  ASSERT_EQ(t.size(), 1u);
  ASSERT_EQ(task_kind(t[0]), TaskKind::kExportAs);
  EXPECT_EQ(std::get<ExportAsTask>(t[0]).id, 7u);
  EXPECT_EQ(std::get<ExportAsTask>(t[0]).ticket, ticket);

  TicketCapability c;
  c.server_id = "9f3a";
  c.session_id = 42;
  c.tensor = 7;
  c.meta = TensorMeta{{2, 0, 5}, kI64};
  c.ticket = ticket;
  const std::string token = encode_ticket_capability(c);
  EXPECT_EQ(static_cast<uint8_t>(token[0]), kTicketCapabilityFormat);
  TicketCapability back;
  ASSERT_TRUE(decode_ticket_capability(token, back));
  EXPECT_EQ(back.server_id, "9f3a");
  EXPECT_EQ(back.session_id, 42u);
  EXPECT_EQ(back.tensor, 7u);
  EXPECT_EQ(back.meta, c.meta);
  EXPECT_EQ(back.ticket, ticket);
  for (size_t n = 0; n < token.size(); ++n)
    EXPECT_FALSE(decode_ticket_capability(token.substr(0, n), back)) << n << " bytes";
  EXPECT_FALSE(decode_ticket_capability(token + "x", back));
  std::string signed_format = token;
  signed_format[0] = 1;
  EXPECT_FALSE(decode_ticket_capability(signed_format, back));
}

TEST(MovesCodec, CapabilityResultAndFetchRoundTrip) {
  OutFrame ok, err, fetch;
  encode_capability_result(9, Exported{"token", {{3, 4}, kU8}}, ok);
  encode_capability_result(10, invalid_argument("no such tensor"), err);
  encode_fetch({5, 6, 7, "token"}, fetch);
  auto m = decode_server_message(payload_of(ok));
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->kind, ServerMsg::kCapabilityResult);
  EXPECT_EQ(m->request_id(), 9u);
  EXPECT_EQ(m->capability.result.value().capability, "token");
  EXPECT_EQ(m->capability.result.value().meta, (TensorMeta{{3, 4}, kU8}));
  auto e = decode_server_message(payload_of(err));
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->status().message(), "no such tensor");
  Buffer fb = payload_of(fetch);
  EXPECT_EQ(*peek_client_msg(fb), ClientMsg::kFetch);
  auto f = decode_fetch(fb);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->request_id, 5u);
  EXPECT_EQ(f->session_id, 6u);
  EXPECT_EQ(f->tensor, 7u);
  EXPECT_EQ(f->capability, "token");
  EXPECT_FALSE(decode_fetch(payload_of(ok)).ok()) << "not a Fetch";
}

TEST(MovesCodec, EveryTruncatedPrefixIsAnError) {
  OutFrame cap, fetch;
  encode_capability_result(9, Exported{"token", {{3, 4}, kU8}}, cap);
  encode_fetch({5, 6, 7, "token"}, fetch);
  BatchWriter b;
  b.add_move(TaskKind::kImport, 11, TensorMeta{{2}, kF32}, sample_source());
  OutFrame batch = b.take();
  for (const OutFrame* f : {&cap, &fetch, &batch}) {
    std::vector<uint8_t> v = testing::flatten(*f);
    for (size_t n = 0; n < v.size(); ++n) {
      Buffer p = Buffer::copy_of(v.data(), n);
      std::vector<Task> t;
      EXPECT_FALSE(decode_server_message(p).ok() && f == &cap) << n;
      EXPECT_FALSE(decode_fetch(p).ok()) << n;
      EXPECT_FALSE(decode_batch(p, t).ok()) << n;
    }
  }
}

#ifdef TW_DOCS_DIR
using testing::framed;
std::vector<uint8_t> doc_example(const std::string& name) {
  return testing::doc_example(testing::read_protocol_doc(TW_DOCS_DIR), name);
}

TEST(MovesCodec, WorkedExamplesMatchTheEncoder) {
  BatchWriter b;
  b.add_export(9, 2);
  EXPECT_EQ(doc_example("export_batch"), framed(b.take()));
  OutFrame cap;
  encode_capability_result(9, Exported{"cap!", {{2}, kF32}}, cap);
  EXPECT_EQ(doc_example("capability_result"), framed(cap));
  b.add_move(TaskKind::kImport, 5, {{2}, kF32}, {1, 2, "cap!", "tcp://a:1", ""});
  EXPECT_EQ(doc_example("import_batch"), framed(b.take()));
  OutFrame fetch;
  encode_fetch({1, 1, 2, "cap!"}, fetch);
  EXPECT_EQ(doc_example("fetch"), framed(fetch));
}
#endif

}  // namespace
}  // namespace tw::protocol
