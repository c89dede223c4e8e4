#include "net/framing.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

namespace tw::net {

void consume(std::vector<asio::const_buffer>& bufs, size_t n) {
  size_t i = 0;
  while (i < bufs.size() && n >= bufs[i].size()) n -= bufs[i++].size();
  bufs.erase(bufs.begin(), bufs.begin() + static_cast<ptrdiff_t>(i));
  if (n && !bufs.empty()) bufs.front() += n;
}

FrameWriter::Step FrameWriter::pump(int fd) {
  iovec iov[64];
  while (!queue_.empty()) {
    if (bufs_.empty()) frame_buffers(queue_.front(), header_, bufs_);
    while (!bufs_.empty()) {
      size_t count = std::min<size_t>(bufs_.size(), std::size(iov));
      for (size_t i = 0; i < count; ++i) {
        iov[i].iov_base = const_cast<void*>(bufs_[i].data());
        iov[i].iov_len = bufs_[i].size();
      }
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = count;
      ssize_t sent = ::sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (sent < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return Step::kAsync;
        error_ = asio::error_code(errno, asio::system_category());
        return Step::kError;
      }
      consume(bufs_, static_cast<size_t>(sent));
    }
    queue_.pop_front();
  }
  return Step::kIdle;
}

FrameReader::Next FrameReader::next(uint64_t limit, Buffer* frame) {
  size_t have = end_ - begin_;
  if (have < 4) return Next::kNeedBytes;
  uint8_t header[4];
  std::memcpy(header, staging_.data() + begin_, 4);
  announced_ = frame_length(header);
  if (announced_ > limit) return Next::kTooLarge;
  size_t len = static_cast<size_t>(announced_);
  if (have - 4 >= len) {
    *frame = Buffer::copy_of(staging_.data() + begin_ + 4, len);
    begin_ += 4 + len;
    return Next::kFrame;
  }
  if (4 + len <= staging_.size()) return Next::kNeedBytes;  // fits once the rest arrives
  *frame = Buffer::allocate(len);
  copied_ = have - 4;
  std::memcpy(frame->data(), staging_.data() + begin_ + 4, copied_);
  begin_ = end_ = 0;
  return Next::kLarge;
}

FrameReader::Poll FrameReader::read_frame(int fd, Buffer* frame, int* err, uint64_t* bytes, uint64_t limit) {
  for (;;) {
    if (large_.size()) {
      if (copied_ == large_.size()) {
        *frame = std::move(large_);
        large_ = Buffer();
        return Poll::kFrame;
      }
    } else {
      Next n = next(limit, frame);
      if (n == Next::kFrame) return Poll::kFrame;
      if (n == Next::kTooLarge) return Poll::kTooLarge;
      if (n == Next::kLarge) {
        large_ = *frame;
        continue;
      }
    }
    asio::mutable_buffer room = space();
    void* dst = room.data();
    size_t want = room.size();
    if (drained_) {
      drained_ = false;
      return Poll::kWouldBlock;
    }
    ssize_t got = ::recv(fd, dst, want, MSG_DONTWAIT);
    if (got > 0) {
      drained_ = static_cast<size_t>(got) < want;
      *bytes += static_cast<uint64_t>(got);
      received(static_cast<size_t>(got));
      continue;
    }
    if (got == 0) return Poll::kClosed;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Poll::kWouldBlock;
    *err = errno;
    return Poll::kError;
  }
}

bool FrameReader::has_frame() const {
  if (large_.size()) return copied_ == large_.size();
  if (end_ - begin_ < 4) return false;
  uint8_t header[4];
  std::memcpy(header, staging_.data() + begin_, 4);
  return end_ - begin_ - 4 >= frame_length(header);
}

asio::mutable_buffer FrameReader::space() {
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
  if (!queue_.empty()) queue_.pop_front();
}

}  // namespace tw::net
