// Test helper shared by the protocol unit tests and the raw-socket integration client.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "protocol/messages.h"

namespace tw::testing {

// Server statistics with every field set (none at its default), the list non-empty.
inline protocol::ServerStats sample_stats() {
  protocol::ServerStats s;
  s.sessions = 3;
  s.bytes_held = 1234567;
  s.session_bytes_held = 4567;
  s.ops_executed = 99;
  s.frames_in = 10;
  s.frames_out = 11;
  s.bytes_in = 12;
  s.bytes_out = 13;
  s.sessions_opened = 14;
  s.per_session_bytes = {{1, 4567}, {7, 1230000}};
  return s;
}

// The payload bytes of a frame: head with its zero-copy segments put back at their offsets.
inline std::vector<uint8_t> flatten(const protocol::OutFrame& f) {
  std::vector<uint8_t> out;
  out.reserve(f.payload_size());
  size_t pos = 0;
  for (const auto& seg : f.segments) {
    out.insert(out.end(), f.head.begin() + static_cast<ptrdiff_t>(pos),
               f.head.begin() + static_cast<ptrdiff_t>(seg.offset));
    const uint8_t* p = seg.data.as<const uint8_t>();
    out.insert(out.end(), p, p + seg.data.size());
    pos = seg.offset;
  }
  out.insert(out.end(), f.head.begin() + static_cast<ptrdiff_t>(pos), f.head.end());
  return out;
}

// flatten(f) as a Buffer, as a decoder takes it.
inline Buffer payload_buffer(const protocol::OutFrame& f) {
  std::vector<uint8_t> v = flatten(f);
  return Buffer::copy_of(v.data(), v.size());
}

}  // namespace tw::testing
