// The host-side decisions of running a registered graph as a CUDA Graph (cuda_graph.cc), with no
// CUDA header, so that tests/unit/cuda checks them on every machine: which step a run takes, why
// a graph runs op by op instead (each reason a counter), and the arena that serves a capture's
// allocations from blocks made before it began.
//
// A graph's runs go: the first runs op by op and records what the kernels allocate (kRecord);
// the second copies its inputs into buffers of the graph's own, captures the ops on the stream
// with every allocation served by the arena planned from that record (no cudaMalloc inside the
// capture), instantiates the CUDA Graph and launches it (kCapture); later runs copy the inputs in
// and launch it again (kReplay). Outputs are copied out of the graph's buffers every run, since
// the next launch writes them again.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

namespace tw::cuda {

// Why a run went op by op (kNone: it did not). Sticky reasons refuse the graph for good; a
// poisoned input and a disabled switch concern one run.
enum class EagerReason : uint8_t {
  kNone,
  kDisabled,        // TW_CUDA_GRAPHS=0
  kPoisonedInput,   // an input carries an error: the run hands it on op by op
  kOpFailed,        // an op failed in the recording run (a refused dtype, say)
  kCaptureRefused,  // the runtime refused the capture (an op synchronised or allocated in it)
  kArenaMiss,       // an op asked for memory the recording run did not allocate
  kInstantiate,     // cudaGraphInstantiate failed
  kCount
};
inline constexpr const char* kEagerReasonNames[] = {
    "none",       "disabled",   "poisoned_input", "op_failed", "capture_refused",
    "arena_miss", "instantiate"};
static_assert(sizeof(kEagerReasonNames) / sizeof(kEagerReasonNames[0]) ==
              static_cast<size_t>(EagerReason::kCount));
inline const char* eager_reason_name(EagerReason r) {
  return kEagerReasonNames[static_cast<size_t>(r)];
}
inline bool is_sticky(EagerReason r) {
  return r != EagerReason::kNone && r != EagerReason::kDisabled && r != EagerReason::kPoisonedInput;
}

enum class GraphStep : uint8_t { kEager, kRecord, kCapture, kReplay };

struct GraphCaptureState {
  bool recorded = false;  // the recording run is done: the arena's blocks are known
  bool captured = false;  // a CUDA Graph is instantiated
  EagerReason refused = EagerReason::kNone;  // sticky: op by op from now on
};

// The step this run takes; `why` is set for kEager.
inline GraphStep next_graph_step(const GraphCaptureState& s, bool enabled, bool poisoned_input,
                                 EagerReason* why) {
  *why = EagerReason::kNone;
  if (!enabled)
    *why = EagerReason::kDisabled;
  else if (s.refused != EagerReason::kNone)
    *why = s.refused;
  else if (poisoned_input)
    *why = EagerReason::kPoisonedInput;
  if (*why != EagerReason::kNone) return GraphStep::kEager;
  if (s.captured) return GraphStep::kReplay;
  return s.recorded ? GraphStep::kCapture : GraphStep::kRecord;
}

// What a step's outcome does to the state: a recording run whose ops all ran is recorded; one
// that failed refuses the graph (kOpFailed); a capture that failed refuses it with its reason.
inline void after_graph_step(GraphCaptureState& s, GraphStep step, EagerReason failure) {
  if (step == GraphStep::kRecord) {
    if (failure == EagerReason::kNone)
      s.recorded = true;
    else
      s.refused = EagerReason::kOpFailed;
  } else if (step == GraphStep::kCapture) {
    if (failure == EagerReason::kNone)
      s.captured = true;
    else
      s.refused = failure;
  }
}

// Blocks for a capture's allocations, planned from a recording run that made the same
// allocations in the same order (both runs read the graph's own dense input buffers, so the
// kernels' host code takes the same path). Recording, an allocation takes the smallest free block
// it fits in, or a new block of its size, and a release frees its block. Serving (after
// start_serving), the n-th allocation gets the block the n-th recorded one got, which is free at
// that point as it was then; anything else (a larger request, one more than recorded, a block
// still held) is a miss. Blocks are reused only after a release, which a single stream's order
// makes safe: the kernel that used a block precedes the one that reuses it. Sizes are rounded to
// kAlign, so every block starts as aligned as the pool's.
class BlockPlanner {
 public:
  static constexpr uint64_t kAlign = 256;
  // Recording: the block for an allocation of `bytes` (a new one when none is free and fits).
  size_t record(uint64_t bytes) {
    const uint64_t b = round(bytes);
    size_t i;
    auto it = free_.lower_bound(b);
    if (it != free_.end()) {
      i = it->second;
      free_.erase(it);
      live_[i] = true;
    } else {
      i = sizes_.size();
      sizes_.push_back(b);
      live_.push_back(true);
    }
    order_.push_back(i);
    return i;
  }
  // Serving: the block for the next allocation, of `bytes`, or none (a miss).
  std::optional<size_t> serve(uint64_t bytes) {
    if (cursor_ >= order_.size()) return std::nullopt;
    const size_t i = order_[cursor_];
    if (round(bytes) > sizes_[i] || live_[i]) return std::nullopt;
    ++cursor_;
    live_[i] = true;
    return i;
  }
  // Block i is free again (ignored for a block of an earlier generation, see start_serving).
  void release(size_t i, uint64_t generation) {
    if (generation != generation_ || i >= sizes_.size() || !live_[i]) return;
    live_[i] = false;
    free_.emplace(sizes_[i], i);
  }
  // Every block free, and a new generation: releases of blocks handed out before are ignored
  // (a recording run's outputs go whenever their owner drops them).
  void start_serving() {
    ++generation_;
    cursor_ = 0;
    free_.clear();
    live_.assign(sizes_.size(), false);
  }
  uint64_t generation() const { return generation_; }
  const std::vector<uint64_t>& sizes() const { return sizes_; }
  size_t allocations() const { return order_.size(); }
  uint64_t total_bytes() const {
    uint64_t t = 0;
    for (uint64_t s : sizes_) t += s;
    return t;
  }

 private:
  static uint64_t round(uint64_t bytes) {
    return bytes == 0 ? kAlign : (bytes + kAlign - 1) / kAlign * kAlign;
  }
  std::vector<uint64_t> sizes_;
  std::vector<bool> live_;
  std::vector<size_t> order_;             // the block of each recorded allocation
  std::multimap<uint64_t, size_t> free_;  // recording: size -> the free blocks
  size_t cursor_ = 0;                     // serving: the next allocation
  uint64_t generation_ = 0;
};

}  // namespace tw::cuda
