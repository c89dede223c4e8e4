// The binary encoding of an ir::Graph, shared by the protocol's register-graph task
// (docs/protocol.md) and any file that stores a graph, so both carry exactly the same bytes.
// Layout: u32 input count, then per input u64 id and its meta (u8 dtype, u32 rank, rank x i64
// dims); u32 op count, then each op in the op codec (ir/codec.h); u32 output count, then u64 ids.
// Decoding is bounds-checked like the op codec: malformed bytes give kDataLoss or
// kInvalidArgument, never a crash, and no count can make it allocate more than the input
// holds. It checks the encoding only; whether the graph is valid is ir::validate_graph's call.
#pragma once
#include "core/wire.h"
#include "ir/graph.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw::ir {

void encode_graph(const Graph& graph, WireWriter& w);
Result<Graph> decode_graph(WireReader& r);

}  // namespace tw::ir
TW_INTERNAL_END
