// splitmix64 (Steele, Lea & Flood, "Fast splittable pseudorandom number generators", OOPSLA'14):
// the small sequential generator of the host-side shuffles and samplers (digits' Fisher-Yates,
// the language model's batch offsets, the transformer's token sampler). The same numbers on every
// platform, so any program (the PyTorch benchmarks included) can reproduce them.
#pragma once
#include <cstdint>

#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw {

// Advances `state` and returns the next number of its sequence.
inline uint64_t splitmix64_next(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace tw

TW_INTERNAL_END
