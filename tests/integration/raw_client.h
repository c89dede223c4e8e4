// A plain POSIX-socket client for fault tests: sends arbitrary bytes or hand-encoded frames to a
// server and decodes what comes back, with a receive timeout so that no test can hang on a
// silent server. It also frames the other end of an accepted connection (a stand-in server).
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "protocol/messages.h"
#include "support/frames.h"

namespace tw::testing {

// "tcp://127.0.0.1:41234" -> 41234.
inline uint16_t port_of(const std::string& url) {
  size_t colon = url.rfind(':');
  if (url.rfind("tcp://", 0) != 0 || colon == std::string::npos) {
    throw std::runtime_error("not a tcp url: " + url);
  }
  return static_cast<uint16_t>(std::stoi(url.substr(colon + 1)));
}

inline std::vector<uint8_t> le32(uint32_t v) {
  return {static_cast<uint8_t>(v), static_cast<uint8_t>(v >> 8), static_cast<uint8_t>(v >> 16),
          static_cast<uint8_t>(v >> 24)};
}

class RawClient {
 public:
  explicit RawClient(const std::string& url, int timeout_ms = 5000) : timeout_ms_(timeout_ms) {
    if (url.rfind("unix://", 0) == 0) {
      // A Unix socket: the shared-memory tests pass descriptors with send_frame_with_fd().
      fd_ = ::socket(AF_UNIX, SOCK_STREAM, 0);
      sockaddr_un a{};
      a.sun_family = AF_UNIX;
      const std::string path = url.substr(7);
      if (fd_ < 0 || path.size() >= sizeof a.sun_path) throw std::runtime_error("bad unix socket");
      std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
      if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        ::close(fd_);
        throw std::runtime_error("cannot connect to " + url + ": " + std::strerror(errno));
      }
      return;
    }
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ < 0) throw std::runtime_error("socket failed");
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port_of(url));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd_);
      throw std::runtime_error("cannot connect to " + url + ": " + std::strerror(errno));
    }
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  // Adopts a connected socket (closed with this object): the stand-in server of
  // client_wire_test.cc talks to an accepted connection through the same framing.
  RawClient(int connected_fd, int timeout_ms) : fd_(connected_fd), timeout_ms_(timeout_ms) {}
  ~RawClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  // False when the peer has gone (EPIPE/ECONNRESET): the server may close first.
  bool send_bytes(const void* data, size_t n) {
    const uint8_t* p = static_cast<const uint8_t*>(data);
    while (n > 0) {
      ssize_t k = ::send(fd_, p, n, MSG_NOSIGNAL);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) return false;
      p += k;
      n -= static_cast<size_t>(k);
    }
    return true;
  }
  bool send_bytes(const std::vector<uint8_t>& b) { return send_bytes(b.data(), b.size()); }
  // A frame: u32 length, then the payload.
  bool send_payload(const std::vector<uint8_t>& payload) {
    std::vector<uint8_t> b = le32(static_cast<uint32_t>(payload.size()));
    b.insert(b.end(), payload.begin(), payload.end());
    return send_bytes(b);
  }
  bool send_frame(const protocol::OutFrame& f) { return send_payload(flatten(f)); }
  // A frame whose first byte carries descriptor `fd` (SCM_RIGHTS; Unix sockets only).
  bool send_frame_with_fd(const protocol::OutFrame& f, int fd) {
    std::vector<uint8_t> payload = flatten(f);
    std::vector<uint8_t> b = le32(static_cast<uint32_t>(payload.size()));
    b.insert(b.end(), payload.begin(), payload.end());
    iovec iov{b.data(), 1};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
    if (::sendmsg(fd_, &msg, MSG_NOSIGNAL) != 1) return false;
    return send_bytes(b.data() + 1, b.size() - 1);
  }
  void shutdown_write() { ::shutdown(fd_, SHUT_WR); }

  // The next frame's payload; nullopt on EOF, reset or timeout.
  std::optional<std::vector<uint8_t>> read_frame() {
    uint8_t h[4];
    if (!read_exact(h, 4)) return std::nullopt;
    uint32_t len =
        uint32_t{h[0]} | uint32_t{h[1]} << 8 | uint32_t{h[2]} << 16 | uint32_t{h[3]} << 24;
    if (len > (256u << 20)) return std::nullopt;
    std::vector<uint8_t> p(len);
    if (!read_exact(p.data(), len)) return std::nullopt;
    return p;
  }
  // The next message, decoded; an error status when the connection ended instead.
  Result<protocol::ServerMessage> read_message() {
    auto f = read_frame();
    if (!f) return unavailable(last_read_error_);
    return protocol::decode_server_message(Buffer::copy_of(f->data(), f->size()));
  }
  // True when the server closes the connection (EOF or reset) within the timeout, discarding
  // anything it sends first.
  bool closed_by_peer() {
    uint8_t b[4096];
    for (;;) {
      pollfd p{fd_, POLLIN, 0};
      int r = ::poll(&p, 1, timeout_ms_);
      if (r <= 0) return false;  // timeout: still open
      ssize_t k = ::recv(fd_, b, sizeof b, 0);
      if (k == 0) return true;
      if (k < 0) return errno == ECONNRESET || errno == EPIPE;
    }
  }

  // Sends a Hello and returns the reply (Welcome or Refuse).
  Result<protocol::ServerMessage> hello(protocol::Hello h = {}) {
    protocol::OutFrame f;
    protocol::encode_hello(h, f);
    if (!send_frame(f)) return unavailable("send failed");
    return read_message();
  }

 private:
  bool read_exact(uint8_t* p, size_t n) {
    while (n > 0) {
      pollfd pf{fd_, POLLIN, 0};
      int r = ::poll(&pf, 1, timeout_ms_);
      if (r == 0) {
        last_read_error_ = "timed out waiting for the server";
        return false;
      }
      if (r < 0) {
        if (errno == EINTR) continue;
        last_read_error_ = std::string("poll: ") + std::strerror(errno);
        return false;
      }
      ssize_t k = ::recv(fd_, p, n, 0);
      if (k == 0) {
        last_read_error_ = "connection closed by the server";
        return false;
      }
      if (k < 0) {
        if (errno == EINTR) continue;
        last_read_error_ = std::string("recv: ") + std::strerror(errno);
        return false;
      }
      p += k;
      n -= static_cast<size_t>(k);
    }
    return true;
  }

  int fd_ = -1;
  int timeout_ms_;
  std::string last_read_error_;
};

}  // namespace tw::testing
