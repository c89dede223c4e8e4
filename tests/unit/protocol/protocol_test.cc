// The wire codec (src/protocol/messages.h, docs/protocol.md): every message round-trips, every
// truncated prefix of an encoded message is an error, and random or mutated bytes never crash a
// decoder.
#include <gtest/gtest.h>

#include <climits>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>

#include "ir/codec.h"
#include "ir/printer.h"
#include "net/framing.h"
#include "protocol/messages.h"
#include "support/doc_examples.h"
#include "support/frames.h"

namespace tw::protocol {
namespace {

// The payload bytes of a frame (tests/support/frames.h), checked against its declared size.
std::vector<uint8_t> flatten(const OutFrame& f) {
  std::vector<uint8_t> out = testing::flatten(f);
  EXPECT_EQ(out.size(), f.payload_size());
  return out;
}

Buffer to_buffer(const std::vector<uint8_t>& v) { return Buffer::copy_of(v.data(), v.size()); }
Buffer payload_of(const OutFrame& f) { return to_buffer(flatten(f)); }

Buffer pattern_bytes(size_t n, uint8_t seed) {
  Buffer b = Buffer::allocate(n);
  for (size_t i = 0; i < n; ++i) b.as<uint8_t>()[i] = static_cast<uint8_t>(seed + i * 131);
  return b;
}

// Gives every field of an op a distinctive non-default value.
struct Filler {
  uint64_t n = 0;
  size_t bytes = 40;
  void operator()(const char*, ir::In& v) { v.id = ++n; }
  void operator()(const char*, ir::Out& v) { v.id = 1000 + ++n; }
  void operator()(const char*, std::vector<ir::In>& v) { v = {{++n}, {++n}, {0}}; }
  void operator()(const char*, std::vector<int64_t>& v) {
    v = {static_cast<int64_t>(++n), -2, INT64_MIN};
  }
  void operator()(const char*, int64_t& v) { v = -static_cast<int64_t>(++n); }
  void operator()(const char*, uint64_t& v) { v = 0xFEDCBA9876543210ull + ++n; }
  void operator()(const char*, double& v) { v = 0.25 + static_cast<double>(++n); }
  void operator()(const char*, bool& v) { v = true; }
  void operator()(const char*, DType& v) { v = kBF16; }
  void operator()(const char*, ir::Scalar& v) {
    v = (++n % 2) ? ir::Scalar(-1.5) : ir::Scalar(int64_t{-(int64_t{1} << 62) - 3});
  }
  void operator()(const char*, ir::Bytes& v) {
    v.data = pattern_bytes(bytes, static_cast<uint8_t>(++n));
  }
  template <class E>
  requires std::is_enum_v<E>
  void operator()(const char*, E& v) { v = static_cast<E>(static_cast<uint8_t>(E::kCount) - 1); }
};

// One op of every kind in TW_OP_LIST, every field set; Bytes fields of `bytes` bytes.
std::vector<ir::Op> every_op(size_t bytes) {
  std::vector<ir::Op> ops;
  Filler f;
  f.bytes = bytes;
#define TW_MAKE_OP(Name, code, since) \
  {                                   \
    ir::Name o;                       \
    o.fields(f);                      \
    ops.push_back(o);                 \
  }
  TW_OP_LIST(TW_MAKE_OP)
#undef TW_MAKE_OP
  return ops;
}

TEST(Protocol, EveryOpListEntryIsCovered) {
  auto ops = every_op(8);
  // The code after the last is unknown to the decoder (the list and the decoder agree on its end).
  std::vector<uint8_t> unknown = ir::encode_op(ops.back());
  const uint16_t next = static_cast<uint16_t>(ops.size() + 1);
  unknown[0] = static_cast<uint8_t>(next);
  unknown[1] = static_cast<uint8_t>(next >> 8);
  EXPECT_FALSE(ir::decode_op(unknown.data(), unknown.size()).ok());
  for (size_t i = 0; i < ops.size(); ++i) {
    EXPECT_EQ(static_cast<int>(ir::op_code(ops[i])), static_cast<int>(i) + 1);
    auto d = ir::decode_op(ir::encode_op(ops[i]).data(), ir::encode_op(ops[i]).size());
    ASSERT_TRUE(d.ok()) << ir::op_code_name(ir::op_code(ops[i])) << ": " << d.status().message();
    EXPECT_TRUE(*d == ops[i]) << ir::op_code_name(ir::op_code(ops[i]));
  }
}

// ---------------------------------------------------------------- the messages used below

Hello sample_hello() {
  Hello h;
  h.min_version = 1;
  h.max_version = 4;
  h.device_index = 2;
  h.credential = "s3cret";
  return h;
}

Welcome sample_welcome() {
  Welcome w;
  w.version = 1;
  w.session_id = 0x0102030405060708ull;
  w.server_id = "a1b2c3";
  w.device_index = 1;
  w.devices = {{"cpu:0", "cpu", 8ull << 30, 0xFF}, {"cpu:1", "cpu", 1ull << 20, 0x3F}};
  w.limits = {1ull << 30, 8ull << 30, 4096, 64};
  return w;
}

TensorData sample_data(size_t numel) {
  std::vector<float> v(numel);
  for (size_t i = 0; i < numel; ++i) v[i] = static_cast<float>(i) * 0.5f - 3.0f;
  return TensorData::from<float>({static_cast<int64_t>(numel)}, v);
}

// A graph over every op (their ids as every_op gives them), with two inputs of different metas.
ir::Graph sample_graph(size_t op_bytes) {
  ir::Graph g;
  g.input_ids = {1001, 1002};
  g.inputs = {{{2, 3}, kF32}, {{}, kI64}};
  g.ops = every_op(op_bytes);
  g.output_ids = {7, 9};
  return g;
}

void expect_same_graph(const ir::Graph& a, const ir::Graph& b) {
  EXPECT_EQ(a.input_ids, b.input_ids);
  EXPECT_EQ(a.inputs, b.inputs);
  ASSERT_EQ(a.ops.size(), b.ops.size());
  for (size_t i = 0; i < a.ops.size(); ++i) EXPECT_TRUE(a.ops[i] == b.ops[i]) << "op " << i;
  EXPECT_EQ(a.output_ids, b.output_ids);
}

// Every message this codec has, encoded: (name, payload, is a client message).
struct Encoded {
  std::string name;
  std::vector<uint8_t> bytes;
  enum Kind { kHello, kBatch, kServer } kind;
};

std::vector<Encoded> every_message(size_t data_numel, size_t op_bytes) {
  std::vector<Encoded> out;
  OutFrame f;
  encode_hello(sample_hello(), f);
  out.push_back({"hello", flatten(f), Encoded::kHello});
  f = {};
  encode_welcome(sample_welcome(), f);
  out.push_back({"welcome", flatten(f), Encoded::kServer});
  f = {};
  encode_refuse({RefuseReason::kBadDeviceIndex, "device index 7 out of range"}, f);
  out.push_back({"refuse", flatten(f), Encoded::kServer});
  f = {};
  encode_session_error(data_loss("malformed batch"), f);
  out.push_back({"session error", flatten(f), Encoded::kServer});
  f = {};
  encode_read_result(42, sample_data(data_numel), f);
  out.push_back({"read result", flatten(f), Encoded::kServer});
  f = {};
  encode_read_result(43, Result<TensorData>(not_found("unknown tensor id %9")), f);
  out.push_back({"read error", flatten(f), Encoded::kServer});
  f = {};
  encode_sync_result(44, Status::OK(), f);
  out.push_back({"sync result", flatten(f), Encoded::kServer});
  f = {};
  // Before kMemoryStatsVersion: the trailers after the counters are optional (an older
  // server's message ends before them), so a prefix cut just before them decodes; the
  // declared-messages test covers the trailers.
  encode_stats_result(45, testing::sample_stats(), kMemoryStatsVersion - 1, f);
  out.push_back({"stats result", flatten(f), Encoded::kServer});
  f = {};
  encode_graph_result(49, ir::GraphId{3}, f);
  out.push_back({"graph result", flatten(f), Encoded::kServer});
  f = {};
  encode_graph_result(50, Result<ir::GraphId>(invalid_argument("graph op 1 (matmul): no")), f);
  out.push_back({"graph error", flatten(f), Encoded::kServer});
  BatchWriter b;
  for (const ir::Op& op : every_op(op_bytes)) b.add_op(op);
  b.add_read(46, 1001);
  b.add_sync(47);
  b.add_drop({1001, 1002, 3});
  b.add_stats(48);
  b.add_register_graph(51, sample_graph(op_bytes));
  b.add_run_graph(3, {1001, 1002}, {4, 5});
  b.set_packed_ids(true);
  b.add_drop({1001, 1002, 3});
  b.add_run_graph(3, {1001, 1002, ~uint64_t{0}}, {4, 5});
  out.push_back({"batch", flatten(b.take()), Encoded::kBatch});
  return out;
}

// ---------------------------------------------------------------- round trips

TEST(Protocol, HelloRoundTrip) {
  OutFrame f;
  encode_hello(sample_hello(), f);
  Buffer p = payload_of(f);
  auto kind = peek_client_msg(p);
  ASSERT_TRUE(kind.ok());
  EXPECT_EQ(*kind, ClientMsg::kHello);
  auto h = decode_hello(p);
  ASSERT_TRUE(h.ok()) << h.status().message();
  EXPECT_EQ(h->min_version, 1);
  EXPECT_EQ(h->max_version, 4);
  EXPECT_EQ(h->device_index, 2u);
  EXPECT_EQ(h->credential, "s3cret");
  // The layout docs/protocol.md gives: type, magic "TWIR", versions, index, credential.
  std::vector<uint8_t> bytes = flatten(f);
  ASSERT_EQ(bytes.size(), 1u + 4 + 2 + 2 + 4 + 4 + 6);
  EXPECT_EQ(bytes[0], 1);
  EXPECT_EQ(std::string(bytes.begin() + 1, bytes.begin() + 5), "TWIR");
}

TEST(Protocol, WelcomeRoundTrip) {
  OutFrame f;
  encode_welcome(sample_welcome(), f);
  auto m = decode_server_message(payload_of(f));
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_EQ(m->kind, ServerMsg::kWelcome);
  const Welcome& w = m->welcome;
  Welcome e = sample_welcome();
  EXPECT_EQ(w.version, e.version);
  EXPECT_EQ(w.session_id, e.session_id);
  EXPECT_EQ(w.server_id, e.server_id);
  EXPECT_EQ(w.device_index, e.device_index);
  ASSERT_EQ(w.devices.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(w.devices[i].name, e.devices[i].name);
    EXPECT_EQ(w.devices[i].backend, e.devices[i].backend);
    EXPECT_EQ(w.devices[i].memory_bytes, e.devices[i].memory_bytes);
    EXPECT_EQ(w.devices[i].dtype_mask, e.devices[i].dtype_mask);
  }
  EXPECT_EQ(w.limits.max_frame_bytes, e.limits.max_frame_bytes);
  EXPECT_EQ(w.limits.session_memory_bytes, e.limits.session_memory_bytes);
  EXPECT_EQ(w.limits.max_sessions, e.limits.max_sessions);
  EXPECT_EQ(w.limits.session_queue_depth, e.limits.session_queue_depth);
}

TEST(Protocol, RefuseRoundTripEveryReason) {
  for (uint8_t r = 1; r <= static_cast<uint8_t>(RefuseReason::kCannotHost); ++r) {
    OutFrame f;
    encode_refuse({static_cast<RefuseReason>(r), "why " + std::to_string(r)}, f);
    auto m = decode_server_message(payload_of(f));
    ASSERT_TRUE(m.ok()) << m.status().message();
    ASSERT_EQ(m->kind, ServerMsg::kRefuse);
    EXPECT_EQ(m->refuse.reason, static_cast<RefuseReason>(r));
    EXPECT_EQ(m->refuse.message, "why " + std::to_string(r));
    EXPECT_STRNE(refuse_reason_name(m->refuse.reason), "refused");
  }
}

TEST(Protocol, SessionErrorRoundTripEveryCode) {
  for (uint8_t c = 0; c <= static_cast<uint8_t>(StatusCode::kInternal); ++c) {
    Status s =
        c == 0 ? Status::OK() : Status(static_cast<StatusCode>(c), "code " + std::to_string(c));
    OutFrame f;
    encode_session_error(s, f);
    auto m = decode_server_message(payload_of(f));
    ASSERT_TRUE(m.ok()) << m.status().message();
    ASSERT_EQ(m->kind, ServerMsg::kSessionError);
    EXPECT_EQ(m->status().code(), s.code());
    if (c) {
      EXPECT_EQ(m->status().message(), s.message());
    }
  }
}

TEST(Protocol, ReadResultRoundTrip) {
  // Small payloads are copied into the head; large ones travel as gather segments.
  for (size_t numel : {size_t{0}, size_t{5}, size_t{100000}}) {
    TensorData d = sample_data(numel);
    OutFrame f;
    encode_read_result(77, d, f);
    EXPECT_EQ(f.segments.size(), numel * 4 >= WireWriter::kMinSegmentBytes ? 1u : 0u);
    auto m = decode_server_message(payload_of(f));
    ASSERT_TRUE(m.ok()) << m.status().message();
    ASSERT_EQ(m->kind, ServerMsg::kReadResult);
    EXPECT_EQ(m->request_id(), 77u);
    ASSERT_TRUE(m->status().ok());
    EXPECT_EQ(m->read.result.value().meta.dtype, kF32);
    EXPECT_EQ(m->read.result.value().meta.shape, Shape{static_cast<int64_t>(numel)});
    ASSERT_EQ(m->read.result.value().bytes.size(), numel * 4);
    if (numel) {
      EXPECT_EQ(std::memcmp(m->read.result.value().bytes.data(), d.bytes.data(), numel * 4), 0);
    }
  }
  OutFrame f;
  encode_read_result(78, Result<TensorData>(not_found("unknown tensor id %9")), f);
  auto m = decode_server_message(payload_of(f));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->request_id(), 78u);
  EXPECT_EQ(m->status().code(), StatusCode::kNotFound);
  EXPECT_EQ(m->status().message(), "unknown tensor id %9");
}

// The client decodes every reply into one reused ServerMessage: whatever an earlier message
// left in it must not show through a later one. Every server message, decoded in turn into one
// message (after each of the others), reads the same as decoded fresh.
TEST(Protocol, DecodingIntoAReusedMessageLeavesNothingBehind) {
  std::vector<std::pair<std::string, Buffer>> replies;
  for (const Encoded& e : every_message(5, 64)) {
    if (e.kind == Encoded::kServer)
      replies.push_back({e.name, Buffer::copy_of(e.bytes.data(), e.bytes.size())});
  }
  // Two messages are the same when they encode the same (every field of the kind's member).
  auto same = [](const ServerMessage& a, const ServerMessage& b) {
    OutFrame fa, fb;
    encode_server_message(a, fa);
    encode_server_message(b, fb);
    return testing::flatten(fa) == testing::flatten(fb);
  };
  for (const auto& [before_name, before] : replies) {
    for (const auto& [name, payload] : replies) {
      ServerMessage reused;
      ASSERT_TRUE(decode_server_message(before, reused).ok()) << before_name;
      ASSERT_TRUE(decode_server_message(payload, reused).ok()) << name;
      auto fresh = decode_server_message(payload);
      ASSERT_TRUE(fresh.ok()) << name;
      EXPECT_TRUE(same(reused, *fresh)) << name << " decoded after " << before_name;
    }
  }
}

TEST(Protocol, ReadResultDataOffsetPointsAtTheTensorBytes) {
  for (size_t numel : {size_t{1}, size_t{100000}}) {
    for (Shape shape :
         {Shape{static_cast<int64_t>(numel)}, Shape{1, static_cast<int64_t>(numel), 1}}) {
      TensorData d = sample_data(numel);
      d.meta.shape = shape;
      OutFrame f;
      encode_read_result(9, d, f);
      Buffer p = payload_of(f);
      const auto* b = reinterpret_cast<const uint8_t*>(p.data());
      size_t at = read_result_data_offset(b, p.size());
      ASSERT_EQ(at + numel * 4, p.size());
      EXPECT_EQ(std::memcmp(b + at, d.bytes.data(), numel * 4), 0);
      // Too few bytes to tell (the rank incomplete): asks for more, never guesses.
      EXPECT_EQ(read_result_data_offset(b, 14), kNeedMoreBytes);
    }
  }
  OutFrame refused;
  encode_read_result(9, Result<TensorData>(not_found("gone")), refused);
  Buffer p = payload_of(refused);
  EXPECT_EQ(read_result_data_offset(reinterpret_cast<const uint8_t*>(p.data()), p.size()), 0u);
  OutFrame sync;
  encode_sync_result(5, Status::OK(), sync);
  p = payload_of(sync);
  EXPECT_EQ(read_result_data_offset(reinterpret_cast<const uint8_t*>(p.data()), p.size()), 0u);
}

TEST(Protocol, SyncAndStatsResultRoundTrip) {
  for (const Status& s : {Status::OK(), resource_exhausted("quota")}) {
    OutFrame f;
    encode_sync_result(5, s, f);
    auto m = decode_server_message(payload_of(f));
    ASSERT_TRUE(m.ok());
    ASSERT_EQ(m->kind, ServerMsg::kSyncResult);
    EXPECT_EQ(m->request_id(), 5u);
    EXPECT_EQ(m->status().code(), s.code());
  }
  OutFrame f;
  encode_stats_result(6, testing::sample_stats(), kProtocolVersion, f);
  auto m = decode_server_message(payload_of(f));
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_EQ(m->kind, ServerMsg::kStatsResult);
  EXPECT_EQ(m->request_id(), 6u);
  ServerStats e = testing::sample_stats();
  const ServerStats& s = m->stats.stats;
  EXPECT_EQ(s.sessions, e.sessions);
  EXPECT_EQ(s.bytes_held, e.bytes_held);
  EXPECT_EQ(s.session_bytes_held, e.session_bytes_held);
  EXPECT_EQ(s.ops_executed, e.ops_executed);
  EXPECT_EQ(s.frames_in, e.frames_in);
  EXPECT_EQ(s.frames_out, e.frames_out);
  EXPECT_EQ(s.bytes_in, e.bytes_in);
  EXPECT_EQ(s.bytes_out, e.bytes_out);
  EXPECT_EQ(s.sessions_opened, e.sessions_opened);
  EXPECT_EQ(s.per_session_bytes, e.per_session_bytes);
}

TEST(Protocol, BatchRoundTripEveryTaskAndEveryOp) {
  // 20 KiB Bytes fields go out as gather segments; decoding them back must be exact.
  for (size_t op_bytes : {size_t{3}, size_t{20000}}) {
    std::vector<ir::Op> ops = every_op(op_bytes);
    BatchWriter b;
    EXPECT_TRUE(b.empty());
    for (const ir::Op& op : ops) b.add_op(op);
    b.add_read(46, 1001);
    b.add_sync(47);
    b.add_drop({1001, 1002, 3});
    b.add_drop({});
    b.add_stats(48);
    b.add_register_graph(49, sample_graph(op_bytes));
    b.add_run_graph(3, {1001, 1002}, {4, 5});
    b.add_run_graph(4, {}, {});
    EXPECT_EQ(b.task_count(), ops.size() + 8);
    uint64_t size = b.payload_size();
    OutFrame f = b.take();
    EXPECT_EQ(f.payload_size(), size);
    EXPECT_TRUE(b.empty());  // take() resets the writer
    if (op_bytes >= WireWriter::kMinSegmentBytes) {
      EXPECT_FALSE(f.segments.empty());
    }
    Buffer p = payload_of(f);
    auto kind = peek_client_msg(p);
    ASSERT_TRUE(kind.ok());
    EXPECT_EQ(*kind, ClientMsg::kBatch);
    std::vector<Task> tasks;
    Status st = decode_batch(p, tasks);
    ASSERT_TRUE(st.ok()) << st.message();
    ASSERT_EQ(tasks.size(), ops.size() + 8);
    for (size_t i = 0; i < ops.size(); ++i) {
      ASSERT_EQ(task_kind(tasks[i]), TaskKind::kOp);
      EXPECT_TRUE(std::get<OpTask>(tasks[i]).op == ops[i]) << ir::op_code_name(ir::op_code(ops[i]));
    }
    const Task* t = &tasks[ops.size()];
    ASSERT_EQ(task_kind(t[0]), TaskKind::kRead);
    EXPECT_EQ(std::get<ReadTask>(t[0]).request_id, 46u);
    EXPECT_EQ(std::get<ReadTask>(t[0]).id, 1001u);
    ASSERT_EQ(task_kind(t[1]), TaskKind::kSync);
    EXPECT_EQ(std::get<SyncTask>(t[1]).request_id, 47u);
    ASSERT_EQ(task_kind(t[2]), TaskKind::kDrop);
    EXPECT_EQ(std::get<DropTask>(t[2]).ids, (std::vector<ir::TensorId>{1001, 1002, 3}));
    ASSERT_EQ(task_kind(t[3]), TaskKind::kDrop);
    EXPECT_TRUE(std::get<DropTask>(t[3]).ids.empty());
    ASSERT_EQ(task_kind(t[4]), TaskKind::kStats);
    EXPECT_EQ(std::get<StatsTask>(t[4]).request_id, 48u);
    ASSERT_EQ(task_kind(t[5]), TaskKind::kRegisterGraph);
    EXPECT_EQ(std::get<RegisterGraphTask>(t[5]).request_id, 49u);
    expect_same_graph(std::get<RegisterGraphTask>(t[5]).graph, sample_graph(op_bytes));
    ASSERT_EQ(task_kind(t[6]), TaskKind::kRunGraph);
    EXPECT_EQ(std::get<RunGraphTask>(t[6]).graph_id, 3u);
    EXPECT_EQ(std::get<RunGraphTask>(t[6]).inputs, (std::vector<ir::TensorId>{1001, 1002}));
    EXPECT_EQ(std::get<RunGraphTask>(t[6]).outputs, (std::vector<ir::TensorId>{4, 5}));
    ASSERT_EQ(task_kind(t[7]), TaskKind::kRunGraph);
    EXPECT_TRUE(std::get<RunGraphTask>(t[7]).inputs.empty() &&
                std::get<RunGraphTask>(t[7]).outputs.empty());
  }
}

// Every field of a task, as text: two tasks that print the same decoded the same. Its kind, each
// wire field (TW_FIELDS) and the members that are not on the wire.
struct FieldPrinter {
  std::ostringstream& o;
  void print(bool v) { o << v; }
  void print(uint32_t v) { o << v; }
  void print(uint64_t v) { o << v; }
  void print(const std::string& v) { o << v; }
  void print(CollectiveKind v) { o << static_cast<int>(v); }
  void print(ReduceKind v) { o << static_cast<int>(v); }
  void print(const TensorMeta& m) { o << meta_str(m); }
  void print(const std::vector<ir::TensorId>& v) {
    o << "[";
    for (ir::TensorId id : v) o << id << ",";
    o << "]";
  }
  void print(const ir::Op& op) { o << ir::to_string(op); }
  void print(const ir::Graph& g) {
    o << "in=";
    print(g.input_ids);
    for (const TensorMeta& m : g.inputs) o << meta_str(m);
    o << " ops=";
    for (const ir::Op& op : g.ops) o << ir::to_string(op) << ";";
    o << " out=";
    print(g.output_ids);
  }
  template <class T>
  void operator()(const char* name, const T& v) {
    o << " " << name << "=";
    print(v);
  }
};
std::string describe(const Task& t) {
  std::ostringstream o;
  o << static_cast<int>(task_kind(t));
  std::visit([&](const auto& task) { task.fields(FieldPrinter{o}); }, t);
  if (const auto* d = std::get_if<DropTask>(&t)) o << " packed=" << d->packed_ids;
  if (const auto* r = std::get_if<RunGraphTask>(&t)) o << " packed=" << r->packed_ids;
  if (const auto* m = std::get_if<MoveLocalTask>(&t)) {
    o << " url=" << m->source.url << " fingerprint=" << m->source.fingerprint;
  }
  if (const auto* r = std::get_if<ReadToSegmentTask>(&t)) o << " sequence=" << r->range.sequence;
  return o.str();
}

// A server decodes window after window into the same Tasks (BatchDecoder::next_reusing, each
// cleared by clear_task first): every task kind decoded into a Task that held any other kind
// reads as decoded fresh. (Without clear_task's reset a drop after a packed drop stays packed,
// a read after an op keeps the op, ...)
TEST(Protocol, DecodingIntoReusedTasksReadsAsDecodedFresh) {
  CollectiveSpec coll;
  coll.kind = CollectiveKind::kBroadcast;
  coll.rank = 1;
  coll.size = 2;
  coll.group = "g";
  coll.store_url = "tcp://127.0.0.1:1";
  coll.timeout_ms = 10;
  coll.input = 5;
  coll.output = 6;
  coll.out_meta = {{3}, kF32};
  const TensorSource source{42, 7, "cap", "tls://10.0.0.2:5000", "AB:CD"};
  std::vector<std::function<void(BatchWriter&)>> adds = {
      [](BatchWriter& b) { b.add_op(every_op(3).front()); },
      [](BatchWriter& b) { b.add_read(46, 1001); },
      [](BatchWriter& b) { b.add_sync(47); },
      [](BatchWriter& b) {
        b.add_drop({1001, 1002, 3});
      },
      [](BatchWriter& b) {
        b.set_packed_ids(true);
        b.add_drop({7, 9});
        b.set_packed_ids(false);
      },
      [](BatchWriter& b) { b.add_stats(48); },
      [](BatchWriter& b) { b.add_register_graph(49, sample_graph(3)); },
      [](BatchWriter& b) {
        b.add_run_graph(3, {1001, 1002}, {4, 5});
      },
      [](BatchWriter& b) { b.add_export(50, 8); },
      [&](BatchWriter& b) {
        b.add_move(TaskKind::kImport, 11, {{2, 5}, kI64}, source);
      },
      [&](BatchWriter& b) {
        b.add_move(TaskKind::kMoveLocal, 12, {{}, kF32}, source);
      },
      [&](BatchWriter& b) { b.add_collective(coll); },
      [](BatchWriter& b) {
        b.add_from_segment(13, {{4}, kF32}, {7, 64, 16, 9});
      },
      [](BatchWriter& b) {
        b.add_read_to_segment(51, 13, {7, 128, 1 << 20, 0});
      },
      [](BatchWriter& b) {
        b.add(UploadByHashTask{52, 14, {{4}, kF32}, 1, 2});
      },
      [](BatchWriter& b) { b.add(CompressRepliesTask{true}); },
      [](BatchWriter& b) { b.add_register_graph_as(9, sample_graph(3)); },
  };
  const size_t n = adds.size();
  std::vector<Task> reused;
  size_t held = 0;
  for (size_t shift = 0; shift < n; ++shift) {
    BatchWriter b;
    for (size_t i = 0; i < n; ++i) adds[(i + shift) % n](b);
    const Buffer p = payload_of(b.take());
    std::vector<Task> fresh;
    ASSERT_TRUE(decode_batch(p, fresh).ok());
    ASSERT_EQ(fresh.size(), n);
    for (size_t i = 0; i < held; ++i) clear_task(reused[i]);
    BatchDecoder d(p);
    held = d.next_reusing(reused, n);
    ASSERT_TRUE(d.status().ok()) << d.status().message();
    ASSERT_EQ(held, n);
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(describe(reused[i]), describe(fresh[i])) << "shift " << shift << ", task " << i;
    }
  }
  // A window smaller than the batch, and a vector grown past its size: the same tasks.
  BatchWriter b;
  for (auto& add : adds) add(b);
  const Buffer p = payload_of(b.take());
  std::vector<Task> fresh, windowed(3);
  ASSERT_TRUE(decode_batch(p, fresh).ok());
  BatchDecoder d(p);
  for (size_t at = 0; at < n;) {
    const size_t got = d.next_reusing(windowed, 4);
    ASSERT_GT(got, 0u);
    for (size_t i = 0; i < got; ++i) EXPECT_EQ(describe(windowed[i]), describe(fresh[at + i]));
    for (size_t i = 0; i < got; ++i) clear_task(windowed[i]);
    at += got;
  }
  EXPECT_EQ(d.next_reusing(windowed, 4), 0u);
}

// A reused Task's id lists keep their capacity, also when the next task decoded into it is of
// another kind that has id lists (a drop, then a graph run), and a cleared one too.
TEST(Protocol, ReusedTasksKeepTheirIdListsCapacity) {
  std::vector<ir::TensorId> ids(200);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = 1000 + i;
  BatchWriter first, second;
  first.add_drop(ids);
  second.add_run_graph(3, {1, 2}, {});
  std::vector<Task> reused;
  BatchDecoder d1(payload_of(first.take()));
  ASSERT_EQ(d1.next_reusing(reused, 1), 1u);
  const ir::TensorId* storage = std::get<DropTask>(reused[0]).ids.data();
  clear_task(reused[0]);
  EXPECT_EQ(std::get<DropTask>(reused[0]).ids.data(), storage);
  EXPECT_TRUE(std::get<DropTask>(reused[0]).ids.empty());
  BatchDecoder d2(payload_of(second.take()));
  ASSERT_EQ(d2.next_reusing(reused, 1), 1u);
  const auto& run = std::get<RunGraphTask>(reused[0]);
  EXPECT_EQ(run.inputs, (std::vector<ir::TensorId>{1, 2}));
  EXPECT_EQ(run.inputs.data(), storage) << "the drop's list became the run's inputs";
}

// A task's size on the wire (BatchWriter::task_bytes) is what add() writes, plain and packed,
// for every kind it is asked of (an op's and a graph's encoding is their size).
TEST(Protocol, TaskBytesIsWhatAddWrites) {
  CollectiveSpec coll;
  coll.group = "group";
  coll.store_url = "tcp://127.0.0.1:1";
  coll.fingerprint = "AB";
  coll.out_meta = {{3, 4}, kF32};
  const TensorSource source{42, 7, "cap", "tls://10.0.0.2:5000", "AB:CD"};
  const TensorMeta meta{{2, 5}, kI64};
  const std::vector<Task> tasks = {
      ReadTask{46, 1001},
      SyncTask{47},
      DropTask{{1001, 1002, 3, 1ull << 60, 0}},
      DropTask{},
      StatsTask{48},
      RunGraphTask{3, {1001, 1002, 999999999}, {4, 5}},
      ExportTask{50, 8},
      ImportTask{11, meta, source},
      MoveLocalTask{12, meta, source},
      CollectiveTask{coll},
      FromSegmentTask{13, meta, {7, 64, 16, 9}},
      ReadToSegmentTask{51, 13, {7, 128, 1 << 20, 0}},
      ExportAsTask{14, std::string(kTicketBytes, 't')},
  };
  for (bool packed : {false, true}) {
    BatchWriter b;
    b.set_packed_ids(packed);
    for (const Task& t : tasks) {
      std::visit(
          [&](const auto& task) {
            using T = std::decay_t<decltype(task)>;
            if constexpr (std::is_same_v<T, OpTask> || std::is_same_v<T, RegisterGraphTask> ||
                          std::is_same_v<T, RegisterGraphAsTask>) {
              ADD_FAILURE() << "no size for an op or a graph";
            } else {
              const uint64_t before = b.payload_size(), want = b.task_bytes(task);
              b.add(task);
              EXPECT_EQ(b.payload_size() - before, want) << describe(t) << " packed " << packed;
            }
          },
          t);
    }
  }
}

// Protocol 4: drops and graph runs with packed id lists decode into the plain tasks, any u64 id
// (differences wrap), about one byte per id for a step's consecutive ids.
TEST(Protocol, PackedIdListsRoundTripAndStaySmall) {
  const std::vector<ir::TensorId> edge = {0, ~uint64_t{0}, 1, uint64_t{1} << 63, 5, 4, 4};
  std::vector<ir::TensorId> step;
  for (ir::TensorId id = 100000; id < 100026; ++id) step.push_back(id);
  BatchWriter plain, packed;
  packed.set_packed_ids(true);
  for (BatchWriter* b : {&plain, &packed}) {
    b->add_drop(edge);
    b->add_drop({});
    b->add_run_graph(7, step, edge);
    b->add_drop(step);
  }
  const uint64_t plain_bytes = plain.payload_size(), packed_bytes = packed.payload_size();
  EXPECT_LT(packed_bytes * 3, plain_bytes) << packed_bytes << " vs " << plain_bytes;
  Buffer p = payload_of(packed.take());
  std::vector<Task> tasks;
  Status st = decode_batch(p, tasks);
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_EQ(tasks.size(), 4u);
  ASSERT_EQ(task_kind(tasks[0]), TaskKind::kDrop);
  EXPECT_TRUE(std::get<DropTask>(tasks[0]).packed_ids);
  EXPECT_EQ(std::get<DropTask>(tasks[0]).ids, edge);
  ASSERT_EQ(task_kind(tasks[1]), TaskKind::kDrop);
  EXPECT_TRUE(std::get<DropTask>(tasks[1]).ids.empty());
  ASSERT_EQ(task_kind(tasks[2]), TaskKind::kRunGraph);
  EXPECT_EQ(std::get<RunGraphTask>(tasks[2]).graph_id, 7u);
  EXPECT_EQ(std::get<RunGraphTask>(tasks[2]).inputs, step);
  EXPECT_EQ(std::get<RunGraphTask>(tasks[2]).outputs, edge);
  ASSERT_EQ(task_kind(tasks[3]), TaskKind::kDrop);
  EXPECT_EQ(std::get<DropTask>(tasks[3]).ids, step);
  // A 26-id run of consecutive ids: a byte each after the first.
  BatchWriter one;
  one.set_packed_ids(true);
  one.add_drop(step);
  EXPECT_LE(one.payload_size(), BatchWriter::kEmptyBytes + 1 + 1 + 3 + 25);
  // docs/protocol.md §4.2's example: 1001, 1002, 3.
  BatchWriter doc;
  doc.set_packed_ids(true);
  doc.add_drop({1001, 1002, 3});
  const std::vector<uint8_t> got = flatten(doc.take());
  const std::vector<uint8_t> want = {13, 0x03, 0xd2, 0x0f, 0x02, 0xcd, 0x0f};
  ASSERT_GE(got.size(), want.size());
  EXPECT_EQ(std::vector<uint8_t>(got.end() - static_cast<ptrdiff_t>(want.size()), got.end()), want);
  // Malformed: an overlong varint, one past 64 bits, a count past the bytes left, a short run.
  for (const std::vector<uint8_t>& bad :
       {std::vector<uint8_t>{13, 1, 0x80, 0x00},
        std::vector<uint8_t>{13, 1, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x02},
        std::vector<uint8_t>{13, 0xFF, 0xFF, 0x03, 2}, std::vector<uint8_t>{14, 1}}) {
    std::vector<uint8_t> frame = {2, 1, 0, 0, 0};  // Batch, one task
    frame.insert(frame.end(), bad.begin(), bad.end());
    std::vector<Task> none;
    EXPECT_FALSE(decode_batch(Buffer::copy_of(frame.data(), frame.size()), none).ok());
  }
}

TEST(Protocol, GraphResultRoundTrip) {
  OutFrame f;
  encode_graph_result(9, ir::GraphId{77}, f);
  auto m = decode_server_message(payload_of(f));
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->kind, ServerMsg::kGraphResult);
  EXPECT_EQ(m->request_id(), 9u);
  EXPECT_TRUE(m->status().ok());
  EXPECT_EQ(m->graph.result.value(), 77u);
  f = {};
  encode_graph_result(10, Result<ir::GraphId>(resource_exhausted("over --max-graph-ops")), f);
  m = decode_server_message(payload_of(f));
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->request_id(), 10u);
  EXPECT_EQ(m->status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(m->status().message(), "over --max-graph-ops");
  // A refusal carries no id on the wire (its value is not to be read).
  EXPECT_FALSE(m->graph.result.ok());
}

TEST(Protocol, HugeGraphCountsFailWithoutAllocating) {
  // RegisterGraph claiming 2^32-1 inputs, then one claiming that many ops after no inputs.
  std::vector<uint8_t> inputs = {2, 1, 0, 0, 0, 6, 1, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF};
  std::vector<Task> tasks;
  Status st = decode_batch(to_buffer(inputs), tasks);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st.message();
  std::vector<uint8_t> ops = {2, 1, 0, 0, 0, 6, 1, 0,    0,    0,    0,
                              0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF};
  st = decode_batch(to_buffer(ops), tasks);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st.message();
  EXPECT_TRUE(tasks.empty());
}

TEST(Protocol, RemoveLastTaskRestoresTheBatch) {
  BatchWriter b;
  b.add_sync(1);
  uint64_t size = b.payload_size();
  std::vector<uint8_t> expect;
  {
    BatchWriter ref;
    ref.add_sync(1);
    expect = flatten(ref.take());
  }
  // A large upload (a gather segment) taken back out.
  ir::FromHost up;
  up.out = {9};
  up.shape = {40000};
  up.dtype = kU8;
  up.data.data = pattern_bytes(40000, 3);
  b.add_op(up);
  EXPECT_EQ(b.task_count(), 2u);
  b.remove_last();
  EXPECT_EQ(b.task_count(), 1u);
  EXPECT_EQ(b.payload_size(), size);
  b.remove_last();  // only once: a second call changes nothing
  EXPECT_EQ(b.task_count(), 1u);
  OutFrame f = b.take();
  EXPECT_TRUE(f.segments.empty());
  EXPECT_EQ(flatten(f), expect);
  b.remove_last();  // nothing to remove in a fresh batch
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(b.payload_size(), BatchWriter::kEmptyBytes);
}

TEST(Protocol, MalformedTaskKeepsTheTasksBeforeIt) {
  BatchWriter b;
  b.add_sync(1);
  b.add_sync(2);
  std::vector<uint8_t> bytes = flatten(b.take());
  bytes[1] = 3;         // claims a third task ...
  bytes.push_back(99);  // ... of an unknown kind
  std::vector<Task> tasks;
  Status st = decode_batch(to_buffer(bytes), tasks);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("batch task 2 of 3"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("unknown task kind 99"), std::string::npos) << st.message();
  EXPECT_EQ(tasks.size(), 2u);
}

TEST(Protocol, FrameBuffersGatherHeadAndSegments) {
  TensorData d = sample_data(50000);
  OutFrame f;
  encode_read_result(1, d, f);
  ASSERT_EQ(f.segments.size(), 1u);
  uint8_t header[4];
  std::vector<asio::const_buffer> bufs;
  net::frame_buffers(f, header, bufs);
  EXPECT_EQ(net::frame_length(header), f.payload_size());
  std::vector<uint8_t> gathered;
  for (size_t i = 1; i < bufs.size(); ++i) {
    const uint8_t* p = static_cast<const uint8_t*>(bufs[i].data());
    gathered.insert(gathered.end(), p, p + bufs[i].size());
  }
  EXPECT_EQ(gathered, flatten(f));
  EXPECT_EQ(static_cast<const uint8_t*>(bufs[0].data()), header);
}

// ---------------------------------------------------------------- malformed input

Status decode_any(const Buffer& p, Encoded::Kind kind) {
  switch (kind) {
    case Encoded::kHello: return decode_hello(p).status();
    case Encoded::kBatch: {
      std::vector<Task> tasks;
      return decode_batch(p, tasks);
    }
    case Encoded::kServer: return decode_server_message(p).status();
  }
  return internal_error("unreachable");
}

TEST(Protocol, EveryTruncatedPrefixIsAnError) {
  for (const Encoded& e : every_message(20, 40)) {
    Buffer whole = to_buffer(e.bytes);
    ASSERT_TRUE(decode_any(whole, e.kind).ok()) << e.name;
    for (size_t k = 0; k < e.bytes.size(); ++k) {
      // A slice shares the bytes, so no prefix is copied; a fresh copy would do the same.
      Status st = decode_any(whole.slice(0, k), e.kind);
      EXPECT_FALSE(st.ok()) << e.name << ": prefix of " << k << " of " << e.bytes.size()
                            << " bytes decoded";
      if (!st.ok()) {
        EXPECT_EQ(st.code(), StatusCode::kDataLoss)
            << e.name << " prefix " << k << ": " << st.message();
      }
    }
    // And one byte too many is an error too.
    std::vector<uint8_t> longer = e.bytes;
    longer.push_back(0);
    EXPECT_FALSE(decode_any(to_buffer(longer), e.kind).ok()) << e.name << " with a trailing byte";
  }
}

TEST(Protocol, HugeCountsFailWithoutAllocating) {
  // A batch claiming 4 billion tasks, a drop of 4 billion ids, a read result of rank 2^32-1:
  // each must fail at once (the decoder checks counts against the bytes left).
  std::vector<uint8_t> batch = {2, 0xFF, 0xFF, 0xFF, 0xFF, 4, 0xFF, 0xFF, 0xFF, 0xFF};
  std::vector<Task> tasks;
  EXPECT_FALSE(decode_batch(to_buffer(batch), tasks).ok());
  std::vector<uint8_t> drop = {2, 1, 0, 0, 0, 4, 0xFF, 0xFF, 0xFF, 0xFF, 1, 2, 3};
  EXPECT_FALSE(decode_batch(to_buffer(drop), tasks).ok());
  std::vector<uint8_t> read = {3, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF};
  EXPECT_FALSE(decode_server_message(to_buffer(read)).ok());
  // A read result whose byte count disagrees with its shape.
  OutFrame f;
  encode_read_result(1, sample_data(4), f);
  std::vector<uint8_t> bytes = flatten(f);
  bytes[1 + 8 + 1 + 1 + 4 + 8] = 15;  // byte count (after id, status, dtype, rank, dim) 16 -> 15
  EXPECT_FALSE(decode_server_message(to_buffer(bytes)).ok());
}

TEST(Protocol, RandomBytesNeverCrashTheDecoders) {
  std::mt19937_64 rng(20240601);
  std::vector<Encoded> valid = every_message(6, 24);
  int decoded_ok = 0;
  for (int i = 0; i < 5000; ++i) {
    std::vector<uint8_t> bytes;
    if (i % 2 == 0) {
      // Pure noise, its first byte often a real message type so that decoding goes deeper.
      bytes.resize(rng() % 300);
      for (auto& b : bytes) b = static_cast<uint8_t>(rng());
      if (!bytes.empty() && i % 4 == 0) bytes[0] = static_cast<uint8_t>(1 + rng() % 6);
    } else {
      // A valid message with a few bytes changed, cut or extended.
      bytes = valid[rng() % valid.size()].bytes;
      int edits = 1 + static_cast<int>(rng() % 4);
      for (int k = 0; k < edits && !bytes.empty(); ++k) {
        switch (rng() % 4) {
          case 0: bytes[rng() % bytes.size()] = static_cast<uint8_t>(rng()); break;
          case 1: bytes[rng() % bytes.size()] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;
          case 2: bytes.resize(rng() % bytes.size()); break;
          case 3:
            bytes.insert(bytes.begin() + static_cast<ptrdiff_t>(rng() % bytes.size()),
                         static_cast<uint8_t>(rng()));
            break;
        }
      }
    }
    Buffer p = to_buffer(bytes);
    (void)peek_client_msg(p);
    decoded_ok += decode_hello(p).ok();
    std::vector<Task> tasks;
    decoded_ok += decode_batch(p, tasks).ok();
    decoded_ok += decode_server_message(p).ok();
    decoded_ok += ir::decode_op(bytes.data(), bytes.size()).ok();
  }
  // Mutations leave some messages valid; pure noise almost never is. Either way, no crash.
  EXPECT_LT(decoded_ok, 5000 * 4);
}

// ---------------------------------------------------------------- docs/protocol.md stays true

#ifdef TW_DOCS_DIR
std::string read_doc() { return testing::read_protocol_doc(TW_DOCS_DIR); }
using testing::doc_example;
using testing::framed;

TEST(ProtocolDoc, WorkedExamplesMatchTheEncoder) {
  std::string doc = read_doc();
  ASSERT_FALSE(doc.empty()) << "cannot read " TW_DOCS_DIR "/protocol.md";
  OutFrame hello;
  encode_hello({1, 1, 0, ""}, hello);
  EXPECT_EQ(doc_example(doc, "hello"), framed(hello));

  Welcome w;
  w.version = 1;
  w.session_id = 1;
  w.server_id = "9f3a";
  w.device_index = 0;
  w.devices = {{"cpu:0", "cpu", 8ull << 30, 0xFF}};
  w.limits = {1ull << 30, 8ull << 30, 4096, 64};
  OutFrame welcome;
  encode_welcome(w, welcome);
  EXPECT_EQ(doc_example(doc, "welcome"), framed(welcome));

  BatchWriter b;
  ir::Full full;
  full.out = {1};
  full.shape = {2};
  full.dtype = kF32;
  full.value = ir::Scalar(1.5);
  b.add_op(full);
  ir::BinaryScalar mul;
  mul.kind = ir::BinaryKind::kMul;
  mul.a = {1};
  mul.s = ir::Scalar(int64_t{3});
  mul.out = {2};
  b.add_op(mul);
  b.add_read(7, 2);
  b.add_drop({1});
  EXPECT_EQ(doc_example(doc, "batch"), framed(b.take()));

  float v[2] = {4.5f, 4.5f};
  TensorData d;
  d.meta = {{2}, kF32};
  d.bytes = Buffer::copy_of(v, sizeof v);
  OutFrame read;
  encode_read_result(7, d, read);
  EXPECT_EQ(doc_example(doc, "read_result"), framed(read));

  ir::Graph g;
  g.input_ids = {1};
  g.inputs = {{{2}, kF32}};
  ir::BinaryScalar triple = mul;
  triple.a = {1};
  triple.out = {2};
  g.ops = {triple};
  g.output_ids = {2};
  b.add_register_graph(8, g);
  b.add_run_graph(1, {1}, {3});
  EXPECT_EQ(doc_example(doc, "graph_batch"), framed(b.take()));
  OutFrame graph;
  encode_graph_result(8, ir::GraphId{1}, graph);
  EXPECT_EQ(doc_example(doc, "graph_result"), framed(graph));
}

// Names each field's wire type as the doc's op table does.
struct FieldTypes {
  std::string out;
  void add(const char* f, const char* t) {
    out += (out.empty() ? "" : ", ") + std::string(f) + ": " + t;
  }
  void operator()(const char* f, const ir::In&) { add(f, "In"); }
  void operator()(const char* f, const ir::Out&) { add(f, "Out"); }
  void operator()(const char* f, const std::vector<ir::In>&) { add(f, "In[]"); }
  void operator()(const char* f, const std::vector<int64_t>&) { add(f, "i64[]"); }
  void operator()(const char* f, int64_t) { add(f, "i64"); }
  void operator()(const char* f, uint64_t) { add(f, "u64"); }
  void operator()(const char* f, double) { add(f, "f64"); }
  void operator()(const char* f, bool) { add(f, "bool"); }
  void operator()(const char* f, DType) { add(f, "DType"); }
  void operator()(const char* f, const ir::Scalar&) { add(f, "Scalar"); }
  void operator()(const char* f, const ir::Bytes&) { add(f, "Bytes"); }
  void operator()(const char* f, ir::UnaryKind) { add(f, "UnaryKind"); }
  void operator()(const char* f, ir::BinaryKind) { add(f, "BinaryKind"); }
  void operator()(const char* f, ir::ReduceKind) { add(f, "ReduceKind"); }
  void operator()(const char* f, ir::PoolKind) { add(f, "PoolKind"); }
  void operator()(const char* f, BlockFormat) { add(f, "BlockFormat"); }
};

TEST(ProtocolDoc, OpTableListsEveryOpWithItsFieldsInWireOrder) {
  std::string doc = read_doc();
  ASSERT_FALSE(doc.empty());
#define TW_CHECK_ROW(Name, code, since)                                    \
  {                                                                        \
    FieldTypes ft;                                                         \
    ir::Name{}.fields(ft);                                                 \
    std::string row = "| " #code " | " #Name " | " + ft.out + " |";        \
    EXPECT_NE(doc.find(row), std::string::npos)                            \
        << "docs/protocol.md §5 lacks (or has a stale) row for op " #Name  \
           " (scripts/protocol_op_table.py prints the table); expected:\n" \
        << row;                                                            \
  }
  TW_OP_LIST(TW_CHECK_ROW)
#undef TW_CHECK_ROW
  std::string next = "| " + std::to_string(ir::kNumOps + 1) + " | ";
  EXPECT_EQ(doc.find(next), std::string::npos)
      << "the op table lists a code this build does not have";
}
#endif

}  // namespace
}  // namespace tw::protocol
