// docs/protocol.md's status codes against the server (issue 52 §3). Every code is read from the
// document itself, never from a second list: the code table (§6.1) against core/status.h, every
// "code N (name)" the prose states against that table, and each code the document promises for a
// case against what a real server (in-process, port 0) answers, read from the sentence that
// promises it. Rewording one of those sentences fails here naming the phrase looked for.
#include <gtest/gtest.h>
#include <zstd.h>

#include <cctype>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "integration/raw_client.h"
#include "protocol/compress.h"
#include "protocol/messages.h"
#include "protocol/tasks.h"
#include "tensorwire/server.h"
#include "tensorwire/tensorwire.h"

#ifndef TW_DOCS_DIR
#error "TW_DOCS_DIR must name the docs folder"
#endif

namespace tw {
namespace {

namespace proto = protocol;
using testing::RawClient;

// The document with every run of whitespace (line breaks included) as one space, so that a
// phrase matches however the paragraph is wrapped.
const std::string& doc() {
  static const std::string text = [] {
    std::ifstream f(TW_DOCS_DIR "/protocol.md");
    std::stringstream ss;
    ss << f.rdbuf();
    std::string out;
    for (char c : ss.str()) {
      const bool space = std::isspace(static_cast<unsigned char>(c)) != 0;
      if (space && !out.empty() && out.back() == ' ') continue;
      out.push_back(space ? ' ' : c);
    }
    return out;
  }();
  return text;
}

// §6.1's table: code -> name.
std::map<int, std::string> code_table() {
  const std::string& d = doc();
  const size_t from = d.find("### 6.1 "), to = d.find("### 6.2 ");
  std::map<int, std::string> t;
  if (from == std::string::npos || to == std::string::npos) return t;
  const std::string section = d.substr(from, to - from);
  static const std::regex row(R"(\| (\d+) \| ([^|]+?) \| [^|]+ \|)");
  for (std::sregex_iterator it(section.begin(), section.end(), row), end; it != end; ++it) {
    t[std::stoi((*it)[1])] = (*it)[2];
  }
  return t;
}

// The status code the document states first after `phrase` ("code N", "code is N"), or -1.
int code_after(const std::string& phrase) {
  const std::string& d = doc();
  const size_t at = d.find(phrase);
  if (at == std::string::npos) return -1;
  static const std::regex code(R"(code (?:is )?(\d+))");
  std::smatch m;
  const std::string rest = d.substr(at + phrase.size(), 400);
  return std::regex_search(rest, m, code) ? std::stoi(m[1]) : -1;
}

#define DOC_CODE(var, phrase)                                                        \
  const int var = code_after(phrase);                                                \
  ASSERT_GE(var, 0) << "docs/protocol.md no longer states a code after \"" << phrase \
                    << "\": update the phrase here with the sentence that states it"

TEST(ProtocolDocCodes, TheTableIsTheServersStatusCodes) {
  const std::map<int, std::string> t = code_table();
  const int last = static_cast<int>(StatusCode::kInternal);
  ASSERT_EQ(t.size(), static_cast<size_t>(last + 1)) << "docs/protocol.md §6.1 lists other codes";
  for (const auto& [code, name] : t) {
    EXPECT_EQ(name, status_code_name(static_cast<StatusCode>(code))) << "code " << code;
  }
  // "A decoder rejects codes above N": N is the last code, and the decoder does.
  static const std::regex above(R"(A decoder rejects codes above (\d+))");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(doc(), m, above));
  EXPECT_EQ(std::stoi(m[1]), last);
  OutFrame f;
  proto::encode_sync_result(1, invalid_argument("x"), f);
  std::vector<uint8_t> p = testing::flatten(f);
  ASSERT_EQ(p[9], 1);  // type, u64 request id, then the status code
  p[9] = static_cast<uint8_t>(last + 1);
  EXPECT_EQ(proto::decode_server_message(Buffer::copy_of(p.data(), p.size())).status().code(),
            StatusCode::kDataLoss);
}

// Wherever the prose names a code's meaning beside its number ("code 2 (not found)", "code 5,
// resource exhausted"), it is the table's.
TEST(ProtocolDocCodes, EveryCodeTheProseNamesIsTheTables) {
  const std::map<int, std::string> t = code_table();
  ASSERT_FALSE(t.empty());
  const std::string& d = doc();
  static const std::regex mention(R"(code (\d+)(?: \(|, ))");
  int named = 0;
  for (std::sregex_iterator it(d.begin(), d.end(), mention), end; it != end; ++it) {
    const int code = std::stoi((*it)[1]);
    const std::string after = d.substr(static_cast<size_t>(it->position() + it->length()), 40);
    for (const auto& [c, name] : t) {
      if (after.rfind(name, 0) != 0) continue;
      ++named;
      EXPECT_EQ(code, c) << "docs/protocol.md says \"" << it->str() << after << "...\" but §6.1 "
                         << "gives \"" << name << "\" code " << c;
    }
  }
  EXPECT_GE(named, 8) << "fewer named codes than the document had: did the regex break?";
}

// ---- what the server answers, against the code the document states for it ----

std::vector<uint8_t> le64(uint64_t v) {
  std::vector<uint8_t> b;
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
  return b;
}

// A Compressed message (§1.1) holding `inner`, made with zstd directly.
std::vector<uint8_t> compressed(const std::vector<uint8_t>& inner) {
  std::vector<uint8_t> out = {proto::kCompressedClientType};
  const std::vector<uint8_t> len = le64(inner.size());
  out.insert(out.end(), len.begin(), len.end());
  std::vector<uint8_t> z(ZSTD_compressBound(inner.size()));
  const size_t n = ZSTD_compress(z.data(), z.size(), inner.data(), inner.size(), 1);
  EXPECT_FALSE(ZSTD_isError(n));
  out.insert(out.end(), z.begin(), z.begin() + static_cast<long>(n));
  return out;
}

class ProtocolDocServer : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions o;
    o.max_frame_bytes = 65536;
    server_ = serve(o);
  }
  std::unique_ptr<RawClient> session() {
    auto c = std::make_unique<RawClient>(server_->url());
    auto w = c->hello();
    EXPECT_TRUE(w.ok() && w->kind == proto::ServerMsg::kWelcome);
    EXPECT_EQ(w->welcome.version, proto::kProtocolVersion);
    return c;
  }
  // The next message's status, after sending `b` (one reply expected).
  static Status reply(RawClient& c, proto::BatchWriter& b) {
    EXPECT_TRUE(c.send_frame(b.take()));
    auto m = c.read_message();
    return m.ok() ? m->status() : m.status();
  }
  static Status read(RawClient& c, ir::TensorId id) {
    proto::BatchWriter b;
    b.add_read(7, id);
    return reply(c, b);
  }
  std::unique_ptr<Server> server_;
};

TEST_F(ProtocolDocServer, FramingErrors) {
  DOC_CODE(empty, "A frame of length 0 is answered with a SessionError");
  DOC_CODE(over, "A frame over the limit gets a SessionError");
  DOC_CODE(malformed, "is a malformed frame (the server answers SessionError");
  {  // An empty frame: the code, and the session goes on ("the connection goes on").
    auto c = session();
    ASSERT_TRUE(c->send_payload({}));
    auto m = c->read_message();
    ASSERT_TRUE(m.ok() && m->kind == proto::ServerMsg::kSessionError);
    EXPECT_EQ(static_cast<int>(m->status().code()), empty) << m->status().message();
    proto::BatchWriter b;
    b.add_sync(1);
    EXPECT_TRUE(reply(*c, b).ok());
  }
  {  // Over --max-frame: the code, then the close.
    auto c = session();
    ASSERT_TRUE(c->send_bytes(testing::le32(1 << 20)));
    auto m = c->read_message();
    ASSERT_TRUE(m.ok() && m->kind == proto::ServerMsg::kSessionError);
    EXPECT_EQ(static_cast<int>(m->status().code()), over) << m->status().message();
    EXPECT_TRUE(c->closed_by_peer());
  }
  // Compressed frames announcing 0 bytes, holding another Compressed frame, or not
  // decompressing to what they announce: the code, then the close.
  proto::BatchWriter b;
  b.add_sync(1);
  const std::vector<uint8_t> sync = testing::flatten(b.take());
  std::vector<uint8_t> zero = compressed(sync);
  std::fill(zero.begin() + 1, zero.begin() + 9, 0);
  std::vector<uint8_t> wrong = compressed(sync);
  wrong[1] += 1;
  for (const auto& [what, payload] : std::vector<std::pair<std::string, std::vector<uint8_t>>>{
           {"announcing 0 bytes", zero},
           {"nested", compressed(compressed(sync))},
           {"of a wrong length", wrong}}) {
    SCOPED_TRACE(what);
    auto c = session();
    ASSERT_TRUE(c->send_payload(payload));
    auto m = c->read_message();
    ASSERT_TRUE(m.ok()) << m.status().message();
    ASSERT_EQ(m->kind, proto::ServerMsg::kSessionError);
    EXPECT_EQ(static_cast<int>(m->status().code()), malformed) << m->status().message();
    EXPECT_TRUE(c->closed_by_peer());
  }
  // The same Sync compressed once runs.
  auto c = session();
  ASSERT_TRUE(c->send_payload(compressed(sync)));
  auto m = c->read_message();
  ASSERT_TRUE(m.ok() && m->kind == proto::ServerMsg::kSyncResult) << m.status().message();
}

TEST_F(ProtocolDocServer, NotFoundAndGraphCodes) {
  const std::map<int, std::string> t = code_table();
  auto c = session();
  {  // §8.4: a read of an id that does not exist answers "not found".
    const Status st = read(*c, 12345);
    EXPECT_EQ(t.at(static_cast<int>(st.code())), "not found") << st.message();
  }
  {  // §4 kind 16 and §8.12: UploadByHash of bytes the server does not hold.
    DOC_CODE(row, "| 16 | **UploadByHash** |");
    DOC_CODE(prose, "otherwise nothing is made and the SyncResult's");
    EXPECT_EQ(row, prose);
    proto::BatchWriter b;
    b.add(proto::UploadByHashTask{3, 100, {{4}, kF32}, 1, 2});
    const Status st = reply(*c, b);
    EXPECT_EQ(static_cast<int>(st.code()), row) << st.message();
  }
  ir::Graph g;  // one op: y = x * 3
  g.input_ids = {1};
  g.inputs = {{{2}, kF32}};
  ir::BinaryScalar mul;
  mul.kind = ir::BinaryKind::kMul;
  mul.a = {1};
  mul.s = ir::Scalar(int64_t{3});
  mul.out = {2};
  g.ops = {mul};
  g.output_ids = {2};
  {  // §8.8: a RunGraph naming an id never registered; then a RegisterGraph in a session that
     // names its graphs itself (RegisterGraphAs).
    DOC_CODE(unknown, "RunGraph naming an id never registered poisons its outputs with");
    DOC_CODE(mixed, "a RegisterGraph with a GraphResult of");
    proto::BatchWriter b;
    b.add_register_graph_as(1, g);
    b.add_run_graph(99, {}, {200});
    ASSERT_TRUE(c->send_frame(b.take()));
    const Status st = read(*c, 200);
    EXPECT_EQ(static_cast<int>(st.code()), unknown) << st.message();
    b.add_register_graph(8, g);
    const Status reg = reply(*c, b);
    EXPECT_EQ(static_cast<int>(reg.code()), mixed) << reg.message();
  }
}

// §8.2: an op given a repeated (or live) output id poisons its other ids with its error, so that
// a read reports that error rather than "unknown tensor id".
TEST_F(ProtocolDocServer, RepeatedOutputIdsPoisonTheOp) {
  DOC_CODE(refused, "repeated among its outputs (a multi-output op given `3, 4, 3`) fails with");
  auto c = session();
  proto::BatchWriter b;
  ir::LayerNormBackward ln;  // op 44; its inputs do not exist: the output ids are checked first
  ln.grad = {1};
  ln.x = {1};
  ln.grad_x = {3};
  ln.grad_weight = {4};
  ln.grad_bias = {3};
  b.add_op(ln);
  ir::ScaledDotProductAttentionBackward sb;  // op 42
  sb.grad = sb.query = sb.key = sb.value = {1};
  sb.grad_query = sb.grad_key = sb.grad_value = {5};
  b.add_op(sb);
  ASSERT_TRUE(c->send_frame(b.take()));
  for (ir::TensorId id : {3, 4, 5}) {
    const Status st = read(*c, id);
    EXPECT_EQ(static_cast<int>(st.code()), refused) << "tensor " << id << ": " << st.message();
    EXPECT_NE(st.message().find("appears twice"), std::string::npos) << st.message();
  }
  // A live id among the outputs: the live tensor is untouched, the others carry the error.
  ir::Full full;
  full.out = {6};
  full.shape = {1};
  full.value = ir::Scalar(2.0);
  b.add_op(full);
  ln.grad_x = {7};
  ln.grad_weight = {6};
  ln.grad_bias = {8};
  b.add_op(ln);
  ASSERT_TRUE(c->send_frame(b.take()));
  EXPECT_TRUE(read(*c, 6).ok());
  for (ir::TensorId id : {7, 8}) {
    const Status st = read(*c, id);
    EXPECT_EQ(static_cast<int>(st.code()), refused) << st.message();
    EXPECT_NE(st.message().find("already in use"), std::string::npos) << st.message();
  }
}

}  // namespace
}  // namespace tw
