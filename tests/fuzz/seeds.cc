// Writes the fuzz targets' seed corpora: valid encodings made by the encoders themselves, so
// that the fuzzers start from inputs the decoders accept and mutate from there.
//   tw_fuzz_seeds DIR   writes DIR/<target>/<name> for every target in tests/fuzz
// The op program (tests/support/op_program.h, shared with the codec tests) uses every op in
// TW_OP_LIST on inputs it creates first; the tool checks that inference accepts each op (the
// validator's corpus must be valid) and that no op is left out, and fails otherwise, so a new op
// without a seed breaks the fuzz run.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "api/safetensors_layout.h"
#include "fuzz_util.h"
#include "ir/codec.h"
#include "ir/graph.h"
#include "ir/printer.h"
#include "ir/trace.h"
#include "protocol/compress.h"
#include "support/op_program.h"

namespace tw::fuzz {
namespace {

using namespace ir;
namespace fs = std::filesystem;

// Every op must infer against the tensors the ops before it made, and every op kind appear.
bool program_is_valid(const std::vector<Op>& ops) {
  MetaTable table;
  std::set<OpCode> codes;
  for (const Op& op : ops) {
    Status st = table.apply(op);
    if (!st.ok()) {
      std::fprintf(stderr, "tw_fuzz_seeds: %s: %s\n", to_string(op).c_str(),
                   st.to_string().c_str());
      return false;
    }
    codes.insert(op_code(op));
  }
  if (static_cast<int>(codes.size()) != kNumOps) {
    std::fprintf(stderr, "tw_fuzz_seeds: the program uses %zu of %d ops; add the others\n",
                 codes.size(), kNumOps);
    return false;
  }
  return true;
}

class Corpus {
 public:
  explicit Corpus(fs::path root) : root_(std::move(root)) {}
  void add(const std::string& target, const std::string& name, const std::vector<uint8_t>& b) {
    fs::create_directories(root_ / target);
    std::ofstream out(root_ / target / name, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    ok_ = ok_ && out.good();
    ++count_;
  }
  void add(const std::string& target, const std::string& name, const protocol::OutFrame& f) {
    add(target, name, testing::flatten(f));
  }
  bool ok() const { return ok_; }
  int count() const { return count_; }

 private:
  fs::path root_;
  bool ok_ = true;
  int count_ = 0;
};

// A byte stream of frames for fuzz_frame: [staging selector][piece selector] then the frames.
std::vector<uint8_t> stream(uint8_t staging, uint8_t piece,
                            const std::vector<std::vector<uint8_t>>& payloads) {
  std::vector<uint8_t> out{staging, piece};
  for (const auto& p : payloads) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(p.size() >> (8 * i)));
    out.insert(out.end(), p.begin(), p.end());
  }
  return out;
}

// `b` with its bytes from `at` set to `v`, little-endian over `width` bytes: a header field that
// lies about what follows.
std::vector<uint8_t> patched(std::vector<uint8_t> b, size_t at, uint64_t v, int width) {
  for (int i = 0; i < width && at + static_cast<size_t>(i) < b.size(); ++i)
    b[at + static_cast<size_t>(i)] = static_cast<uint8_t>(v >> (8 * i));
  return b;
}

// `b` with the first `from` replaced by `to`, of the same length so that the header's length
// stays true and only what the text says changes.
std::vector<uint8_t> replaced(std::vector<uint8_t> b, const std::string& from,
                              const std::string& to) {
  auto it = std::search(b.begin(), b.end(), from.begin(), from.end());
  if (it != b.end() && from.size() == to.size()) std::copy(to.begin(), to.end(), it);
  return b;
}

std::vector<uint8_t> truncated(std::vector<uint8_t> b, size_t keep) {
  b.resize(std::min(b.size(), keep));
  return b;
}

// Trace files: valid ones by encode_trace_file, then a truncated one, one whose input count
// claims 2^32 - 1 inputs, one whose op count claims an op more than the file holds, one from a
// future format version, and one naming an output no op makes.
bool add_trace_seeds(Corpus& c, const std::vector<Op>& ops) {
  ir::Graph whole;
  whole.ops = ops;
  whole.output_ids = ir::op_outputs(ops.back());
  ir::Graph small;
  small.input_ids = {1};
  small.inputs = {{{2, 2}, kF32}};
  small.ops = {Unary{.kind = UnaryKind::kExp, .x = {1}, .out = {2}},
               MatMul{.a = {1}, .b = {2}, .out = {3}}};
  small.output_ids = {2, 3};
  if (!ir::validate_graph(whole).ok() || !ir::validate_graph(small).ok()) {
    std::fprintf(stderr, "tw_fuzz_seeds: the seed graphs are not valid traces\n");
    return false;
  }
  const std::vector<uint8_t> program = ir::encode_trace_file(whole);
  const std::vector<uint8_t> file = ir::encode_trace_file(small);
  c.add("trace", "program", program);
  c.add("trace", "small", file);
  constexpr size_t kGraphAt = sizeof(ir::kTraceMagic) + 2;  // after the magic and the version
  c.add("trace", "truncated", truncated(file, file.size() / 2));
  c.add("trace", "huge_input_count", patched(file, kGraphAt, 0xFFFFFFFFu, 4));
  c.add("trace", "future_version", patched(file, sizeof(ir::kTraceMagic), kTraceVersion + 1, 2));
  // The program has no inputs, so its op count follows the (zero) input count.
  c.add("trace", "op_count_lies", patched(program, kGraphAt + 4, ops.size() + 1, 4));
  c.add("trace", "unknown_output", patched(file, file.size() - 8, 99, 8));
  return true;
}

// Safetensors files: valid ones by the real writer (safetensors::write_file, as
// save_safetensors writes them), then a truncated one, absurd and past-the-end header lengths,
// and offsets that lie (overlapping, leaving a gap, running past the data).
void add_safetensors_seeds(Corpus& c) {
  const float f32[6] = {1, 2, 3, 4, 5, 6};
  const int64_t i64[4] = {-1, 0, 1, 1 << 20};
  const auto* f32_bytes = reinterpret_cast<const uint8_t*>(f32);
  const auto* i64_bytes = reinterpret_cast<const uint8_t*>(i64);
  const std::vector<safetensors::Named> tensors = {
      {"weight", kF32, {2, 3}, {f32_bytes, sizeof(f32)}},
      {"steps", kI64, {4}, {i64_bytes, sizeof(i64)}},
      {"empty", kBF16, {0, 5}, {}},
      {"scalar \"q\"\n", kU8, {}, {f32_bytes, 1}},
      {"codes", kI8, {3}, {i64_bytes, 3}},  // i8 (protocol 14): -1, -1, -1
  };
  const std::vector<uint8_t> file =
      safetensors::write_file(tensors, {{"format", "pt"}, {"note", "caf\u00e9 \\ \x01"}});
  c.add("safetensors", "tensors", file);
  c.add("safetensors", "no_tensors", safetensors::write_file({}, {}));
  c.add("safetensors", "truncated", truncated(file, file.size() - 4));
  c.add("safetensors", "header_only", truncated(file, 8));
  c.add("safetensors", "absurd_header_length", patched(file, 0, uint64_t{1} << 40, 8));
  c.add("safetensors", "header_past_end", patched(file, 0, file.size(), 8));
  // "weight" holds [0,24), "steps" [24,56): move steps' offsets by 4 bytes either way.
  c.add("safetensors", "overlapping_offsets", replaced(file, "[24,56]", "[20,52]"));
  c.add("safetensors", "gap_in_offsets", replaced(file, "[24,56]", "[28,60]"));
  c.add("safetensors", "size_disagrees", replaced(file, "[24,56]", "[24,58]"));
  c.add("safetensors", "bad_dtype", replaced(file, "\"I64\"", "\"Q64\""));
}

int run(const fs::path& dir) {
  using namespace protocol;
  const std::vector<Op> ops = testing::every_op_program();
  if (!program_is_valid(ops)) return 1;
  Corpus c(dir);

  for (const Op& op : ops) {
    c.add("op", std::string(op_code_name(op_code(op))) + "_" + std::to_string(c.count()),
          encode_op(op));
  }

  BatchWriter bw;
  for (const Op& op : ops) bw.add_op(op);
  const std::vector<uint8_t> all_ops = testing::flatten(bw.take());
  bw.add_read(1, ir::op_outputs(ops.back()).front());
  bw.add_sync(2);
  bw.add_drop({1, 2, 3});
  bw.add_stats(3);
  const std::vector<uint8_t> other_tasks = testing::flatten(bw.take());
  const std::vector<uint8_t> empty_batch = testing::flatten(bw.take());
  for (const char* target : {"batch", "infer"}) {
    c.add(target, "program", all_ops);
    c.add(target, "read_sync_drop_stats", other_tasks);
    c.add(target, "empty", empty_batch);
  }

  if (!add_trace_seeds(c, ops)) return 1;
  add_safetensors_seeds(c);

  OutFrame hello;
  encode_hello(Hello{.device_index = 1, .credential = "token"}, hello);
  OutFrame enumerate;
  encode_hello(Hello{.device_index = kEnumerateOnly}, enumerate);
  c.add("hello", "hello", hello);
  c.add("hello", "enumerate", enumerate);

  Welcome welcome{.session_id = 42,
                  .server_id = "server-1",
                  .device_index = 1,
                  .devices = {{"cpu:0", "cpu", 1 << 30, 0x3F}, {"torch:0", "torch", 1 << 20, 3}},
                  .limits = {1 << 28, 1 << 30, 64, 8}};
  welcome.descriptions = {{"AMD EPYC (2 threads)", 24ull << 30, 20ull << 30, true, {1, 2, 40}},
                          {"torch", 24ull << 30, 20ull << 30, true, {1, 2}}};
  OutFrame f;
  encode_welcome(welcome, f);
  c.add("server_msg", "welcome", f);
  f = {};
  welcome.version = kDeviceDescriptionVersion - 1;  // the older form: no descriptions
  encode_welcome(welcome, f);
  c.add("server_msg", "welcome_v15", f);
  f = {};
  encode_refuse(Refuse{RefuseReason::kBadVersion, "server speaks 1..1"}, f);
  c.add("server_msg", "refuse", f);
  f = {};
  const float values[6] = {1, 2, 3, 4, 5, 6};
  encode_read_result(7, TensorData{{{2, 3}, kF32}, Buffer::copy_of(values, sizeof(values))}, f);
  c.add("server_msg", "read_result", f);
  f = {};
  encode_read_result(8, Result<TensorData>(not_found("no tensor 5")), f);
  c.add("server_msg", "read_error", f);
  f = {};
  encode_sync_result(9, Status::OK(), f);
  c.add("server_msg", "sync_result", f);
  f = {};
  encode_stats_result(
      10, ServerStats{.sessions = 2, .bytes_held = 100, .per_session_bytes = {{1, 60}, {2, 40}}},
      kProtocolVersion, f);
  c.add("server_msg", "stats_result", f);
  f = {};
  {
    ServerStats s{.sessions = 1, .bytes_held = 60, .per_session_bytes = {{1, 60}}};
    s.parked.sessions = {{7, 1 << 20, 42000}};
    encode_stats_result(11, s, kProtocolVersion, f);
  }
  c.add("server_msg", "stats_result_parked", f);
  f = {};
  encode_session_error(invalid_argument("batch task 0 of 1: matmul: bad"), f);
  c.add("server_msg", "session_error", f);
  f = {};
  encode_capability_result(11, Exported{"capability", {{2, 3}, kI64}}, f);
  c.add("server_msg", "capability_result", f);

  // Protocol 3: a peer's Hello and Fetch, and the move tasks.
  OutFrame peer;
  encode_hello(Hello{.min_version = 3, .device_index = kPeerOnly, .credential = "token"}, peer);
  c.add("hello", "peer", peer);
  OutFrame fetch;
  encode_fetch(Fetch{1, 2, 3, "capability"}, fetch);
  c.add("fetch", "fetch", fetch);
  // Protocols 10 and 11: the retryable pull (FetchBound, FetchDone) and the resumed one
  // (FetchFrom, with an offset).
  const std::string pull_id(kPullIdBytes, 'p');
  OutFrame fetch_bound, fetch_done, fetch_from;
  encode_fetch_bound({1, 2, 3, "capability", pull_id}, fetch_bound);
  encode_fetch_done({"capability", pull_id}, fetch_done);
  encode_fetch_from({1, 2, 3, "capability", pull_id, 1 << 20}, fetch_from);
  c.add("fetch", "fetch_bound", fetch_bound);
  c.add("fetch", "fetch_done", fetch_done);
  c.add("fetch", "fetch_from", fetch_from);
  // Protocol 3: a collective's rendezvous (Store, StoreResult) and its task.
  OutFrame store_set, store_get, store_reply;
  encode_store_request({1, StoreOp::kSet, "g1/0", "address"}, store_set);
  encode_store_request({2, StoreOp::kGet, "g1/1", ""}, store_get);
  encode_store_reply({2, Status::OK(), true, "address"}, store_reply);
  c.add("fetch", "store_set", store_set);
  c.add("fetch", "store_get", store_get);
  c.add("fetch", "store_reply", store_reply);
  BatchWriter coll;
  CollectiveSpec spec;
  spec.kind = CollectiveKind::kAllReduce;
  spec.size = 2;
  spec.group = "g1";
  spec.store_url = "tcp://h:1";
  spec.timeout_ms = 1000;
  spec.input = 3;
  spec.output = 4;
  spec.out_meta = {{8}, kF32};
  coll.add_collective(spec);
  c.add("batch", "collective", coll.take());
  BatchWriter moves;
  moves.add_export(12, 5);
  moves.add_move(TaskKind::kImport, 6, {{2, 3}, kF32}, {2, 5, "capability", "tls://h:1", "AB:CD"});
  moves.add_move(TaskKind::kMoveLocal, 7, {{}, kU8}, {2, 5, "capability", "", ""});
  c.add("batch", "moves", moves.take());

  // Protocol 4: the packed drop and graph run.
  BatchWriter packed;
  packed.set_packed_ids(true);
  packed.add_drop({9, 3, 4, 1000000});
  packed.add_run_graph(2, {5, 6, 7}, {8, 9});
  c.add("batch", "packed", packed.take());

  // Protocol 5: the segment tasks and the read result in a segment.
  BatchWriter segments;
  segments.add_from_segment(10, {{4, 4}, kF32}, {1, 64, 64, 3});
  segments.add_read_to_segment(13, 10, {1, 0, 4096, 0});
  c.add("batch", "segments", segments.take());
  f = {};
  encode_read_result_in_segment(13, {{4, 4}, kF32}, f);
  c.add("server_msg", "read_result_in_segment", f);

  // Protocol 9: a deduplicated upload, and a compressed batch.
  BatchWriter by_hash;
  by_hash.add(UploadByHashTask{14, 11, {{1024, 1024}, kF32}, 0x0123456789abcdefULL, 42});
  c.add("batch", "upload_by_hash", by_hash.take());
  BatchWriter zeros;
  zeros.add_op(ir::FromHost{ir::Out{15}, {1 << 16}, kU8, ir::Bytes{Buffer::zeros(1 << 16)}});
  c.add("compressed", "zeros", maybe_compress(zeros.take(), kCompressedClientType));

  // Protocol 10: a client asks for compressed replies.
  BatchWriter replies;
  replies.add(CompressRepliesTask{true});
  c.add("batch", "compress_replies", replies.take());

  // Protocol 11: a graph registered under the client's id, then run by it.
  ir::Graph graph;
  graph.input_ids = {1};
  graph.inputs = {{{2, 2}, kF32}};
  graph.ops = {Unary{.kind = UnaryKind::kExp, .x = {1}, .out = {2}}};
  graph.output_ids = {2};
  BatchWriter named;
  named.add_register_graph_as(7, graph);
  named.add_run_graph(7, {3}, {4});
  c.add("batch", "register_graph_as", named.take());

  const std::vector<uint8_t> hello_bytes = testing::flatten(hello);
  c.add("frame", "hello_batch", stream(255, 255, {hello_bytes, other_tasks}));
  c.add("frame", "small_staging", stream(2, 3, {hello_bytes, {}, other_tasks, empty_batch}));
  c.add("frame", "large_frame", stream(0, 16, {all_ops}));

  if (!c.ok()) {
    std::fprintf(stderr, "tw_fuzz_seeds: cannot write under %s\n", dir.c_str());
    return 1;
  }
  std::printf("tw_fuzz_seeds: %d seeds under %s\n", c.count(), dir.c_str());
  return 0;
}

}  // namespace
}  // namespace tw::fuzz

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  return tw::fuzz::run(argv[1]);
}
