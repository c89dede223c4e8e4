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
// The relay (in the server's namespace) forwards each direction after rtt/2: one thread a
// direction stamps each burst as it arrives and sends it once its time has come, so the delay
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
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
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
      threads_.emplace_back([this, down, up] { link_thread([&] { pump(down, up); }); });
      threads_.emplace_back([this, down, up] { link_thread([&] { pump(up, down); }); });
    }
  }

  // The relay stands for the network, not for work of the machine under test: its threads run
  // real-time (SCHED_FIFO, when allowed), so a server's compute threads spinning on every core
  // (OpenMP waits by spinning) do not delay its packets by milliseconds. They never spin: each
  // waits in ppoll() with a timeout to the nanosecond (real-time threads have no timer slack).
  template <class F>
  static void link_thread(F&& body) {
    sched_param p{};
    p.sched_priority = 10;
    (void)::pthread_setschedparam(::pthread_self(), SCHED_FIFO, &p);
    body();
  }

  // When the bytes a recvmsg() returned reached the socket, on the steady clock: the kernel's
  // receive time stamp (SO_TIMESTAMPNS, the real-time clock; for TCP, the newest segment's),
  // so the relay's own wake-up latency is not added to the link's delay; `now` when there is
  // none or it is not plausible (more than 10 ms old, or in the future).
  static std::chrono::steady_clock::time_point arrived(const msghdr& m,
                                                       std::chrono::steady_clock::time_point now) {
    for (const cmsghdr* c = CMSG_FIRSTHDR(&m); c != nullptr;
         c = CMSG_NXTHDR(const_cast<msghdr*>(&m), const_cast<cmsghdr*>(c))) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_TIMESTAMPNS) continue;
      timespec stamp, real;
      std::memcpy(&stamp, CMSG_DATA(c), sizeof stamp);
      ::clock_gettime(CLOCK_REALTIME, &real);
      const int64_t age_ns =
          (real.tv_sec - stamp.tv_sec) * 1000000000LL + (real.tv_nsec - stamp.tv_nsec);
      if (age_ns >= 0 && age_ns <= 10000000) return now - std::chrono::nanoseconds(age_ns);
    }
    return now;
  }

  // One direction of a relayed connection, in one thread: bytes read from `from` go into a ring
  // of kRelayQueueBytes stamped with the time they are due (read time + rtt/2) and are sent to
  // `to` once due. One wake to read a burst and one to send it (a reader and a writer thread
  // handing chunks over, as before, woke three times a chunk and took as much CPU as the client
  // under test). A full ring stops the reading, so TCP's flow control slows the sender. The end
  // of `from` (FIN, or a reset) is passed on as a FIN after the bytes before it; an error
  // sending to `to` ends this direction.
  void pump(int from, int to) {
    using Clock = std::chrono::steady_clock;
    const auto delay = std::chrono::microseconds(shape_.rtt_us / 2);
    struct Span {
      Clock::time_point due;
      size_t bytes;
    };
    std::vector<char> ring(kRelayQueueBytes);
    size_t head = 0, used = 0, ready = 0;  // send position; bytes held; of them, due
    std::deque<Span> waiting;              // held bytes not yet due, oldest first
    bool ended = false;                    // `from` ended
    int one = 1;
    ::setsockopt(from, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);  // see arrived()
    while (!stop_.load()) {
      Clock::time_point now = Clock::now();
      while (!waiting.empty() && waiting.front().due <= now) {
        ready += waiting.front().bytes;
        waiting.pop_front();
      }
      bool blocked = false;  // `to` cannot take more now
      while (ready > 0) {
        const size_t n = std::min(ready, ring.size() - head);
        const ssize_t sent = ::send(to, ring.data() + head, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (sent < 0 && errno == EINTR) continue;
        if (sent < 0 && errno == EAGAIN) {
          blocked = true;
          break;
        }
        if (sent <= 0) return;
        head = (head + static_cast<size_t>(sent)) % ring.size();
        used -= static_cast<size_t>(sent);
        ready -= static_cast<size_t>(sent);
      }
      if (ended && used == 0) {
        ::shutdown(to, SHUT_WR);  // the other side ended: pass the end on
        return;
      }
      // (a descriptor of -1 is not watched: an ended or full `from`, an unblocked `to`)
      const bool reading = !ended && used < ring.size();
      pollfd pf[2] = {{reading ? from : -1, POLLIN, 0}, {blocked ? to : -1, POLLOUT, 0}};
      auto wait = std::chrono::nanoseconds(std::chrono::milliseconds(50));  // to see stop_
      if (!waiting.empty() && !blocked)
        wait = std::min(wait, std::chrono::nanoseconds(waiting.front().due - now));
      const timespec ts{static_cast<time_t>(wait.count() / 1000000000),
                        static_cast<long>(wait.count() % 1000000000)};
      if (::ppoll(pf, 2, &ts, nullptr) <= 0 || !reading || pf[0].revents == 0) continue;
      const size_t tail = (head + used) % ring.size();
      const size_t room = tail >= head && used < ring.size() ? ring.size() - tail : head - tail;
      iovec iov{ring.data() + tail, room};
      alignas(cmsghdr) char control[CMSG_SPACE(sizeof(timespec))];
      msghdr m{};
      m.msg_iov = &iov;
      m.msg_iovlen = 1;
      m.msg_control = control;
      m.msg_controllen = sizeof control;
      const ssize_t n = ::recvmsg(from, &m, MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n <= 0) {
        ended = true;
        continue;
      }
      used += static_cast<size_t>(n);
      waiting.push_back({arrived(m, Clock::now()) + delay, static_cast<size_t>(n)});
    }
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
