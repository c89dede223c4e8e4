// The batch decoder as a server runs it (src/server/session.h's Batch): BatchDecoder::next_reusing
// (src/protocol/tasks.h) decoding every frame a session sends after its hello a window of tasks
// at a time into the same Tasks, each cleared (clear_task) before the next window, so that a
// Task is decoded into after holding another kind; the op decoder (src/ir/codec.h) is under it.
// The window is small so that most inputs reuse Tasks. An accepted batch must re-encode to its
// bytes: a Task that kept anything of what it held before reads differently.
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tw::protocol;
  constexpr size_t kWindow = 3;
  BatchDecoder d(tw::Buffer::copy_of(data, size));
  std::vector<Task> window;
  BatchWriter w;
  for (size_t n; (n = d.next_reusing(window, kWindow)) > 0;) {
    for (size_t i = 0; i < n; ++i) {
      std::visit(
          [&](const auto& t) {
            if constexpr (HasPackedKind<std::decay_t<decltype(t)>>) w.set_packed_ids(t.packed_ids);
            w.add(t);
          },
          window[i]);
      clear_task(window[i]);
    }
  }
  if (!d.status().ok()) return 0;
  tw::fuzz::check_round_trip(w.take(), data, size, "batch re-encodes differently");
  return 0;
}
