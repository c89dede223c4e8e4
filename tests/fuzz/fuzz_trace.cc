// decode_trace_file (src/ir/trace.h) over exactly the input: a trace file as `tensorwire trace
// show/run` and Trace::load read it, header, graph encoding and validation included. An accepted
// file must re-encode to the same bytes and describe a graph validate_graph accepts.
#include "fuzz_util.h"
#include "ir/graph.h"
#include "ir/printer.h"
#include "ir/trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tw::Result<tw::ir::Graph> g = tw::ir::decode_trace_file(data, size);
  if (!g.ok()) {
    tw::fuzz::check(!g.status().message().empty(), "a refused trace has no message");
    return 0;
  }
  tw::fuzz::check(tw::ir::validate_graph(*g).ok(), "an accepted trace fails validation");
  for (const tw::ir::Op& op : g->ops) (void)tw::ir::to_string(op);
  const std::vector<uint8_t> again = tw::ir::encode_trace_file(*g);
  tw::fuzz::check(again.size() == size && std::equal(again.begin(), again.end(), data),
                  "trace re-encodes differently");
  return 0;
}
