// The same-host shared-memory path's pieces: descriptors passed over a Unix socket stream
// (SCM_RIGHTS, with the bytes, through the try and async calls), and net::SharedSegment's
// checks on a descriptor it is handed (a memfd sealed against shrinking, as large as announced).
#include "net/shm.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <asio.hpp>
#include <cstring>
#include <future>
#include <numeric>

#include "net/socket_stream.h"
#include "net/stream.h"

namespace tw::net {
namespace {

struct Pair {
  asio::io_context io;
  std::unique_ptr<Stream> s[2];
  Pair() {
    int fd[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fd), 0);
    for (int i = 0; i < 2; ++i) s[i] = adopt_socket(io, fd[i]).value();
  }
};

// What a descriptor refers to, to tell a received duplicate from anything else.
std::pair<dev_t, ino_t> identity(int fd) {
  struct stat st;
  EXPECT_EQ(::fstat(fd, &st), 0);
  return {st.st_dev, st.st_ino};
}

TEST(Shm, AQueuedDescriptorArrivesWithTheBytesAndOnlyOnce) {
  Pair p;
  ASSERT_TRUE(p.s[0]->passes_fds());
  auto seg = SharedSegment::create(4096).value();
  ASSERT_TRUE(p.s[0]->queue_fd(seg->fd()));
  const char msg[] = "hello";
  asio::const_buffer b = asio::buffer(msg, 5);
  ASSERT_EQ(p.s[0]->try_write(&b, 1).bytes, 5u);
  asio::const_buffer b2 = asio::buffer(msg, 3);  // a second write carries none
  ASSERT_EQ(p.s[0]->try_write(&b2, 1).bytes, 3u);
  char got[16];
  size_t n = 0;
  while (n < 8) {
    p.s[1]->wait_readable();
    IoResult r = p.s[1]->try_read(asio::buffer(got + n, sizeof got - n));
    ASSERT_EQ(r.kind, IoResult::kDone);
    n += r.bytes;
  }
  EXPECT_EQ(std::string(got, 8), "hellohel");
  int fd = p.s[1]->take_fd();
  ASSERT_GE(fd, 0);
  EXPECT_EQ(identity(fd), identity(seg->fd()));
  EXPECT_EQ(p.s[1]->take_fd(), -1);
  // What one side writes into the mapping the other sees.
  auto peer = SharedSegment::adopt(fd, 4096);
  ASSERT_TRUE(peer.ok()) << peer.status().message();
  std::memcpy(seg->data(), "shared", 6);
  EXPECT_EQ(std::memcmp((*peer)->data(), "shared", 6), 0);
  (*peer)->consumed().store(7);
  EXPECT_EQ(seg->consumed().load(), 7u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(seg->data()) % 64, 0u);
}

TEST(Shm, DescriptorsTravelThroughTheAsyncCallsToo) {
  Pair p;
  auto seg = SharedSegment::create(1 << 20).value();
  ASSERT_TRUE(p.s[0]->queue_fd(seg->fd()));
  // Larger than the socket buffer, so the write and the read each take many steps.
  std::vector<uint8_t> out(8 << 20), in(out.size());
  std::iota(out.begin(), out.end(), uint8_t{0});
  std::promise<size_t> wrote, read;
  p.s[0]->async_write({asio::buffer(out)}, [&](const asio::error_code& ec, size_t n) {
    EXPECT_FALSE(ec) << ec.message();
    wrote.set_value(n);
  });
  p.s[1]->async_read(asio::buffer(in), [&](const asio::error_code& ec, size_t n) {
    EXPECT_FALSE(ec) << ec.message();
    read.set_value(n);
  });
  p.io.run();
  EXPECT_EQ(wrote.get_future().get(), out.size());
  EXPECT_EQ(read.get_future().get(), in.size());
  EXPECT_EQ(in, out);
  int fd = p.s[1]->take_fd();
  ASSERT_GE(fd, 0);
  EXPECT_EQ(identity(fd), identity(seg->fd()));
  ::close(fd);
}

TEST(Shm, APeerCannotFillTheDescriptorTable) {
  Pair p;
  int fd[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fd), 0);
  for (size_t i = 0; i < Stream::kMaxHeldFds; ++i) ASSERT_TRUE(p.s[0]->queue_fd(fd[0]));
  EXPECT_FALSE(p.s[0]->queue_fd(fd[0]));  // the sender bounds its queue as well
  const char x = 'x';
  asio::const_buffer b = asio::buffer(&x, 1);
  ASSERT_EQ(p.s[0]->try_write(&b, 1).bytes, 1u);
  for (size_t i = 0; i < Stream::kMaxHeldFds; ++i) ASSERT_TRUE(p.s[0]->queue_fd(fd[0]));
  ASSERT_EQ(p.s[0]->try_write(&b, 1).bytes, 1u);
  char got[2];
  size_t n = 0;
  while (n < 2) {
    p.s[1]->wait_readable();
    n += p.s[1]->try_read(asio::buffer(got + n, 2 - n)).bytes;
  }
  size_t held = 0;
  for (int f; (f = p.s[1]->take_fd()) >= 0; ++held) ::close(f);
  EXPECT_EQ(held, Stream::kMaxHeldFds);
  ::close(fd[0]);
  ::close(fd[1]);
}

TEST(Shm, AdoptRefusesWhatCouldFaultTheServer) {
  // Not a memfd at all.
  int fd[2];
  ASSERT_EQ(::pipe(fd), 0);
  ::close(fd[1]);
  auto r = SharedSegment::adopt(fd[0], 4096);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not a memfd"), std::string::npos) << r.status().message();
  // A memfd its owner may still shrink under the mapping.
  int m = ::memfd_create("t", MFD_ALLOW_SEALING);
  ASSERT_EQ(::ftruncate(m, 8192), 0);
  r = SharedSegment::adopt(::dup(m), 4096);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("F_SEAL_SHRINK"), std::string::npos) << r.status().message();
  // Sealed, but smaller than it claims.
  ASSERT_EQ(::fcntl(m, F_ADD_SEALS, F_SEAL_SHRINK), 0);
  r = SharedSegment::adopt(::dup(m), 1 << 20);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("fewer than"), std::string::npos) << r.status().message();
  // Sealed and large enough.
  EXPECT_TRUE(SharedSegment::adopt(::dup(m), 8192 - SharedSegment::kHeaderBytes).ok());
  ::close(m);
  EXPECT_FALSE(SharedSegment::adopt(-1, 10).ok());
}

TEST(Shm, ParallelCopyCopiesEveryByte) {
  for (size_t n : {size_t{0}, size_t{100}, (size_t{9} << 20) + 3}) {
    std::vector<uint8_t> a(n), b(n, 0);
    for (size_t i = 0; i < n; ++i) a[i] = static_cast<uint8_t>(i * 31 + 7);
    parallel_copy(b.data(), a.data(), n);
    EXPECT_EQ(a, b);
  }
}

}  // namespace
}  // namespace tw::net
