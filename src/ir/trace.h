// Trace files (tw::graph::Trace::save/load): a header, then the graph in ir/graph_codec.h's
// encoding, the bytes the protocol's RegisterGraph task carries. docs/trace.md describes the
// layout.
#pragma once
#include <cstdint>
#include <vector>

#include "core/wire.h"
#include "ir/graph.h"
#include "ir/graph_codec.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw::ir {

// A trace file starts with these 8 bytes, then a u16 format version, then encode_graph's bytes
// (ir/graph_codec.h), and ends there.
inline constexpr char kTraceMagic[8] = {'T', 'W', 'T', 'R', 'A', 'C', 'E', '\0'};
// Bumped whenever the file's layout changes meaning; a reader refuses every other version (op
// codes are the protocol's, so a new op needs no bump: an old reader names the unknown code).
inline constexpr uint16_t kTraceVersion = 1;

// A whole trace file: header, then the graph.
std::vector<uint8_t> encode_trace_file(const Graph& graph);
// Decodes and validates (validate_graph) a trace file's bytes; every failure is a Status naming
// what is wrong and where, never a crash.
Result<Graph> decode_trace_file(const uint8_t* data, size_t size);

}  // namespace tw::ir
TW_INTERNAL_END
