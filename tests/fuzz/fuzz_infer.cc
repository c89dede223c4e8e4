// The validator (ir::infer, src/ir/infer.h) as a session applies it: the input is a batch, its
// ops are inferred in order against a table of the tensors the earlier ops made, and an
// accepted op's outputs join the table (drops leave it). Whatever infer accepts must describe
// outputs an executor can allocate: one valid meta per output.
#include <unordered_map>

#include "fuzz_util.h"
#include "ir/infer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tw;
  std::vector<protocol::Task> tasks;
  // A malformed batch still yields the tasks before the bad one, and the server runs those.
  (void)protocol::decode_batch(Buffer::copy_of(data, size), tasks);
  std::unordered_map<ir::TensorId, TensorMeta> table;
  const ir::MetaLookup lookup = [&](ir::TensorId id) -> Result<TensorMeta> {
    auto it = table.find(id);
    if (it == table.end()) return not_found("no tensor " + std::to_string(id));
    return it->second;
  };
  for (const protocol::Task& t : tasks) {
    if (t.kind == protocol::TaskKind::kDrop) {
      for (ir::TensorId id : t.ids) table.erase(id);
    }
    if (t.kind != protocol::TaskKind::kOp) continue;
    Result<std::vector<TensorMeta>> metas = ir::infer(t.op, lookup);
    if (!metas.ok()) {
      fuzz::check(!metas.status().message().empty(), "infer failed without a message");
      continue;
    }
    const std::vector<ir::TensorId> outs = ir::op_outputs(t.op);
    fuzz::check(metas->size() == outs.size(), "infer gave a meta count != the op's outputs");
    for (size_t i = 0; i < outs.size(); ++i) {
      const TensorMeta& m = (*metas)[i];
      fuzz::check(validate_shape(m.shape).ok(), "infer accepted an invalid output shape");
      fuzz::check(dtype_valid(static_cast<uint8_t>(m.dtype)), "infer gave an unknown dtype");
      table[outs[i]] = m;
    }
  }
  return 0;
}
