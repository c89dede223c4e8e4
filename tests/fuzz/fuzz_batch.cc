// decode_batch (src/protocol/messages.h): every frame a session sends after its hello, with the
// op decoder (src/ir/codec.h) under it.
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tw::protocol;
  std::vector<Task> tasks;
  if (!decode_batch(tw::Buffer::copy_of(data, size), tasks).ok()) return 0;
  BatchWriter w;
  for (const Task& t : tasks) {
    w.set_packed_ids(t.packed_ids);
    switch (t.kind) {
      case TaskKind::kOp: w.add_op(t.op); break;
      case TaskKind::kRead: w.add_read(t.request_id, t.id); break;
      case TaskKind::kSync: w.add_sync(t.request_id); break;
      case TaskKind::kDrop: w.add_drop(t.ids); break;
      case TaskKind::kStats: w.add_stats(t.request_id); break;
      case TaskKind::kRegisterGraph: w.add_register_graph(t.request_id, t.graph); break;
      case TaskKind::kRunGraph: w.add_run_graph(t.graph_id, t.ids, t.outputs); break;
      case TaskKind::kExport: w.add_export(t.request_id, t.id); break;
      case TaskKind::kImport:
      case TaskKind::kMoveLocal: w.add_move(t.kind, t.id, t.meta, t.source); break;
      case TaskKind::kCollective: w.add_collective(t.collective); break;
      case TaskKind::kFromSegment: w.add_from_segment(t.id, t.meta, t.range); break;
      case TaskKind::kReadToSegment: w.add_read_to_segment(t.request_id, t.id, t.range); break;
      default: tw::fuzz::fail("decode_batch accepted an unknown task kind");
    }
  }
  tw::fuzz::check_round_trip(w.take(), data, size, "batch re-encodes differently");
  return 0;
}
