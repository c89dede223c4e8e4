// net::FrameReader and net::FrameWriter over a real socket pair (each end a net::Stream):
// frames cut out of one receive,
// frames split across receives, frames larger than the staging buffer, the size limit, and a
// writer whose socket buffer fills up.
#include "net/framing.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <numeric>

#include "net/socket_stream.h"

namespace tw::net {
namespace {

// The raw descriptors, to play the peer, and a Stream over a duplicate of each.
struct SocketPair {
  int fd[2] = {-1, -1};
  asio::io_context io;
  std::unique_ptr<Stream> s[2];
  SocketPair() {
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fd), 0);
    for (int i = 0; i < 2; ++i) s[i] = adopt_socket(io, ::dup(fd[i])).value();
  }
  ~SocketPair() {
    ::close(fd[0]);
    ::close(fd[1]);
  }
};

std::vector<uint8_t> framed(const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> out;
  out.reserve(4 + payload.size());
  uint32_t n = static_cast<uint32_t>(payload.size());
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(n >> (8 * i)));
  for (uint8_t b : payload) out.push_back(b);
  return out;
}

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v;
  v.reserve(n);
  for (size_t i = 0; i < n; ++i) v.push_back(static_cast<uint8_t>(seed + i * 7));
  return v;
}

void send_bytes(int fd, const std::vector<uint8_t>& b) {
  size_t off = 0;
  while (off < b.size()) {
    ssize_t n = ::send(fd, b.data() + off, b.size() - off, 0);
    ASSERT_GT(n, 0);
    off += static_cast<size_t>(n);
  }
}

std::vector<uint8_t> bytes_of(const Buffer& b) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(b.data());
  return std::vector<uint8_t>(p, p + b.size());
}

// Sends the payloads framed, in pieces of `piece` bytes, and reads frames as they come; returns
// them in order. `*bytes` counts what the reader received; `check` sees each frame.
std::vector<std::vector<uint8_t>> deliver_in_pieces(
    SocketPair& sp, FrameReader& reader, const std::vector<std::vector<uint8_t>>& payloads,
    size_t piece, uint64_t* bytes, const std::function<void(const Buffer&, size_t)>& check = {}) {
  std::vector<uint8_t> stream;
  for (auto& p : payloads) {
    auto f = framed(p);
    stream.insert(stream.end(), f.begin(), f.end());
  }
  std::vector<std::vector<uint8_t>> got;
  size_t off = 0;
  while (got.size() < payloads.size()) {
    if (off < stream.size()) {
      size_t n = std::min(piece, stream.size() - off);
      send_bytes(sp.fd[0], std::vector<uint8_t>(stream.begin() + off, stream.begin() + off + n));
      off += n;
    }
    for (;;) {
      Buffer frame;
      asio::error_code err;
      FrameReader::Poll r = reader.read_frame(*sp.s[1], &frame, &err, bytes);
      if (r == FrameReader::Poll::kWouldBlock) break;
      EXPECT_EQ(r, FrameReader::Poll::kFrame) << err.message();
      if (r != FrameReader::Poll::kFrame) return got;
      if (check) check(frame, got.size());
      got.push_back(bytes_of(frame));
    }
  }
  return got;
}

TEST(Framing, ConsumeDropsWholeAndPartialBuffers) {
  uint8_t a[3], b[5], c[2];
  std::vector<asio::const_buffer> bufs = {asio::buffer(a), asio::buffer(b), asio::buffer(c)};
  consume(bufs, 4);
  ASSERT_EQ(bufs.size(), 2u);
  EXPECT_EQ(bufs[0].data(), b + 1);
  EXPECT_EQ(bufs[0].size(), 4u);
  consume(bufs, 4);
  ASSERT_EQ(bufs.size(), 1u);
  EXPECT_EQ(bufs[0].data(), c);
  consume(bufs, 2);
  EXPECT_TRUE(bufs.empty());
}

TEST(Framing, ReaderCutsManyFramesFromOneReceiveAndJoinsSplitOnes) {
  SocketPair sp;
  FrameReader reader(64);  // a tiny staging buffer: every path is exercised
  std::vector<std::vector<uint8_t>> payloads = {pattern(3, 1),  pattern(0, 0),  pattern(10, 2),
                                                pattern(60, 3), pattern(61, 4), pattern(5000, 5)};
  // Delivered in odd-sized pieces, read as they come.
  uint64_t bytes = 0;
  EXPECT_EQ(deliver_in_pieces(sp, reader, payloads, 37, &bytes), payloads);
  uint64_t sent = 0;
  for (auto& p : payloads) sent += 4 + p.size();
  EXPECT_EQ(bytes, sent);
}

// An aligner that reads the offset to align from the payload's first byte (and needs that byte).
size_t first_byte_offset(const uint8_t* payload, size_t n) {
  return n == 0 ? FrameReader::kNeedMore : payload[0];
}

TEST(Framing, ReaderLandsTheAlignersOffsetOn64Bytes) {
  SocketPair sp;
  FrameReader reader(64, first_byte_offset);
  // Small frames cut from staging, large ones received in place, and an empty frame (too short
  // for the aligner to tell, yet whole: it must come out, not wait for more).
  std::vector<std::vector<uint8_t>> payloads = {pattern(0, 0), pattern(40, 31), pattern(5000, 17),
                                                pattern(9, 3), pattern(3000, 64)};
  for (auto& p : payloads) {
    if (!p.empty()) p[0] = static_cast<uint8_t>(p[0] % 64);
  }
  uint64_t bytes = 0;
  auto got = deliver_in_pieces(sp, reader, payloads, 29, &bytes, [](const Buffer& frame, size_t i) {
    if (frame.size() == 0) return;
    const auto* p = reinterpret_cast<const uint8_t*>(frame.data());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p + p[0]) % 64, 0u) << "frame " << i;
  });
  EXPECT_EQ(got, payloads);
}

TEST(Framing, ReaderDivertsALargeFramesBulkWhereTheHookSays) {
  SocketPair sp;
  FrameReader reader(64, first_byte_offset);
  // Payload byte 0: the aligner's offset (the head's length); byte 1: 1 asks the hook to divert,
  // 2 to answer a Buffer of the wrong size (ignored: the frame comes whole).
  std::vector<std::vector<uint8_t>> payloads = {pattern(5000, 17), pattern(3000, 5),
                                                pattern(40, 3),    pattern(200, 8),
                                                pattern(100, 1),   pattern(4000, 2)};
  const uint8_t divert[] = {1, 0, 1, 1, 2, 1};
  for (size_t i = 0; i < payloads.size(); ++i) {
    payloads[i][0] = 10;
    payloads[i][1] = divert[i];
  }
  std::vector<Buffer> places;
  reader.set_divert([&](const uint8_t* payload, size_t at, size_t len) {
    EXPECT_EQ(at, 10u);
    if (payload[1] == 0) return Buffer();
    places.push_back(Buffer::allocate(payload[1] == 1 ? len - at : len - at - 1));
    return places.back();
  });
  std::vector<std::vector<uint8_t>> whole;
  std::vector<size_t> diverted_at;
  uint64_t bytes = 0;
  auto got = deliver_in_pieces(sp, reader, payloads, 23, &bytes, [&](const Buffer&, size_t i) {
    Buffer d = reader.take_diverted();
    if (d.size()) diverted_at.push_back(i);
    whole.push_back(bytes_of(d));
  });
  ASSERT_EQ(got.size(), payloads.size());
  for (size_t i = 0; i < got.size(); ++i)
    got[i].insert(got[i].end(), whole[i].begin(), whole[i].end());
  EXPECT_EQ(got, payloads);
  // Diverted: the large frames whose hook answered a Buffer of the right size (frame 2 fits the
  // staging buffer, frame 4's Buffer is a byte short); into the hook's own Buffers.
  EXPECT_EQ(diverted_at, (std::vector<size_t>{0, 3, 5}));
  ASSERT_EQ(places.size(), 4u);
  EXPECT_EQ(bytes_of(places[0]), std::vector<uint8_t>(payloads[0].begin() + 10, payloads[0].end()));
}

TEST(Framing, ReaderRefusesAFrameOverTheLimitBeforeReadingIt) {
  SocketPair sp;
  FrameReader reader;
  send_bytes(sp.fd[0], framed(pattern(100, 9)));
  Buffer frame;
  asio::error_code err;
  uint64_t bytes = 0;
  EXPECT_EQ(reader.read_frame(*sp.s[1], &frame, &err, &bytes, 99), FrameReader::Poll::kTooLarge);
  EXPECT_EQ(reader.announced(), 100u);
  EXPECT_EQ(reader.read_frame(*sp.s[1], &frame, &err, &bytes, 100), FrameReader::Poll::kFrame);
  EXPECT_EQ(bytes_of(frame), pattern(100, 9));
}

TEST(Framing, ReaderReportsThePeerClosing) {
  SocketPair sp;
  FrameReader reader;
  auto f = framed(pattern(20, 1));
  send_bytes(sp.fd[0], std::vector<uint8_t>(f.begin(), f.begin() + 10));  // cut short
  ::shutdown(sp.fd[0], SHUT_WR);
  Buffer frame;
  asio::error_code err;
  uint64_t bytes = 0;
  FrameReader::Poll r = reader.read_frame(*sp.s[1], &frame, &err, &bytes);
  if (r == FrameReader::Poll::kWouldBlock) r = reader.read_frame(*sp.s[1], &frame, &err, &bytes);
  EXPECT_EQ(r, FrameReader::Poll::kClosed);
}

TEST(Framing, WriterHandsWhatTheSocketCannotTakeToAnAsyncWrite) {
  SocketPair sp;
  int small = 4096;
  ::setsockopt(sp.fd[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
  FrameWriter writer;
  std::vector<uint8_t> big = pattern(1 << 20, 3);
  for (int i = 0; i < 3; ++i) {
    OutFrame f;
    f.head = i == 1 ? big : pattern(100 + i, static_cast<uint8_t>(i));
    writer.push(std::move(f));
  }
  ASSERT_EQ(writer.pump(*sp.s[0]), FrameWriter::Step::kAsync);
  // Play the async write: drain the peer while writing what is pending, blocking.
  std::vector<uint8_t> received;
  auto drain = [&] {
    uint8_t buf[65536];
    for (;;) {
      ssize_t n = ::recv(sp.fd[1], buf, sizeof buf, MSG_DONTWAIT);
      if (n <= 0) return;
      received.insert(received.end(), buf, buf + n);
    }
  };
  for (;;) {
    std::vector<asio::const_buffer> rest = writer.pending();
    while (!rest.empty()) {
      ssize_t n = ::send(sp.fd[0], rest[0].data(), rest[0].size(), MSG_DONTWAIT);
      if (n > 0) consume(rest, static_cast<size_t>(n));
      drain();
    }
    writer.async_done();
    FrameWriter::Step s = writer.pump(*sp.s[0]);
    if (s == FrameWriter::Step::kIdle) break;
    ASSERT_EQ(s, FrameWriter::Step::kAsync);
  }
  EXPECT_TRUE(writer.idle());
  drain();
  std::vector<uint8_t> expect;
  for (int i = 0; i < 3; ++i) {
    auto f = framed(i == 1 ? big : pattern(100 + i, static_cast<uint8_t>(i)));
    expect.insert(expect.end(), f.begin(), f.end());
  }
  EXPECT_EQ(received.size(), expect.size());
  EXPECT_TRUE(received == expect);
}

}  // namespace
}  // namespace tw::net
