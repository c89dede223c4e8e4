// The byte form of an ir::Graph, shared by trace files (tw::graph::Trace::save/load) and by any
// message that carries a graph: encode_graph/decode_graph give the same bytes wherever a graph
// travels. docs/trace.md describes the layout and the file header around it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/wire.h"
#include "ir/graph.h"

namespace tw::ir {

// A trace file starts with these 8 bytes, then a u16 format version, then encode_graph's bytes.
inline constexpr char kTraceMagic[8] = {'T', 'W', 'T', 'R', 'A', 'C', 'E', '\0'};
// Bumped whenever the layout below changes meaning; a reader refuses every other version (op
// codes are the protocol's, so a new op needs no bump: an old reader names the unknown code).
inline constexpr uint16_t kTraceVersion = 1;

// u32 input count, per input u64 id + meta (u8 dtype, u32 rank, i64 dims); u32 op count, per op
// u32 byte length + encode_op bytes; u32 output count, u64 ids.
void encode_graph(const Graph& graph, WireWriter& w);
// Decodes what encode_graph wrote, bounds-checked (a count larger than the remaining bytes could
// hold is refused before anything is allocated). The graph is not validated here: run
// validate_graph on it before use.
Result<Graph> decode_graph(WireReader& r);

// A whole trace file: header, then the graph.
std::vector<uint8_t> encode_trace_file(const Graph& graph);
// Decodes and validates (validate_graph) a trace file's bytes; every failure is a Status naming
// what is wrong and where, never a crash.
Result<Graph> decode_trace_file(const uint8_t* data, size_t size);

}  // namespace tw::ir
