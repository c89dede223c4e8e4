#include "net/socket_stream.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <asio.hpp>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <mutex>

#include "core/env.h"
#include "net/keepalive.h"

namespace tw::net {

namespace {

using Proto = asio::generic::stream_protocol;

IoResult from_errno() {
  if (errno == EAGAIN || errno == EWOULDBLOCK) return {IoResult::kWouldBlock, 0, {}};
  return {IoResult::kError, 0, asio::error_code(errno, asio::system_category())};
}

// Completion condition for reading or writing a whole frame: asio's transfer_all() caps every
// read_some/write_some at 64 KiB, which turns a 256 MiB tensor into 4,096 system calls and as many
// trips through the reactor; this lets each call move everything the kernel will take.
struct TransferAll {
  size_t operator()(const asio::error_code& ec, size_t) const { return ec ? 0 : ~size_t{0}; }
};

bool is_unix(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  return ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0 &&
         addr.ss_family == AF_UNIX;
}

// Either family: the socket calls are the same, only dialing and listening differ.
class SocketStream final : public Stream {
 public:
  explicit SocketStream(Proto::socket sock)
      : sock_(std::move(sock)), fd_(sock_.native_handle()), unix_(is_unix(fd_)) {
    // Non-blocking from the start: reads and writes are tried from several threads with
    // MSG_DONTWAIT, and Asio then never changes the socket's mode under them.
    asio::error_code ec;
    sock_.non_blocking(true, ec);
  }

  ~SocketStream() override {
    for (int fd : held_fds_) ::close(fd);
    for (int fd : outgoing_fds_) ::close(fd);
  }

  IoResult try_read(asio::mutable_buffer into) override {
    if (unix_) return try_recvmsg(into);
    for (;;) {
      ssize_t got = ::recv(fd_, into.data(), into.size(), MSG_DONTWAIT);
      if (got > 0) return {IoResult::kDone, static_cast<size_t>(got), {}};
      if (got == 0) return {IoResult::kClosed, 0, {}};
      if (errno != EINTR) return from_errno();
    }
  }

  IoResult try_write(const asio::const_buffer* bufs, size_t count) override {
    iovec iov[64];
    count = std::min(count, std::size(iov));
    for (size_t i = 0; i < count; ++i) {
      iov[i].iov_base = const_cast<void*>(bufs[i].data());
      iov[i].iov_len = bufs[i].size();
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = count;
    // Queued descriptors ride on this call's bytes.
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxHeldFds)];
    std::unique_lock<std::mutex> lock(out_mu_, std::defer_lock);
    if (unix_) lock.lock();
    const size_t nfds = outgoing_fds_.size();
    if (nfds > 0) {
      msg.msg_control = control;
      msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
      std::memcpy(CMSG_DATA(c), outgoing_fds_.data(), sizeof(int) * nfds);
    }
    for (;;) {
      ssize_t sent = ::sendmsg(fd_, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (sent >= 0) {
        if (nfds > 0 && sent > 0) {  // the peer holds its own duplicates now
          for (size_t i = 0; i < nfds; ++i) ::close(outgoing_fds_[i]);
          outgoing_fds_.erase(outgoing_fds_.begin(), outgoing_fds_.begin() + nfds);
        }
        return {IoResult::kDone, static_cast<size_t>(sent), {}};
      }
      if (errno != EINTR) return from_errno();
    }
  }

  bool wait_readable(int timeout_ms) override { return wait_fd(fd_, POLLIN, timeout_ms); }
  bool wait_writable(int timeout_ms) override { return wait_fd(fd_, POLLOUT, timeout_ms); }

  // Over a Unix socket every read goes through try_recvmsg (Asio's reads pass no control buffer,
  // and a descriptor that arrives without one is lost) and every write through try_write (which
  // attaches queued descriptors): the async operations are loops of those over the reactor's
  // readiness waits.
  void async_read_some(asio::mutable_buffer into, IoHandler done) override {
    if (!unix_) return sock_.async_read_some(into, std::move(done));
    loop_read(into, 0, false, std::move(done));
  }
  void async_read(asio::mutable_buffer into, IoHandler done) override {
    if (!unix_) return asio::async_read(sock_, into, TransferAll(), std::move(done));
    loop_read(into, 0, true, std::move(done));
  }
  void async_write(const std::vector<asio::const_buffer>& bufs, IoHandler done) override {
    if (!unix_) return asio::async_write(sock_, bufs, TransferAll(), std::move(done));
    loop_write(bufs, 0, std::move(done));
  }

  bool passes_fds() const override { return unix_; }
  bool queue_fd(int fd) override {
    if (!unix_) return false;
    std::lock_guard<std::mutex> lock(out_mu_);
    if (outgoing_fds_.size() >= kMaxHeldFds) return false;
    int dup = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (dup < 0) return false;
    outgoing_fds_.push_back(dup);
    return true;
  }
  int take_fd() override {
    std::lock_guard<std::mutex> lock(fds_mu_);
    if (held_fds_.empty()) return -1;
    int fd = held_fds_.front();
    held_fds_.erase(held_fds_.begin());
    return fd;
  }

  // ::shutdown, not close(): safe while other threads have operations on the socket; the
  // descriptor itself closes with the stream.
  void shutdown() override { ::shutdown(fd_, SHUT_RDWR); }
  void shutdown_send() override { ::shutdown(fd_, SHUT_WR); }
  void close() override {
    asio::error_code ec;
    sock_.close(ec);
  }

 private:
  IoResult try_recvmsg(asio::mutable_buffer into) {
    iovec iov{into.data(), into.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxHeldFds)];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    for (;;) {
      ssize_t got = ::recvmsg(fd_, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) return from_errno();
      hold_fds(msg);
      if (got == 0) return {IoResult::kClosed, 0, {}};
      return {IoResult::kDone, static_cast<size_t>(got), {}};
    }
  }

  void hold_fds(msghdr& msg) {
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      std::lock_guard<std::mutex> lock(fds_mu_);
      for (size_t i = 0; i < n; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        if (held_fds_.size() < kMaxHeldFds) {
          held_fds_.push_back(fd);
        } else {
          ::close(fd);
        }
      }
    }
  }

  // The async loops over try_recvmsg/try_write: a try first (the stream contract), then a wait
  // for readiness on the reactor; the handler runs on the io_context, never inline.
  void loop_read(asio::mutable_buffer into, size_t got, bool all, IoHandler done) {
    for (;;) {
      IoResult r =
          try_recvmsg(asio::buffer(static_cast<char*>(into.data()) + got, into.size() - got));
      if (r.kind == IoResult::kDone) {
        got += r.bytes;
        if (!all || got == into.size()) return finish(std::move(done), {}, got);
        continue;
      }
      if (r.kind == IoResult::kClosed) return finish(std::move(done), asio::error::eof, got);
      if (r.kind == IoResult::kError) return finish(std::move(done), r.error, got);
      break;
    }
    sock_.async_wait(Proto::socket::wait_read, [this, into, got, all, done = std::move(done)](
                                                   const asio::error_code& ec) mutable {
      if (ec) return done(ec, got);
      loop_read(into, got, all, std::move(done));
    });
  }

  void loop_write(std::vector<asio::const_buffer> bufs, size_t sent, IoHandler done) {
    while (!bufs.empty()) {
      IoResult r = try_write(bufs.data(), bufs.size());
      if (r.kind == IoResult::kDone) {
        sent += r.bytes;
        consume(bufs, r.bytes);
        continue;
      }
      if (r.kind == IoResult::kError) return finish(std::move(done), r.error, sent);
      sock_.async_wait(Proto::socket::wait_write,
                       [this, bufs = std::move(bufs), sent,
                        done = std::move(done)](const asio::error_code& ec) mutable {
                         if (ec) return done(ec, sent);
                         loop_write(std::move(bufs), sent, std::move(done));
                       });
      return;
    }
    finish(std::move(done), {}, sent);
  }

  void finish(IoHandler done, asio::error_code ec, size_t n) {
    asio::post(sock_.get_executor(), [done = std::move(done), ec, n] { done(ec, n); });
  }

  Proto::socket sock_;
  const int fd_;  // sock_'s, read without touching the Asio object from other threads
  const bool unix_ = false;
  std::mutex out_mu_;              // a write may run on the I/O thread while another thread queues
  std::vector<int> outgoing_fds_;  // queue_fd's duplicates, sent with the next write
  std::mutex fds_mu_;
  std::vector<int> held_fds_;  // received, not yet taken
};

// Every TCP socket's options: no Nagle delay, and a silent peer detected (net/keepalive.h).
void set_nodelay(Proto::socket& sock) {
  int one = 1;
  ::setsockopt(sock.native_handle(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  detect_dead_peer(sock.native_handle(), dead_peer_deadline());
}

class SocketListener final : public Listener {
 public:
  SocketListener(asio::io_context& io, Url url, MakeStream make)
      : acc_(io), url_(std::move(url)), make_(std::move(make)) {}

  Status open(const Proto::endpoint& ep, const std::string& text) {
    asio::error_code ec;
    acc_.open(ep.protocol(), ec);
    if (!ec && tcp()) acc_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acc_.bind(ep, ec);
    if (!ec) acc_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return unavailable("cannot listen on " + text + ": " + ec.message());
    if (tcp()) {
      Proto::endpoint local = acc_.local_endpoint(ec);
      asio::ip::tcp::endpoint tep;
      std::memcpy(tep.data(), local.data(), std::min<size_t>(local.size(), sizeof(sockaddr_in6)));
      url_.port = tep.port();
    }
    return Status::OK();
  }

  const Url& url() const override { return url_; }

  void async_accept(asio::io_context& io, AcceptHandler done) override {
    acc_.async_accept(io, [this, done = std::move(done)](asio::error_code ec, Proto::socket sock) {
      if (ec) return done(ec, nullptr);
      if (tcp()) set_nodelay(sock);
      if (make_) {
        std::unique_ptr<Stream> s = make_(std::move(sock), ec);
        return done(ec, std::move(s));
      }
      done(ec, std::make_unique<SocketStream>(std::move(sock)));
    });
  }

  void close() override {
    asio::error_code ec;
    acc_.close(ec);
    if (!tcp()) ::unlink(url_.path.c_str());
  }

 private:
  bool tcp() const { return url_.scheme != Url::Scheme::kUnix; }
  asio::basic_socket_acceptor<Proto> acc_;
  Url url_;
  MakeStream make_;
};

const char* const kNotRunning = " (is tensorwire-server running there?)";

// How long a TCP connect may take: TW_CONNECT_TIMEOUT_MS, else 10 s. Without a bound a host that
// drops SYNs (a firewall, a full accept backlog) holds the caller for the kernel's ~2 minutes of
// retries.
int connect_timeout_ms() {
  const uint64_t v = env_number(Env::kCONNECT_TIMEOUT_MS).value_or(0);
  return v > 0 ? static_cast<int>(std::min<uint64_t>(v, 3'600'000)) : 10'000;
}

// connect() bounded by connect_timeout_ms(): non-blocking, then a poll for the outcome.
void connect_bounded(Proto::socket& sock, const Proto::endpoint& ep, asio::error_code& ec) {
  sock.non_blocking(true, ec);
  if (ec) return;
  // (::connect, not sock.connect: asio's synchronous connect waits for the outcome however the
  // socket is set.)
  if (::connect(sock.native_handle(), ep.data(), static_cast<socklen_t>(ep.size())) != 0) {
    // (Interrupted, it goes on in the background as a pending one does.)
    ec = errno == EINTR ? asio::error::in_progress
                        : asio::error_code(errno, asio::system_category());
  }
  if (ec == asio::error::in_progress || ec == asio::error::would_block) {
    pollfd p{sock.native_handle(), POLLOUT, 0};
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(connect_timeout_ms());
    int rc;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      rc = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(left.count(), 0)));
      if (rc >= 0 || errno != EINTR) break;
    }
    if (rc == 0) {
      ec = asio::error::timed_out;
      return;
    }
    int err = 0;
    socklen_t len = sizeof err;
    if (rc < 0 || ::getsockopt(sock.native_handle(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) {
      err = errno;
    }
    ec = err ? asio::error_code(err, asio::system_category()) : asio::error_code();
  }
  if (ec) return;
  sock.non_blocking(false, ec);
}

}  // namespace

bool wait_fd(int fd, short events, int timeout_ms) {
  pollfd p{fd, events, 0};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (int wait = timeout_ms;;) {
    const int rc = ::poll(&p, 1, wait);
    if (rc > 0 || (rc < 0 && errno != EINTR)) return true;
    if (rc == 0) return false;
    if (timeout_ms >= 0) {
      wait = static_cast<int>(std::max<int64_t>(
          0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
                                                                   std::chrono::steady_clock::now())
                 .count()));
    }
  }
}

Result<Socket> connect_socket(const Url& url, asio::io_context& io) {
  Proto::socket sock(io);
  asio::error_code ec;
  if (url.scheme != Url::Scheme::kUnix) {
    asio::ip::tcp::resolver resolver(io);
    auto results = resolver.resolve(url.host, std::to_string(url.port), ec);
    if (ec) return unavailable("cannot resolve " + url.str() + ": " + ec.message());
    for (const auto& r : results) {
      asio::ip::tcp::endpoint ep = r.endpoint();
      Proto::endpoint gep(ep.data(), ep.size());
      sock.close(ec);
      sock.open(gep.protocol(), ec);
      if (ec) continue;
      connect_bounded(sock, gep, ec);
      if (!ec) break;
    }
    if (ec == asio::error::timed_out) {
      return unavailable("cannot connect to " + url.str() + ": no answer within " +
                         std::to_string(connect_timeout_ms()) +
                         " ms (TW_CONNECT_TIMEOUT_MS): is the host up and the port open?");
    }
    if (ec)
      return unavailable("cannot connect to " + url.str() + ": " + ec.message() + kNotRunning);
    set_nodelay(sock);
  } else {
    Proto::endpoint gep{asio::local::stream_protocol::endpoint(url.path)};
    sock.open(gep.protocol(), ec);
    if (!ec) sock.connect(gep, ec);
    if (ec)
      return unavailable("cannot connect to " + url.str() + ": " + ec.message() + kNotRunning);
  }
  return sock;
}

Result<std::unique_ptr<Stream>> dial_socket(const Url& url, asio::io_context& io) {
  TW_ASSIGN_OR_RETURN(Socket sock, connect_socket(url, io));
  return std::unique_ptr<Stream>(std::make_unique<SocketStream>(std::move(sock)));
}

Result<std::unique_ptr<Listener>> listen_socket(const Url& url, asio::io_context& io,
                                                MakeStream make) {
  auto l = std::make_unique<SocketListener>(io, url, std::move(make));
  const std::string text = url.str();
  if (url.scheme != Url::Scheme::kUnix) {
    asio::error_code ec;
    asio::ip::tcp::resolver resolver(io);
    auto results = resolver.resolve(url.host, std::to_string(url.port), ec);
    if (ec || results.empty()) {
      return invalid_argument("cannot resolve listen address " + text + ": " + ec.message());
    }
    asio::ip::tcp::endpoint ep = results.begin()->endpoint();
    TW_RETURN_NOT_OK(l->open(Proto::endpoint(ep.data(), ep.size()), text));
  } else {
    // A socket file left by a server that did not stop cleanly would make bind fail, so it is
    // removed, but only once nothing answers there: removing the file of a live server would
    // leave it running and unreachable while this one took its address (tcp:// refuses a taken
    // port the same way).
    struct stat st;
    if (::stat(url.path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) {
      Proto::socket probe(io);
      asio::error_code ec;
      Proto::endpoint gep{asio::local::stream_protocol::endpoint(url.path)};
      probe.open(gep.protocol(), ec);
      if (!ec) probe.connect(gep, ec);
      if (!ec) {
        return unavailable("cannot listen on " + text +
                           ": another server is listening there (it accepted a connection); "
                           "stop it, or choose another path");
      }
      ::unlink(url.path.c_str());
    }
    TW_RETURN_NOT_OK(
        l->open(Proto::endpoint(asio::local::stream_protocol::endpoint(url.path)), text));
  }
  return std::unique_ptr<Listener>(std::move(l));
}

Result<std::unique_ptr<Stream>> adopt_socket(asio::io_context& io, int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return invalid_argument(std::string("not a socket: ") + std::strerror(errno));
  }
  asio::error_code ec;
  Proto::socket sock(io);
  sock.assign(Proto(addr.ss_family, SOCK_STREAM), fd, ec);
  if (ec) return invalid_argument("cannot adopt socket: " + ec.message());
  return std::unique_ptr<Stream>(std::make_unique<SocketStream>(std::move(sock)));
}

}  // namespace tw::net
