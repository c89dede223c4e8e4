// Compressed frames (protocol 9, docs/protocol.md §1.1): a sender may replace any frame's
// payload of at least kCompressMinBytes by a Compressed message (type kCompressedType in either
// direction: `u8 type`, `u64 raw_length`, one zstd frame holding the original payload, its own
// type byte first). The sender decides per frame, by measuring: it compresses a sample of the
// payload and sends it raw unless the sample shrinks to at most kWorthRatio of its size, so
// random bytes (weights, encrypted data) cost a few microseconds and no wire bytes; data sets
// (labels, one-hot rows, zeros) go at a multiple of the link rate.
#pragma once
#include <cstdint>
#include <string>

#include "core/buffer.h"
#include "core/status.h"
#include "core/wire.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw::protocol {

// The Compressed message's type byte: ClientMsg 6 and ServerMsg 11 (messages.h) are this value's
// names in each direction; one value, so that one decoder serves both.
inline constexpr uint8_t kCompressedClientType = 6;
inline constexpr uint8_t kCompressedServerType = 12;
// Smaller frames go raw: their bytes are mostly a batch's op encodings, and a round trip costs
// more than their bytes at any link rate in the range (0.1-10 Gbit/s).
inline constexpr uint64_t kCompressMinBytes = 64 * 1024;
// Compress only when the sample shrinks to at most this fraction: below it the wire saves
// at least 20%, which pays at link rates up to a few Gbit/s against zstd level 1's ~0.5-2 GB/s.
inline constexpr double kWorthRatio = 0.8;
// The sample compressed to decide: its size and how many places of the payload it is taken from.
inline constexpr size_t kSampleBytes = 32 * 1024;

// When a sender compresses: never; when a frame's sample says it pays; (auto) as kMeasure, but
// only on a link worth it: a TCP or TLS connection to another host (loopback and unix:// move
// bytes faster than zstd compresses them).
enum class CompressMode : uint8_t { kOff, kMeasure, kAuto };
// TW_COMPRESS: "0" off, "1" measure on every link, unset or "auto": auto.
CompressMode compress_mode_from_env();
// Whether `mode` compresses on a connection to `host` (an IP address or name; "" for unix://).
bool compress_link(CompressMode mode, const std::string& host);

// `f` as a Compressed message of `type` when it is large enough and its sample pays; else `f`
// unchanged. Counts nothing: the caller counts what it sends.
OutFrame maybe_compress(OutFrame f, uint8_t type);
// Whether a received payload is a Compressed message of `type`.
inline bool is_compressed(const Buffer& payload, uint8_t type) {
  return payload.size() > 0 && payload.as<const uint8_t>()[0] == type;
}
// The original payload of a Compressed message; an error when it is malformed (code 7: it
// announces 0 bytes, does not decompress to exactly its length, or holds a Compressed message
// itself) or announces more than `limit` bytes (code 5, checked before allocating).
// `aligner` (as net::FrameReader's) places a reply's tensor bytes 64-byte aligned.
using PayloadAligner = size_t (*)(const uint8_t* payload, size_t n);
Result<Buffer> decompress(const Buffer& payload, uint64_t limit, PayloadAligner aligner = nullptr);

}  // namespace tw::protocol
TW_INTERNAL_END
