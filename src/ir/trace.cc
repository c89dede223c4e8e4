#include "ir/trace.h"

#include <cstring>
#include <string>

namespace tw::ir {

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
