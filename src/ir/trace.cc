#include "ir/trace.h"

#include <cstring>
#include <string>

#include "ir/codec.h"

namespace tw::ir {
namespace {

// No real tensor has more dims than this; a larger rank is a corrupt file.
constexpr uint32_t kMaxRank = 64;
// The fewest bytes an entry can take: what count() checks before any allocation.
constexpr size_t kMinInputBytes = 8 + 1 + 4;
constexpr size_t kMinOpBytes = 4 + 2;

void encode_meta(const TensorMeta& m, WireWriter& w) {
  w.u8(static_cast<uint8_t>(m.dtype));
  w.u32(static_cast<uint32_t>(m.shape.size()));
  for (int64_t d : m.shape) w.i64(d);
}

Status decode_meta(WireReader& r, TensorMeta& m) {
  uint8_t dtype = 0;
  TW_RETURN_NOT_OK(r.u8(dtype));
  if (!dtype_valid(dtype)) return data_loss("unknown dtype code " + std::to_string(dtype));
  m.dtype = static_cast<DType>(dtype);
  uint32_t rank = 0;
  TW_RETURN_NOT_OK(r.count(rank, 8));
  if (rank > kMaxRank) return data_loss("rank " + std::to_string(rank) + " is over 64");
  m.shape.resize(rank);
  for (int64_t& d : m.shape) {
    TW_RETURN_NOT_OK(r.i64(d));
    if (d < 0) return data_loss("negative dimension " + std::to_string(d));
  }
  return Status::OK();
}

}  // namespace

void encode_graph(const Graph& graph, WireWriter& w) {
  w.u32(static_cast<uint32_t>(graph.input_ids.size()));
  for (size_t i = 0; i < graph.input_ids.size(); ++i) {
    w.u64(graph.input_ids[i]);
    encode_meta(i < graph.inputs.size() ? graph.inputs[i] : TensorMeta{}, w);
  }
  w.u32(static_cast<uint32_t>(graph.ops.size()));
  for (const Op& op : graph.ops) {
    const std::vector<uint8_t> bytes = encode_op(op);
    w.u32(static_cast<uint32_t>(bytes.size()));
    w.raw(bytes.data(), bytes.size());
  }
  w.u32(static_cast<uint32_t>(graph.output_ids.size()));
  for (TensorId id : graph.output_ids) w.u64(id);
}

Result<Graph> decode_graph(WireReader& r) {
  Graph g;
  uint32_t n = 0;
  TW_RETURN_NOT_OK(r.count(n, kMinInputBytes).with_context("graph input count"));
  g.input_ids.resize(n);
  g.inputs.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    const std::string where = "graph input " + std::to_string(i);
    TW_RETURN_NOT_OK(r.u64(g.input_ids[i]).with_context(where));
    TW_RETURN_NOT_OK(decode_meta(r, g.inputs[i]).with_context(where));
  }
  TW_RETURN_NOT_OK(r.count(n, kMinOpBytes).with_context("graph op count"));
  g.ops.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    const std::string where = "graph op " + std::to_string(i);
    uint32_t len = 0;
    TW_RETURN_NOT_OK(r.count(len, 1).with_context(where));
    Buffer bytes;
    TW_RETURN_NOT_OK(r.bytes(len, bytes).with_context(where));
    Result<Op> op = decode_op(bytes.as<const uint8_t>(), bytes.size());
    if (!op.ok()) return op.status().with_context(where);
    g.ops.push_back(std::move(op).value());
  }
  TW_RETURN_NOT_OK(r.count(n, 8).with_context("graph output count"));
  g.output_ids.resize(n);
  for (TensorId& id : g.output_ids) TW_RETURN_NOT_OK(r.u64(id).with_context("graph outputs"));
  return g;
}

std::vector<uint8_t> encode_trace_file(const Graph& graph) {
  std::vector<uint8_t> out;
  WireWriter w(out);
  for (char c : kTraceMagic) w.u8(static_cast<uint8_t>(c));
  w.u16(kTraceVersion);
  encode_graph(graph, w);
  return out;
}

Result<Graph> decode_trace_file(const uint8_t* data, size_t size) {
  if (size < sizeof(kTraceMagic) || std::memcmp(data, kTraceMagic, sizeof(kTraceMagic)) != 0) {
    return data_loss("not a tensorwire trace (the file does not start with \"TWTRACE\")");
  }
  WireReader r(data + sizeof(kTraceMagic), size - sizeof(kTraceMagic));
  uint16_t version = 0;
  TW_RETURN_NOT_OK(r.u16(version).with_context("trace version"));
  if (version != kTraceVersion) {
    return data_loss("trace format version " + std::to_string(version) +
                     " is not supported (this build reads version " +
                     std::to_string(kTraceVersion) + ")");
  }
  TW_ASSIGN_OR_RETURN(Graph g, decode_graph(r));
  if (!r.done()) {
    return data_loss(std::to_string(r.remaining()) + " trailing bytes after the trace's graph");
  }
  Result<GraphPlan> plan = validate_graph(g);
  if (!plan.ok()) return plan.status().with_context("trace");
  return g;
}

}  // namespace tw::ir
