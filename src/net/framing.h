// Frames on a byte stream: u32 little-endian payload length, then the payload. Building the
// gather list for an OutFrame (its head bytes interleaved with zero-copy segments).
#pragma once
#include <asio/buffer.hpp>
#include <asio/error_code.hpp>
#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

#include "core/buffer.h"
#include "core/wire.h"
#include "net/stream.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw::net {

// Fills `header` with the frame length and `out` with the buffers to write, in order. The
// frame, header and segments must stay alive until the write completes.
inline void frame_buffers(const OutFrame& f, uint8_t (&header)[4],
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

// The frames queued for one stream. Each frame is offered to the stream straight from the
// thread that queues it (Stream::try_write, a non-blocking sendmsg on a socket: a small reply or
// batch costs one system call and wakes no I/O thread); whatever the stream does not take then
// is left for one Stream::async_write, which the owner starts. Not thread-safe: the owner
// serialises every call with its own lock, and its write handler takes that lock before calling
// async_done().
class FrameWriter {
 public:
  enum class Step {
    kIdle,   // everything queued has been written
    kAsync,  // the stream would block: start async_write(pending()) and call async_done()
    kError,  // the stream failed; error() says how
  };
  void push(OutFrame f) {
    queued_bytes_ += f.payload_size() + 4;
    queue_.push_back(std::move(f));
  }
  // Bytes (headers included) of the frames queued and not yet all written: what a producer
  // that outpaces the stream holds (the client's flow-control window, client/flow_control.cc).
  uint64_t queued_bytes() const { return queued_bytes_; }
  // Writes queued frames without blocking. Call after push() unless writing() is true (an
  // async write is under way and will continue with the rest).
  Step pump(Stream& s);
  // The rest of the front frame, for the async write. Valid until async_done().
  const std::vector<asio::const_buffer>& pending() const { return bufs_; }
  void set_writing(bool w) { writing_ = w; }
  bool writing() const { return writing_; }
  // The async write of pending() completed: the front frame is out.
  void async_done();
  bool idle() const { return queue_.empty() && !writing_; }
  const asio::error_code& error() const { return error_; }

 private:
  std::deque<OutFrame> queue_;            // front: being written; deque keeps frames in place
  std::vector<asio::const_buffer> bufs_;  // what is left of the front frame; empty: not started
  uint8_t header_[4] = {};
  bool writing_ = false;
  uint64_t queued_bytes_ = 0;
  asio::error_code error_;
};

// Splits a received byte stream into frames. Bytes arrive in a fixed staging buffer, so one
// receive can bring many small frames (a reply and the batch behind it cost one system call);
// a frame that fits there is copied out into a pooled Buffer, a larger one is read straight into
// its own Buffer. Not thread-safe: one read is outstanding per stream at a time.
class FrameReader {
 public:
  static constexpr size_t kStagingBytes = 64 * 1024;
  enum class Next {
    kFrame,      // *frame is the next frame's payload
    kNeedBytes,  // receive more into space(), then call received()
    kTooLarge,   // the next header announces announced() bytes, over the caller's limit
    kLarge,      // *frame is sized for the next frame, the staged part copied in; read rest(*frame)
  };
  // The server gives each connection a small staging buffer (idle sessions cost little memory);
  // the client one large one.
  // Where a frame's bulk data starts, from its first `n` bytes: the payload offset that should
  // land 64-byte aligned (0: none), or kNeedMore when `n` bytes cannot tell yet. Lets a reader
  // hand out tensor bytes that element pointers may address (the client's ReadResult).
  using Aligner = size_t (*)(const uint8_t* payload, size_t n);
  static constexpr size_t kNeedMore = ~size_t{0};
  explicit FrameReader(size_t staging_bytes = kStagingBytes, Aligner aligner = nullptr)
      : staging_(staging_bytes), aligner_(aligner) {}
  Next next(uint64_t limit, Buffer* frame);

  // Diverting a large frame's bulk bytes (read_frame only; needs an aligner): once a frame too
  // large for staging has its aligner's offset `at` staged, the hook sees the payload's first
  // `at` bytes and the payload's length `len`, and may name a Buffer of exactly len - at bytes
  // where bytes [at, len) are to be received (the client lands a read straight in a caller's
  // destination: one copy, from the kernel to there). read_frame() then returns the frame as
  // its first `at` bytes only, and take_diverted() the Buffer holding the rest. An empty Buffer
  // (or one of another size): the frame is received whole, as without the hook.
  using Divert = std::function<Buffer(const uint8_t* payload, size_t at, size_t len)>;
  void set_divert(Divert divert) { divert_ = std::move(divert); }
  // The bytes diverted from the frame read_frame() returned last (empty when none were).
  Buffer take_diverted() { return std::move(diverted_); }
  // Forgets every byte received (a new stream follows); the configuration stays.
  void reset();

  // Non-blocking receive (Stream::try_read) for one frame at a time, a large frame across
  // calls. kFrame: *frame is the next payload. kWouldBlock: nothing more now; a receive that
  // returned less than it asked for counts as having emptied the stream, which spares the system
  // call that would say so (wait with Stream::wait_readable() or async_read_some(), which
  // stream.h requires to return at once for bytes already there). kTooLarge: the header
  // announces more than `limit` (announced()). kError: `*err` says why. `*bytes` counts the
  // bytes received.
  enum class Poll { kFrame, kWouldBlock, kClosed, kTooLarge, kError };
  Poll read_frame(Stream& s, Buffer* frame, asio::error_code* err, uint64_t* bytes,
                  uint64_t limit = 0xFFFFFFFFu);

  // Where the next bytes go: the rest of a large frame read_frame() is receiving, else the
  // staging buffer (compacted first).
  asio::mutable_buffer space();
  void received(size_t n) {
    if (into_.size()) {
      into_copied_ += n;
    } else if (large_.size()) {
      copied_ += n;
    } else {
      end_ += n;
    }
  }
  uint64_t announced() const { return announced_; }
  // A complete frame is staged (next() would return it without receiving).
  bool has_frame() const;
  // What is still to be read of a kLarge frame.
  asio::mutable_buffer rest(const Buffer& frame) const {
    return asio::buffer(frame.data() + copied_, frame.size() - copied_);
  }

 private:
  std::vector<uint8_t> staging_;
  Aligner aligner_;
  size_t begin_ = 0, end_ = 0;  // staged, unconsumed bytes
  uint64_t announced_ = 0;
  size_t copied_ = 0;     // of a kLarge frame, bytes taken from staging (read_frame: received)
  Buffer large_;          // read_frame: a large frame being received
  bool drained_ = false;  // read_frame: the last receive emptied the socket
  Divert divert_;
  // read_frame, a diverted frame: its head is large_ (all of it staged, copied_ == its size),
  // the rest lands in into_, into_copied_ of it so far; diverted_ holds it once the frame is out.
  Buffer into_, diverted_;
  size_t into_copied_ = 0;
  // next()'s part for a diverted frame: sets up large_ and into_ when the hook names a place.
  bool divert_frame(const uint8_t* payload, size_t have, size_t at, size_t len);
};

inline uint32_t frame_length(const uint8_t (&header)[4]) {
  return uint32_t{header[0]} | uint32_t{header[1]} << 8 | uint32_t{header[2]} << 16 |
         uint32_t{header[3]} << 24;
}

}  // namespace tw::net
TW_INTERNAL_END
