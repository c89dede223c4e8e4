// Helpers shared by the fuzz targets: each target feeds libFuzzer's bytes to one decoder, and
// where the decoder accepts them, re-encodes the result and requires the same bytes back (every
// encoding is canonical), so a decoder that accepts something it then misrepresents is a
// finding too, not only a crash.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "protocol/messages.h"

namespace tw::fuzz {

// A broken invariant: abort, which libFuzzer reports as a crash and saves the input for.
[[noreturn]] inline void fail(const char* what) {
  std::fprintf(stderr, "fuzz invariant broken: %s\n", what);
  std::abort();
}
inline void check(bool ok, const char* what) {
  if (!ok) fail(what);
}

// The payload an OutFrame stands for: its head with the segments inserted at their offsets.
inline std::vector<uint8_t> flatten(const protocol::OutFrame& f) {
  std::vector<uint8_t> out;
  size_t pos = 0;
  for (const WireSegment& s : f.segments) {
    out.insert(out.end(), f.head.begin() + static_cast<ptrdiff_t>(pos),
               f.head.begin() + static_cast<ptrdiff_t>(s.offset));
    const uint8_t* d = s.data.as<const uint8_t>();
    out.insert(out.end(), d, d + s.data.size());
    pos = s.offset;
  }
  out.insert(out.end(), f.head.begin() + static_cast<ptrdiff_t>(pos), f.head.end());
  return out;
}

// The encoding is canonical: re-encoding what was decoded gives the input bytes.
inline void check_round_trip(const protocol::OutFrame& f, const uint8_t* data, size_t size,
                             const char* what) {
  const std::vector<uint8_t> again = flatten(f);
  check(again.size() == size && std::equal(again.begin(), again.end(), data), what);
}

}  // namespace tw::fuzz
