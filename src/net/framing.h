// Frames on a byte stream: u32 little-endian payload length, then the payload. Building the
// gather list for an OutFrame (its head bytes interleaved with zero-copy segments).
#pragma once
#include <asio/buffer.hpp>
#include <asio/error_code.hpp>
#include <cstdint>
#include <vector>

#include "protocol/messages.h"

namespace tw::net {

// Fills `header` with the frame length and `out` with the buffers to write, in order. The
// frame, header and segments must stay alive until the write completes.
inline void frame_buffers(const protocol::OutFrame& f, uint8_t (&header)[4],
                          std::vector<asio::const_buffer>& out) {
  uint64_t n = f.payload_size();
  for (int i = 0; i < 4; ++i) header[i] = static_cast<uint8_t>(n >> (8 * i));
  out.clear();
  out.emplace_back(header, 4);
  size_t pos = 0;
  for (const auto& seg : f.segments) {
    if (seg.offset > pos) out.emplace_back(f.head.data() + pos, seg.offset - pos);
    if (seg.data.size()) out.emplace_back(seg.data.data(), seg.data.size());
    pos = seg.offset;
  }
  if (f.head.size() > pos) out.emplace_back(f.head.data() + pos, f.head.size() - pos);
}

// Completion condition for reading or writing a whole frame: asio's transfer_all() caps every
// read_some/write_some at 64 KiB, which turns a 256 MiB tensor into 4,096 system calls and as many
// trips through the reactor; this lets each call move everything the kernel will take.
struct TransferAll {
  size_t operator()(const asio::error_code& ec, size_t) const { return ec ? 0 : ~size_t{0}; }
};

inline uint32_t frame_length(const uint8_t (&header)[4]) {
  return uint32_t{header[0]} | uint32_t{header[1]} << 8 | uint32_t{header[2]} << 16 |
         uint32_t{header[3]} << 24;
}

}  // namespace tw::net
