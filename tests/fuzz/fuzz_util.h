// Helpers shared by the fuzz targets: each target feeds libFuzzer's bytes to one decoder, and
// where the decoder accepts them, re-encodes the result and requires the same bytes back (every
// encoding is canonical), so a decoder that accepts something it then misrepresents is a
// finding too, not only a crash.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/cost.h"
#include "ir/infer.h"
#include "protocol/messages.h"
#include "support/frames.h"

namespace tw::fuzz {

// A broken invariant: abort, which libFuzzer reports as a crash and saves the input for.
[[noreturn]] inline void fail(const char* what) {
  std::fprintf(stderr, "fuzz invariant broken: %s\n", what);
  std::abort();
}
inline void check(bool ok, const char* what) {
  if (!ok) fail(what);
}

// The encoding is canonical: re-encoding what was decoded gives the input bytes.
inline void check_round_trip(const protocol::OutFrame& f, const uint8_t* data, size_t size,
                             const char* what) {
  const std::vector<uint8_t> again = testing::flatten(f);
  check(again.size() == size && std::equal(again.begin(), again.end(), data), what);
}
// The same for a decoder's result: where it accepted the bytes, `encode` must give them back.
template <class T, class Encode>
void check_round_trip(const Result<T>& decoded, Encode encode, const uint8_t* data, size_t size,
                      const char* what) {
  if (!decoded.ok()) return;
  protocol::OutFrame f;
  encode(*decoded, f);
  check_round_trip(f, data, size, what);
}

// The tensors of a session as far as inference sees them: what each accepted op made.
class MetaTable {
 public:
  MetaTable() = default;
  MetaTable(const MetaTable&) = delete;  // lookup_ points at this table
  MetaTable& operator=(const MetaTable&) = delete;
  // Infers `op` against the table; when inference accepts it, requires what an executor relies
  // on (one valid meta per output) and adds the outputs.
  Status apply(const ir::Op& op) {
    Result<std::vector<TensorMeta>> metas = ir::infer(op, lookup_);
    if (!metas.ok()) {
      check(!metas.status().message().empty(), "infer failed without a message");
      return metas.status();
    }
    const std::vector<ir::TensorId> outs = ir::op_outputs(op);
    check(metas->size() == outs.size(), "infer gave a meta count != the op's outputs");
    // The server estimates the cost of every op infer accepts (ir/cost.h, --max-op-cost): a
    // number, never negative, whatever shapes a peer sends (NaN would pass any limit).
    const ir::OpCost c = ir::op_cost(op, lookup_, *metas);
    check(c.flops >= 0 && c.bytes >= 0 && c.transcendentals >= 0,
          "op_cost gave a negative or NaN estimate");
    for (size_t i = 0; i < outs.size(); ++i) {
      const TensorMeta& m = (*metas)[i];
      check(validate_shape(m.shape).ok(), "infer accepted an invalid output shape");
      check(dtype_valid(static_cast<uint8_t>(m.dtype)), "infer gave an unknown dtype");
      metas_[outs[i]] = m;
    }
    return Status::OK();
  }
  void drop(ir::TensorId id) { metas_.erase(id); }

 private:
  std::unordered_map<ir::TensorId, TensorMeta> metas_;
  const ir::MetaLookup lookup_ = [this](ir::TensorId id) -> Result<TensorMeta> {
    auto it = metas_.find(id);
    if (it == metas_.end()) return not_found("no tensor " + std::to_string(id));
    return it->second;
  };
};

}  // namespace tw::fuzz
