// FrameReader (src/net/framing.h) over an arbitrary byte stream, received in arbitrary pieces.
// Input: [staging size selector][receive size selector] then the stream. Every frame cut out
// must be exactly what its header announced, and the frames and headers must account for every
// byte of the stream up to where the reader stops.
#include <algorithm>
#include <cstring>

#include "fuzz_util.h"
#include "net/framing.h"

namespace {

// Pre-handshake frames are at most 64 KiB on the server; the fuzzer need not allocate more.
constexpr uint64_t kLimit = 64 * 1024;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using tw::net::FrameReader;
  if (size < 2) return 0;
  // Small staging buffers reach the large-frame path (a frame read into its own buffer) and the
  // compaction of staged bytes with short inputs.
  const size_t staging = 4 + size_t{data[0]} * 4;
  const size_t piece = 1 + size_t{data[1]};
  const uint8_t* stream = data + 2;
  const size_t n = size - 2;
  FrameReader reader(staging);
  size_t fed = 0;     // bytes handed to the reader
  size_t framed = 0;  // bytes accounted for by complete frames (headers included)
  for (;;) {
    tw::Buffer frame;
    const FrameReader::Next next = reader.next(kLimit, &frame);
    if (next == FrameReader::Next::kTooLarge) {
      tw::fuzz::check(reader.announced() > kLimit, "kTooLarge for a frame within the limit");
      return 0;
    }
    if (next == FrameReader::Next::kFrame) {
      tw::fuzz::check(framed + 4 + frame.size() <= fed, "frame extends past the bytes received");
      uint8_t header[4];
      std::memcpy(header, stream + framed, 4);
      tw::fuzz::check(tw::net::frame_length(header) == frame.size(), "frame size != header");
      tw::fuzz::check(
          frame.size() == 0 || std::memcmp(frame.data(), stream + framed + 4, frame.size()) == 0,
          "frame bytes differ from the stream");
      framed += 4 + frame.size();
      continue;
    }
    if (next == FrameReader::Next::kLarge) {
      // Receive the rest straight into the frame's own buffer, as the server does.
      asio::mutable_buffer rest = reader.rest(frame);
      const size_t want = rest.size();
      if (fed + want > n) return 0;  // the stream ends inside the frame
      std::memcpy(rest.data(), stream + fed, want);
      fed += want;
      tw::fuzz::check(std::memcmp(frame.data(), stream + framed + 4, frame.size()) == 0,
                      "large frame bytes differ from the stream");
      framed += 4 + frame.size();
      tw::fuzz::check(framed == fed, "large frame does not end where its bytes do");
      continue;
    }
    // kNeedBytes
    if (fed == n) break;
    asio::mutable_buffer room = reader.space();
    tw::fuzz::check(room.size() > 0, "kNeedBytes with no room to receive");
    const size_t take = std::min({room.size(), piece, n - fed});
    std::memcpy(room.data(), stream + fed, take);
    reader.received(take);
    fed += take;
  }
  tw::fuzz::check(!reader.has_frame(), "has_frame() after next() asked for more bytes");
  tw::fuzz::check(fed - framed <= staging, "more bytes staged than the staging buffer holds");
  return 0;
}
