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
    if (const auto* drop = std::get_if<protocol::DropTask>(&t)) {
      for (ir::TensorId id : drop->ids) table.drop(id);
    }
    if (const auto* op = std::get_if<protocol::OpTask>(&t)) (void)table.apply(op->op);
  }
  return 0;
}
