// A shaped network link for tests and benches: a client and a server network namespace joined by
// a veth pair, bandwidth limited by `tc qdisc tbf` on both ends and latency added by a delaying
// relay (this kernel has no netem; where `tc qdisc add ... netem` works the relay still does the
// job, so results do not depend on which kernel ran them). Only root may make namespaces; open()
// says why when it cannot, and a test that needs the link skips with that reason.
//
// Nothing is named and nothing touches the caller's namespace: both namespaces are anonymous
// (unshare(CLONE_NEWNET)), held by file descriptors of this process, so they and the veth pair
// vanish when the ShapedLink is destroyed or the process dies, however it dies. Traffic flows only
// between the two namespaces.
//
//   auto link = ShapedLink::open({.rtt_us = 2000, .rate = "100mbit"}, &why);
//   ServerProcess server = link->in_server([] { return ServerProcess(); });  // 127.0.0.1 there
//   std::string url = link->relay_to(server.port());    // tcp://10.77.0.2:P, the delayed path
//   link->in_client([&] { connection.ensure_connected(); });  // sockets stay in their namespace
//
// The relay (in the server's namespace) forwards each direction after rtt/2: a reader thread
// stamps each chunk as it arrives and a writer sends it once its time has come, so the delay
// does not limit throughput (up to kRelayQueueBytes in flight per direction). blackhole(true)
// drops every packet on the veth pair: the client's peer (the relay) falls silent, with no RST.
#pragma once
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tw::testing {

struct LinkShape {
  uint32_t rtt_us = 2000;        // round trip the relay adds (half each way)
  std::string rate = "100mbit";  // tc's rate syntax; "" leaves the veth unshaped
};

class ShapedLink {
 public:
  static constexpr const char* kClientAddr = "10.77.0.1";
  static constexpr const char* kServerAddr = "10.77.0.2";
  // Bytes the relay holds per direction before it stops reading (TCP's flow control then
  // slows the sender), as a router's buffer would: more than the largest bandwidth-delay product
  // the benches use (1 Gbit/s x 20 ms is 2.5 MB), small enough that a bench measuring the
  // client's memory (the relay runs in its process) is not measuring the relay's.
  static constexpr size_t kRelayQueueBytes = 4u << 20;

  // The link, or null with *why set (not root, no veth, no tc).
  static std::unique_ptr<ShapedLink> open(const LinkShape& shape, std::string* why) {
    std::unique_ptr<ShapedLink> l(new ShapedLink(shape));
    if (std::string err = l->setup(); !err.empty()) {
      *why = "shaped link unavailable: " + err;
      return nullptr;
    }
    return l;
  }
  ~ShapedLink() {
    stop_.store(true);
    for (auto& r : relays_) r->accept.join();
    for (auto& t : threads_) t.join();
    for (int fd : fds_) ::close(fd);
    for (auto& r : relays_) ::close(r->listen_fd);
    if (client_ns_ >= 0) ::close(client_ns_);
    if (server_ns_ >= 0) ::close(server_ns_);
    if (home_ns_ >= 0) ::close(home_ns_);
  }
  ShapedLink(const ShapedLink&) = delete;
  ShapedLink& operator=(const ShapedLink&) = delete;

  // Runs fn with the calling thread in the client's or the server's namespace (sockets made and
  // processes forked meanwhile belong there for good), and returns what it returns.
  template <class F>
  auto in_client(F&& fn) {
    Enter e(*this, client_ns_);
    return fn();
  }
  template <class F>
  auto in_server(F&& fn) {
    Enter e(*this, server_ns_);
    return fn();
  }
  // Starts the delaying relay in front of 127.0.0.1:`port` of the server's namespace; returns
  // the URL a client in the client namespace dials.
  std::string relay_to(uint16_t port) {
    auto relay = std::make_unique<Relay>();
    Relay& r = *relay;
    r.upstream_port = port;
    in_server([&] {
      r.listen_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      ::inet_pton(AF_INET, kServerAddr, &a.sin_addr);
      int one = 1;
      ::setsockopt(r.listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (::bind(r.listen_fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
          ::listen(r.listen_fd, 64) != 0) {
        std::abort();  // a fresh namespace always has the address free
      }
    });
    sockaddr_in a{};
    socklen_t n = sizeof a;
    ::getsockname(r.listen_fd, reinterpret_cast<sockaddr*>(&a), &n);
    r.accept = std::thread([this, &r] { accept_loop(r); });
    relays_.push_back(std::move(relay));
    return "tcp://" + std::string(kServerAddr) + ":" + std::to_string(ntohs(a.sin_port));
  }
  // A black hole from now on (true): every packet between the namespaces is dropped silently
  // (blackhole routes both ways: no RST, no ICMP, sends still succeed), as when a peer's host
  // or a middlebox dies; false restores the link.
  bool blackhole(bool on) {
    const char* verb = on ? "add" : "del";
    return in_client([&] {
             return sh(std::string("ip route ") + verb + " blackhole " + kServerAddr + "/32");
           }) &&
           in_server([&] {
             return sh(std::string("ip route ") + verb + " blackhole " + kClientAddr + "/32");
           });
  }
  const LinkShape& shape() const { return shape_; }

 private:
  explicit ShapedLink(LinkShape s) : shape_(std::move(s)) {}

  struct Enter {
    Enter(ShapedLink& l, int ns) : l_(l) {
      if (::setns(ns, CLONE_NEWNET) != 0) std::abort();
    }
    ~Enter() {
      if (::setns(l_.home_ns_, CLONE_NEWNET) != 0) std::abort();
    }
    ShapedLink& l_;
  };

  static int this_ns() { return ::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC); }
  static bool sh(const std::string& cmd) {
    return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0;
  }

  // tbf: the rate, a bucket of 10 ms of it (at least 128 KiB, so a veth's 64 KiB GSO packet
  // passes whole) and 50 ms of queue.
  std::string tbf(const std::string& dev) const {
    return "tc qdisc add dev " + dev + " root tbf rate " + shape_.rate +
           " burst 256kb latency 50ms";
  }

  std::string setup() {
    if (::geteuid() != 0) return "needs root (network namespaces)";
    home_ns_ = this_ns();
    if (home_ns_ < 0) return "cannot open /proc/thread-self/ns/net";
    if (::unshare(CLONE_NEWNET) != 0) return "unshare(CLONE_NEWNET) failed";
    server_ns_ = this_ns();
    if (::setns(home_ns_, CLONE_NEWNET) != 0) std::abort();
    if (::unshare(CLONE_NEWNET) != 0) {
      (void)::setns(home_ns_, CLONE_NEWNET);
      return "unshare(CLONE_NEWNET) failed";
    }
    client_ns_ = this_ns();
    if (::setns(home_ns_, CLONE_NEWNET) != 0) std::abort();
    // The server's namespace by a path any child can open (the descriptor is this process's).
    const std::string server_path =
        "/proc/" + std::to_string(::getpid()) + "/fd/" + std::to_string(server_ns_);
    bool ok = in_client([&] {
      return sh("ip link set lo up") &&
             sh("ip link add twc type veth peer name tws netns " + server_path) &&
             sh(std::string("ip addr add ") + kClientAddr + "/24 dev twc") &&
             sh("ip link set twc up");
    });
    if (!ok) return "ip link add ... type veth failed (no veth support?)";
    ok = in_server([&] {
      return sh("ip link set lo up") &&
             sh(std::string("ip addr add ") + kServerAddr + "/24 dev tws") &&
             sh("ip link set tws up");
    });
    if (!ok) return "cannot configure the server end of the veth pair";
    if (!shape_.rate.empty()) {
      if (!in_client([&] { return sh(tbf("twc")); }) || !in_server([&] { return sh(tbf("tws")); }))
        return "tc qdisc tbf failed (rate " + shape_.rate + ")";
    }
    return "";
  }

  struct Relay {
    int listen_fd = -1;
    uint16_t upstream_port = 0;
    std::thread accept;
  };

  void accept_loop(const Relay& r) {
    while (!stop_.load()) {
      pollfd p{r.listen_fd, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      int down = ::accept4(r.listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (down < 0) continue;
      int up = in_server([&] { return ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0); });
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(r.upstream_port);
      ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
      if (::connect(up, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        ::close(up);
        ::close(down);
        continue;
      }
      int one = 1;
      ::setsockopt(up, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      ::setsockopt(down, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      std::lock_guard<std::mutex> lock(mu_);
      fds_.push_back(up);
      fds_.push_back(down);
      auto a2b = std::make_shared<Pipe>(), b2a = std::make_shared<Pipe>();
      threads_.emplace_back([this, down, a2b] { link_thread([&] { read_side(down, *a2b); }); });
      threads_.emplace_back([this, up, a2b] { link_thread([&] { write_side(up, *a2b); }); });
      threads_.emplace_back([this, up, b2a] { link_thread([&] { read_side(up, *b2a); }); });
      threads_.emplace_back([this, down, b2a] { link_thread([&] { write_side(down, *b2a); }); });
    }
  }

  // The relay stands for the network, not for work of the machine under test: its threads run
  // real-time (SCHED_FIFO, when allowed), so a server's compute threads spinning on every core
  // (OpenMP waits by spinning) do not delay its packets by milliseconds. They never spin: each
  // waits in poll(), a condition variable or a sleep.
  template <class F>
  static void link_thread(F&& body) {
    sched_param p{};
    p.sched_priority = 10;
    (void)::pthread_setschedparam(::pthread_self(), SCHED_FIFO, &p);
    body();
  }

  struct Chunk {
    std::chrono::steady_clock::time_point due;
    std::vector<char> bytes;
  };
  struct Pipe {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Chunk> q;
    size_t bytes = 0;
    bool closed = false;
  };

  void read_side(int fd, Pipe& p) {
    const auto delay = std::chrono::microseconds(shape_.rtt_us / 2);
    std::vector<char> buf(256 * 1024);
    while (!stop_.load()) {
      {
        std::unique_lock<std::mutex> lock(p.mu);
        p.cv.wait_for(lock, std::chrono::milliseconds(50),
                      [&] { return p.bytes < kRelayQueueBytes; });
        if (p.bytes >= kRelayQueueBytes) continue;
      }
      pollfd pf{fd, POLLIN, 0};
      if (::poll(&pf, 1, 50) <= 0) continue;
      ssize_t n = ::recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) break;
      if (n < 0) continue;
      std::lock_guard<std::mutex> lock(p.mu);
      p.q.push_back({std::chrono::steady_clock::now() + delay, {buf.begin(), buf.begin() + n}});
      p.bytes += static_cast<size_t>(n);
      p.cv.notify_all();
    }
    std::lock_guard<std::mutex> lock(p.mu);
    p.closed = true;
    p.cv.notify_all();
  }

  void write_side(int fd, Pipe& p) {
    for (;;) {
      Chunk c;
      {
        std::unique_lock<std::mutex> lock(p.mu);
        p.cv.wait_for(lock, std::chrono::milliseconds(50),
                      [&] { return !p.q.empty() || p.closed || stop_.load(); });
        if (stop_.load()) return;
        if (p.q.empty()) {
          if (p.closed) break;
          continue;
        }
        c = std::move(p.q.front());
        p.q.pop_front();
        p.bytes -= c.bytes.size();
        p.cv.notify_all();
      }
      std::this_thread::sleep_until(c.due);
      size_t off = 0;
      while (off < c.bytes.size() && !stop_.load()) {
        pollfd pf{fd, POLLOUT, 0};
        if (::poll(&pf, 1, 50) <= 0) continue;
        ssize_t n =
            ::send(fd, c.bytes.data() + off, c.bytes.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (n <= 0) return;
        off += static_cast<size_t>(n);
      }
    }
    ::shutdown(fd, SHUT_WR);  // the other side ended: pass the end on
  }

  LinkShape shape_;
  int home_ns_ = -1, server_ns_ = -1, client_ns_ = -1;
  std::atomic<bool> stop_{false};
  std::vector<std::unique_ptr<Relay>> relays_;  // relay_to()'s (the caller's thread only)
  std::mutex mu_;                               // the accept threads add to these:
  std::vector<int> fds_;
  std::vector<std::thread> threads_;  // the pumps
};

}  // namespace tw::testing
