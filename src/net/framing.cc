#include "net/framing.h"

#include <algorithm>
#include <asio/error.hpp>
#include <cstring>

namespace tw::net {

FrameWriter::Step FrameWriter::pump(Stream& s) {
  while (!queue_.empty()) {
    if (bufs_.empty()) frame_buffers(queue_.front(), header_, bufs_);
    while (!bufs_.empty()) {
      IoResult r = s.try_write(bufs_.data(), bufs_.size());
      if (r.kind == IoResult::kWouldBlock) return Step::kAsync;
      if (r.kind != IoResult::kDone) {
        error_ = r.kind == IoResult::kError ? r.error : asio::error_code(asio::error::eof);
        return Step::kError;
      }
      consume(bufs_, r.bytes);
    }
    queued_bytes_ -= queue_.front().payload_size() + 4;
    queue_.pop_front();
  }
  return Step::kIdle;
}

namespace {
// A buffer of `len` bytes that starts `shift` bytes past a 64-byte boundary.
Buffer shifted(size_t len, size_t shift) {
  return shift == 0 ? Buffer::allocate(len) : Buffer::allocate(shift + len).slice(shift, len);
}
}  // namespace

FrameReader::Next FrameReader::next(uint64_t limit, Buffer* frame) {
  size_t have = end_ - begin_;
  if (have < 4) return Next::kNeedBytes;
  uint8_t header[4];
  std::memcpy(header, staging_.data() + begin_, 4);
  announced_ = frame_length(header);
  if (announced_ > limit) return Next::kTooLarge;
  size_t len = static_cast<size_t>(announced_);
  const uint8_t* payload = staging_.data() + begin_ + 4;
  size_t shift = 0, at = 0;
  if (aligner_ != nullptr) {
    const size_t n = std::min(have - 4, len);
    at = aligner_(payload, n);
    // The staging buffer always has room for a header, so waiting for the rest of it is safe; a
    // whole frame too short to tell is the decoder's to reject.
    if (at == kNeedMore && n < len) return Next::kNeedBytes;
    if (at == kNeedMore) at = 0;
    constexpr size_t kAlign = 64;
    shift = (kAlign - at % kAlign) % kAlign;
  }
  if (have - 4 >= len) {
    *frame = shifted(len, shift);
    if (len) std::memcpy(frame->data(), payload, len);
    begin_ += 4 + len;
    return Next::kFrame;
  }
  if (4 + len <= staging_.size()) return Next::kNeedBytes;  // fits once the rest arrives
  if (divert_ && at > 0 && at < len && 4 + at <= staging_.size()) {
    if (have - 4 < at) return Next::kNeedBytes;  // the hook sees the whole head
    if (divert_frame(payload, have, at, len)) return Next::kLarge;
  }
  *frame = shifted(len, shift);
  copied_ = have - 4;
  std::memcpy(frame->data(), staging_.data() + begin_ + 4, copied_);
  begin_ = end_ = 0;
  return Next::kLarge;
}

bool FrameReader::divert_frame(const uint8_t* payload, size_t have, size_t at, size_t len) {
  Buffer into = divert_(payload, at, len);
  if (into.size() != len - at) return false;
  large_ = Buffer::allocate(at);
  std::memcpy(large_.data(), payload, at);
  copied_ = at;
  into_copied_ = have - 4 - at;  // < len - at: the frame is not all staged
  std::memcpy(into.data(), payload + at, into_copied_);
  into_ = std::move(into);
  begin_ = end_ = 0;
  return true;
}

void FrameReader::reset() {
  begin_ = end_ = 0;
  announced_ = 0;
  copied_ = into_copied_ = 0;
  large_ = into_ = diverted_ = Buffer();
  drained_ = false;
}

FrameReader::Poll FrameReader::read_frame(Stream& s, Buffer* frame, asio::error_code* err,
                                          uint64_t* bytes, uint64_t limit) {
  diverted_ = Buffer();  // (the caller took it after the frame it came with)
  for (;;) {
    if (large_.size()) {
      if (copied_ == large_.size() && into_copied_ == into_.size()) {
        *frame = std::move(large_);
        large_ = Buffer();
        diverted_ = std::move(into_);
        into_ = Buffer();
        into_copied_ = 0;
        return Poll::kFrame;
      }
    } else {
      Next n = next(limit, frame);
      if (n == Next::kFrame) return Poll::kFrame;
      if (n == Next::kTooLarge) return Poll::kTooLarge;
      if (n == Next::kLarge) {
        if (!into_.size()) large_ = *frame;  // (a diverted frame's head is large_ already)
        continue;
      }
    }
    asio::mutable_buffer room = space();
    if (drained_) {
      drained_ = false;
      return Poll::kWouldBlock;
    }
    IoResult r = s.try_read(room);
    switch (r.kind) {
      case IoResult::kDone:
        drained_ = r.bytes < room.size();
        *bytes += r.bytes;
        received(r.bytes);
        break;
      case IoResult::kWouldBlock: return Poll::kWouldBlock;
      case IoResult::kClosed: return Poll::kClosed;
      case IoResult::kError: *err = r.error; return Poll::kError;
    }
  }
}

bool FrameReader::has_frame() const {
  if (large_.size()) return copied_ == large_.size() && into_copied_ == into_.size();
  if (end_ - begin_ < 4) return false;
  uint8_t header[4];
  std::memcpy(header, staging_.data() + begin_, 4);
  return end_ - begin_ - 4 >= frame_length(header);
}

asio::mutable_buffer FrameReader::space() {
  if (into_.size()) return asio::buffer(into_.data() + into_copied_, into_.size() - into_copied_);
  if (large_.size()) return asio::buffer(large_.data() + copied_, large_.size() - copied_);
  if (begin_ > 0) {
    std::memmove(staging_.data(), staging_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  return asio::buffer(staging_.data() + end_, staging_.size() - end_);
}

void FrameWriter::async_done() {
  writing_ = false;
  bufs_.clear();
  if (!queue_.empty()) {
    queued_bytes_ -= queue_.front().payload_size() + 4;
    queue_.pop_front();
  }
}

}  // namespace tw::net
