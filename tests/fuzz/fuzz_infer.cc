// The validator (ir::infer, src/ir/infer.h) as a session applies it: the input is a batch, its
// ops are inferred in order against a table of the tensors the earlier ops made, and an
// accepted op's outputs join the table (drops leave it). Whatever infer accepts must describe
// outputs an executor can allocate: one valid meta per output.
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tw;
  std::vector<protocol::Task> tasks;
  // A malformed batch still yields the tasks before the bad one, and the server runs those.
  (void)protocol::decode_batch(Buffer::copy_of(data, size), tasks);
  fuzz::MetaTable table;
  for (const protocol::Task& t : tasks) {
    if (t.kind == protocol::TaskKind::kDrop) {
      for (ir::TensorId id : t.ids) table.drop(id);
    }
    if (t.kind == protocol::TaskKind::kOp) (void)table.apply(t.op);
  }
  return 0;
}
