#include "ir/graph_codec.h"

#include <string>

#include "ir/codec.h"

namespace tw::ir {
namespace {

// The least bytes each item can take, which bounds every count by what is left to read.
constexpr size_t kMinInputBytes = 8 + 1 + 4;
constexpr size_t kMinOpBytes = 2;
constexpr size_t kIdBytes = 8;

Status get_meta(WireReader& r, TensorMeta& m) {
  uint8_t dt = 0;
  TW_RETURN_NOT_OK(r.u8(dt));
  if (!dtype_valid(dt)) return data_loss("unknown dtype code " + std::to_string(dt));
  m.dtype = static_cast<DType>(dt);
  uint32_t rank = 0;
  TW_RETURN_NOT_OK(r.count(rank, 8));
  m.shape.resize(rank);
  for (int64_t& d : m.shape) TW_RETURN_NOT_OK(r.i64(d));
  return validate_shape(m.shape);
}

Status get_ids(WireReader& r, std::vector<TensorId>& ids) {
  uint32_t n = 0;
  TW_RETURN_NOT_OK(r.count(n, kIdBytes));
  ids.resize(n);
  for (TensorId& id : ids) TW_RETURN_NOT_OK(r.u64(id));
  return Status::OK();
}

}  // namespace

void encode_graph(const Graph& graph, WireWriter& w) {
  w.u32(static_cast<uint32_t>(graph.input_ids.size()));
  for (size_t i = 0; i < graph.input_ids.size(); ++i) {
    w.u64(graph.input_ids[i]);
    // A graph whose id and meta lists differ is invalid; it is encoded with empty metas past
    // the end, so the decoder still sees one meta per id and validation reports it.
    const TensorMeta m = i < graph.inputs.size() ? graph.inputs[i] : TensorMeta{};
    w.u8(static_cast<uint8_t>(m.dtype));
    w.u32(static_cast<uint32_t>(m.shape.size()));
    for (int64_t d : m.shape) w.i64(d);
  }
  w.u32(static_cast<uint32_t>(graph.ops.size()));
  for (const Op& op : graph.ops) encode_op(op, w);
  w.u32(static_cast<uint32_t>(graph.output_ids.size()));
  for (TensorId id : graph.output_ids) w.u64(id);
}

Result<Graph> decode_graph(WireReader& r) {
  Graph g;
  uint32_t n = 0;
  TW_RETURN_NOT_OK(r.count(n, kMinInputBytes));
  g.input_ids.resize(n);
  g.inputs.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    Status s = r.u64(g.input_ids[i]);
    if (s.ok()) s = get_meta(r, g.inputs[i]);
    if (!s.ok()) return s.with_context("graph input " + std::to_string(i));
  }
  TW_RETURN_NOT_OK(r.count(n, kMinOpBytes));
  g.ops.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    Result<Op> op = decode_op(r);
    if (!op.ok()) return op.status().with_context("graph op " + std::to_string(i));
    g.ops.push_back(std::move(op).value());
  }
  Status s = get_ids(r, g.output_ids);
  if (!s.ok()) return s.with_context("graph outputs");
  return g;
}

}  // namespace tw::ir
