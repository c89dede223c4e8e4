// A fault-injecting TCP relay for tests and `make chaos`: listens on 127.0.0.1 (port 0) and
// forwards each connection to a target TCP address, while, seeded and bounded,
//   - cutting the connection after a random number of bytes (both directions counted), either
//     closing it (FIN) or resetting it (RST, SO_LINGER 0), at most `max_cuts` times in all;
//   - stalling a direction for a few milliseconds now and then;
//   - splitting every write into pieces of random sizes (TCP reorders nothing, so nothing else).
// Every byte that is forwarded is forwarded unchanged and in order; over unix sockets so are the
// descriptors passed with them (SCM_RIGHTS: shared-memory segments), with the first piece of the
// bytes they came with. One thread per connection.
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace tw::testing {

struct FaultOptions {
  uint64_t seed = 1;
  // Each connection is cut after a byte count drawn uniformly from [min_bytes, max_bytes].
  uint64_t cut_min_bytes = 64 << 10, cut_max_bytes = 4 << 20;
  int max_cuts = 200;           // after this many, connections run uncut
  double reset_fraction = 0.5;  // of cuts: RST rather than FIN
  double stall_chance = 0.01;   // per forwarded chunk: a stall of up to stall_max_ms
  int stall_max_ms = 3;
  size_t max_piece = 16 << 10;  // writes are split into pieces of 1..max_piece bytes
  // Each connection after the first is forwarded only after this long (a link that takes a while
  // to come back: a resume that finds its session's grace period over).
  int reconnect_delay_ms = 0;
};

class FaultRelay {
 public:
  // Forwards to 127.0.0.1:target_port.
  FaultRelay(int target_port, FaultOptions o) : target_port_(target_port), o_(o), rng_(o.seed) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listen_fd_ < 0) throw std::runtime_error("FaultRelay: socket failed");
    const int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof(a);
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
        ::listen(listen_fd_, 64) != 0 ||
        ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      ::close(listen_fd_);
      throw std::runtime_error("FaultRelay: cannot listen on 127.0.0.1");
    }
    port_ = ntohs(a.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~FaultRelay() {
    stop_ = true;
    ::shutdown(listen_fd_, SHUT_RDWR);
    acceptor_.join();
    ::close(listen_fd_);
    if (!listen_path_.empty()) ::unlink(listen_path_.c_str());
    std::vector<std::thread> ts;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ts.swap(threads_);
    }
    for (std::thread& t : ts) t.join();
  }
  // Over unix sockets: listens on `listen_path` (unix://listen_path) and forwards each connection
  // to the unix socket at `target_path`.
  FaultRelay(const std::string& target_path, const std::string& listen_path, FaultOptions o)
      : target_path_(target_path), listen_path_(listen_path), o_(o), rng_(o.seed) {
    listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listen_fd_ < 0) throw std::runtime_error("FaultRelay: socket failed");
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    if (listen_path.size() >= sizeof(a.sun_path)) throw std::runtime_error("FaultRelay: long path");
    std::copy(listen_path.begin(), listen_path.end(), a.sun_path);
    ::unlink(listen_path.c_str());
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
        ::listen(listen_fd_, 64) != 0) {
      ::close(listen_fd_);
      throw std::runtime_error("FaultRelay: cannot listen on " + listen_path);
    }
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  FaultRelay(const FaultRelay&) = delete;
  FaultRelay& operator=(const FaultRelay&) = delete;

  int port() const { return port_; }
  std::string url(const std::string& scheme = "tcp") const {
    if (!listen_path_.empty()) return "unix://" + listen_path_;
    return scheme + "://127.0.0.1:" + std::to_string(port_);
  }
  int cuts() const { return cuts_.load(); }
  int connections() const { return connections_.load(); }
  uint64_t bytes() const { return bytes_.load(); }

 private:
  void accept_loop() {
    for (;;) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) < 0 || stop_) return;
      if (!(p.revents & POLLIN)) continue;
      const int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) {
        if (stop_) return;
        continue;
      }
      if (o_.reconnect_delay_ms > 0 && connections_.load() > 0)
        std::this_thread::sleep_for(std::chrono::milliseconds(o_.reconnect_delay_ms));
      const int s =
          ::socket(target_path_.empty() ? AF_INET : AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(static_cast<uint16_t>(target_port_));
      sockaddr_un u{};
      u.sun_family = AF_UNIX;
      std::copy(target_path_.begin(),
                target_path_.begin() + static_cast<std::ptrdiff_t>(
                                           std::min(target_path_.size(), sizeof(u.sun_path) - 1)),
                u.sun_path);
      const bool connected =
          s >= 0 &&
          (target_path_.empty() ? ::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0
                                : ::connect(s, reinterpret_cast<sockaddr*>(&u), sizeof(u)) == 0);
      if (!connected) {
        ::close(c);
        if (s >= 0) ::close(s);
        continue;  // the client sees its connection end at once, as with a dead server
      }
      const int one = 1;
      ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      ::setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      Conn conn;
      {
        std::lock_guard<std::mutex> lock(mu_);
        conn.budget =
            std::uniform_int_distribution<uint64_t>(o_.cut_min_bytes, o_.cut_max_bytes)(rng_);
        conn.reset = std::uniform_real_distribution<double>(0, 1)(rng_) < o_.reset_fraction;
        conn.seed = rng_();
        ++connections_;
        threads_.emplace_back([this, c, s, conn] { pump(c, s, conn); });
      }
    }
  }

  struct Conn {
    uint64_t budget = 0;
    bool reset = false;
    uint64_t seed = 0;
  };

  void pump(int c, int s, Conn conn) {
    std::mt19937_64 rng(conn.seed);
    uint64_t moved = 0;
    std::vector<uint8_t> buf(64 << 10);
    bool cut = false;
    for (;;) {
      pollfd p[2] = {{c, POLLIN, 0}, {s, POLLIN, 0}};
      if (::poll(p, 2, 50) < 0 || stop_) break;
      bool ended = false;
      for (int i = 0; i < 2 && !ended && !cut; ++i) {
        if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        const int from = p[i].fd, to = i == 0 ? s : c;
        size_t want = buf.size();
        const bool may_cut = cuts_.load() < o_.max_cuts;
        if (may_cut) want = std::min<uint64_t>(want, conn.budget - moved);
        std::vector<int> fds;
        const ssize_t n = receive(from, buf.data(), std::max<size_t>(want, 1), fds);
        if (n <= 0) {
          ended = true;
          break;
        }
        if (std::uniform_real_distribution<double>(0, 1)(rng) < o_.stall_chance) {
          std::this_thread::sleep_for(std::chrono::milliseconds(
              std::uniform_int_distribution<int>(1, o_.stall_max_ms)(rng)));
        }
        size_t at = 0;
        while (at < static_cast<size_t>(n)) {
          const size_t piece =
              std::min<size_t>(static_cast<size_t>(n) - at,
                               std::uniform_int_distribution<size_t>(1, o_.max_piece)(rng));
          const ssize_t w = forward(to, buf.data() + at, piece, fds);
          if (w <= 0) {
            ended = true;
            break;
          }
          at += static_cast<size_t>(w);
        }
        for (int fd : fds) ::close(fd);  // (sent, or lost with the connection)
        moved += static_cast<uint64_t>(n);
        bytes_ += static_cast<uint64_t>(n);
        if (may_cut && moved >= conn.budget) cut = take_cut();
      }
      if (ended || cut) break;
    }
    if (cut && conn.reset) {
      const linger l{1, 0};  // close sends RST
      ::setsockopt(c, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
      ::setsockopt(s, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    }
    ::close(c);
    ::close(s);
  }

  // Reads what is there, and the descriptors passed with it (unix sockets).
  ssize_t receive(int fd, uint8_t* into, size_t n, std::vector<int>& fds) {
    if (target_path_.empty()) return ::read(fd, into, n);
    iovec io{into, n};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
    msghdr m{};
    m.msg_iov = &io;
    m.msg_iovlen = 1;
    m.msg_control = control;
    m.msg_controllen = sizeof(control);
    const ssize_t got = ::recvmsg(fd, &m, MSG_CMSG_CLOEXEC);
    for (cmsghdr* c = CMSG_FIRSTHDR(&m); got >= 0 && c; c = CMSG_NXTHDR(&m, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < k; ++i) {
        int d = -1;
        std::memcpy(&d, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        fds.push_back(d);
      }
    }
    return got;
  }
  // Sends one piece, with `fds` (then cleared) when there are any.
  static ssize_t forward(int to, const uint8_t* from, size_t n, std::vector<int>& fds) {
    if (fds.empty()) return ::send(to, from, n, MSG_NOSIGNAL);
    iovec io{const_cast<uint8_t*>(from), n};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
    msghdr m{};
    m.msg_iov = &io;
    m.msg_iovlen = 1;
    m.msg_control = control;
    m.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
    const ssize_t w = ::sendmsg(to, &m, MSG_NOSIGNAL);
    if (w > 0) {
      for (int fd : fds) ::close(fd);
      fds.clear();
    }
    return w;
  }
  static constexpr size_t kMaxFds = 16;

  // One of the max_cuts, if any is left.
  bool take_cut() {
    int n = cuts_.load();
    while (n < o_.max_cuts)
      if (cuts_.compare_exchange_weak(n, n + 1)) return true;
    return false;
  }

  int target_port_ = 0;
  std::string target_path_, listen_path_;  // unix sockets (else TCP)
  FaultOptions o_;
  std::mt19937_64 rng_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> cuts_{0}, connections_{0};
  std::atomic<uint64_t> bytes_{0};
  std::mutex mu_;
  std::vector<std::thread> threads_;
  std::thread acceptor_;
};

}  // namespace tw::testing
