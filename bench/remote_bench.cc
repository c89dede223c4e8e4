// Remote execution beside its floor, in one run: a tensorwire-server child process on 127.0.0.1
// (TCP) against plain POSIX sockets served by a thread of this binary, and against the local CPU
// device. Prints one table with a target per row.
//   (a) round trip of a 1-element op plus its read vs a raw TCP ping-pong of the same sizes
//       (a*: the same against a server started with --spin-us 0; a0, a1: the same raw client
//       against peers that do no work, one busy-polling its socket, one an Asio echo with the
//       server's spin loop: the floors under a server's side of the round trip)
//   (b) upload and download of 256 MiB vs raw TCP streaming of the same bytes
//   (c) fire-and-forget throughput of 1-element adds (one read at the end) vs the CPU device
//   (d) 1,000 idle sessions: server RSS growth per session, time for all to connect
//   (e) 200k chained 1-element adds as ONE registered graph (protocol 2), run remotely, vs the
//       same adds sent eagerly to the same server
//   (f) replays of a training-step graph (an MLP's forward, backward and SGD update, built by
//       hand): server RSS after 1,000 replays vs after 10 (the planned buffers are reused)
//   (g) TLS (tls://, a pinned self-signed certificate) vs plain TCP to the same server: the
//       round trip of (a) and the upload of (b), interleaved
//   (h) the (c) stream on a server with --metrics, scraped once a second, vs one without
//   (i) fairness, --workers 1: a light session's 1-element op + read while a heavy session streams
//       2048x2048 matmuls, against one such matmul's time
//   (m) memory, --max-memory 4G: four sessions each trying to hold 8 GiB; the over-limit ops
//       fail, the server's peak RSS, the server alive
//   (n) same-server move of 256 MiB (t.to(device 1) of a tensor on device 0, protocol 3) vs a
//       local memcpy of it; the bytes through the client
//   (o) server-to-server move of 256 MiB (a capability, the destination pulls) vs raw TCP
//       streaming of the same bytes between two processes; the bytes through the client
//   (p) all_reduce of 64 MiB f32 across 2 servers (Gloo) vs raw TCP one way and both ways
//   (q) data-parallel digits CNN training on 2 servers beside 1
//   (s) unix:// upload and download of 256 MiB through shared memory (protocol 5) vs one memcpy
//       (and net::parallel_copy) of 256 MiB in the same run; the socket path (TW_SHM=0) beside
//   (x) denial of service (issue 52): with --max-op-cost 0 (every op admitted), 4 clients each
//       send the 119-byte frame (Full [1,T,4] f32; attention q = k = v; Sync) and disconnect: a
//       new connection's Welcome and a light session's read while that work runs (default grace:
//       resumable clients, whose running op finishes), the queued ops of those parked sessions
//       that ran (none should), and with --resume-grace 0 how soon the abandoned work stops
// Usage: tw_bench_remote [--quick] [--only abcdefghimnopqsx] [--server PATH]. Measures; never
// asserts.
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <asio.hpp>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "api/sink.h"
#include "client/connection.h"
#include "digits/digits.h"
#include "ir/graph.h"
#include "net/shm.h"
#include "server/metrics.h"
#include "support/abandon.h"
#include "support/server_process.h"
#include "tensorwire/remote.h"
#include "tensorwire/server.h"
#include "tensorwire/tensorwire.h"

#ifndef TW_SERVER_BINARY
#define TW_SERVER_BINARY "tensorwire-server"
#endif

namespace {

using Clock = std::chrono::steady_clock;
double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

// ---------------------------------------------------------------- the server child process

// A figure of /proc/PID/status in bytes: VmRSS (resident now) or VmHWM (its peak).
uint64_t status_bytes(pid_t pid, const std::string& which) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  while (in >> key) {
    if (key == which) {
      uint64_t kb = 0;
      in >> kb;
      return kb * 1024;
    }
    std::getline(in, key);
  }
  return 0;
}
uint64_t rss_bytes(pid_t pid) { return status_bytes(pid, "VmRSS:"); }

// ---------------------------------------------------------------- raw TCP baseline

void write_all(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n) {
    ssize_t k = ::send(fd, c, n, MSG_NOSIGNAL);
    if (k <= 0) throw std::runtime_error("raw send failed");
    c += k;
    n -= static_cast<size_t>(k);
  }
}
void read_all(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n) {
    ssize_t k = ::recv(fd, c, n, 0);
    if (k <= 0) throw std::runtime_error("raw recv failed");
    c += k;
    n -= static_cast<size_t>(k);
  }
}
void nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// A loopback listener and one accepted connection, served by a thread running `serve(fd)`.
class RawPeer {
 public:
  // The peer runs `serve` on a thread of this process, or in a forked child process (the same
  // topology as a tensorwire-server: two processes).
  template <class F>
  explicit RawPeer(F serve, bool child_process = false) {
    int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(lfd, 1) != 0 ||
        ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      throw std::runtime_error("raw listen failed");
    }
    auto run = [lfd, serve] {
      int fd = ::accept(lfd, nullptr, nullptr);
      ::close(lfd);
      nodelay(fd);
      try {
        serve(fd);
      } catch (const std::exception&) {
      }
      ::close(fd);
    };
    if (child_process) {
      child_ = ::fork();
      if (child_ < 0) throw std::runtime_error("fork failed");
      if (child_ == 0) {
        run();
        _exit(0);
      }
      ::close(lfd);
    } else {
      thread_ = std::thread(run);
    }
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
      throw std::runtime_error("raw connect failed");
    nodelay(fd_);
  }
  ~RawPeer() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    if (thread_.joinable()) thread_.join();
    if (child_ > 0) ::waitpid(child_, nullptr, 0);
  }
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
  std::thread thread_;
  pid_t child_ = -1;
};

struct Dist {
  double min = 0, median = 0, p99 = 0;
};
Dist dist(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))]; };
  return {v.front(), at(0.5), at(0.99)};
}

// ---------------------------------------------------------------- the table

struct Row {
  std::string id, what, tw, base, ratio, target;
  bool met = false;
};
std::vector<Row> rows;

std::string fmt(const char* f, double a) {
  char b[128];
  std::snprintf(b, sizeof b, f, a);
  return b;
}
std::string fmt3(double a, double b, double c) {
  char s[128];
  std::snprintf(s, sizeof s, "%.1f / %.1f / %.1f", a, b, c);
  return s;
}

// ---------------------------------------------------------------- (a) latency

// `iters` round trips of an op on `x` (a 1-element tensor holding 1) and its read, in us.
std::vector<double> round_trips_us(const tw::Tensor& x, int iters) {
  std::vector<double> us;
  for (int i = 0; i < iters; ++i) {
    auto t0 = Clock::now();
    float v = (x + 1.0).item<float>();
    us.push_back(us_since(t0));
    if (v != 2.0f) throw std::runtime_error("latency: wrong result");
  }
  return us;
}

// As read_all, polling the socket without sleeping for up to `spin_us` first (what the client
// does while it waits for a reply, TW_SPIN_US).
void read_all_spinning(int fd, void* p, size_t n, int spin_us) {
  char* c = static_cast<char*>(p);
  const auto until = Clock::now() + std::chrono::microseconds(spin_us);
  while (n) {
    const bool spin = Clock::now() < until;
    ssize_t k = ::recv(fd, c, n, spin ? MSG_DONTWAIT : 0);
    if (k < 0 && spin && (errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (k <= 0) throw std::runtime_error("raw recv failed");
    c += k;
    n -= static_cast<size_t>(k);
  }
}

// The client's spin (TW_SPIN_US, its default when unset), for the raw baseline to match.
int client_spin_us() {
  const char* e = std::getenv("TW_SPIN_US");
  return e ? std::atoi(e) : static_cast<int>(tw::client::Options{}.spin_us);
}

// Floors of a server's side of a round trip: peers that answer `req` bytes with `resp` without
// ever sleeping, to set tensorwire-server's I/O against (rows a0 and a1).
// A peer that, after each reply, busy-polls its socket (recv with MSG_DONTWAIT) for the
// server's default spin before it blocks in recv: tensorwire-server's policy with no epoll and
// no work.
void serve_busy_polling(int fd, size_t req, size_t resp) {
  std::vector<char> in(req), out(resp, 1);
  const int spin_us = static_cast<int>(tw::ServerOptions{}.spin_us);
  for (;;) {
    read_all_spinning(fd, in.data(), req, spin_us);
    write_all(fd, out.data(), resp);
  }
}

// An Asio echo with tensorwire-server's I/O pattern and nothing else: an async_read_some per
// request on an io_context whose thread, after running a handler, keeps polling
// (io_context::poll, a yield between looks) for the server's default spin (server.cc,
// run_shard). What is left between this and tensorwire is tensorwire's own work per request.
void serve_asio_spinning(int fd, size_t req, size_t resp) {
  asio::io_context io(1);
  asio::ip::tcp::socket sock(io);
  sock.assign(asio::ip::tcp::v4(), fd);
  sock.non_blocking(true);
  std::vector<char> in(8192), out(resp, 1);
  size_t have = 0;
  std::function<void()> read = [&] {
    sock.async_read_some(asio::buffer(in.data() + have, in.size() - have),
                         [&](const asio::error_code& ec, size_t n) {
                           if (ec) return;
                           for (have += n; have >= req; have -= req)
                             write_all(fd, out.data(), resp);
                           read();
                         });
  };
  read();
  const auto spin = std::chrono::microseconds(tw::ServerOptions{}.spin_us);
  while (io.run_one() > 0) {
    for (auto until = Clock::now() + spin; Clock::now() < until;) {
      if (io.poll() > 0) {
        until = Clock::now() + spin;
      } else {
        std::this_thread::yield();
      }
    }
  }
  (void)sock.release();  // RawPeer closes fd
}

// (a2) One client thread alternating between two devices of one server (two sessions, on two
// of its threads): a pair of round trips, against two round trips on one of those devices
// alone, in alternating rounds of 50. After each reply a thread spins; with every core
// spinning (the client's spin included) each request waited for the scheduler's time slice, so
// at most --spin-threads threads spin at once (default: cores - 1).
void bench_two_devices(const std::string& binary, int iters) {
  tw::testing::ServerProcess server({"--devices", "2"}, binary);
  tw::Device a = tw::Device::remote(server.url(), 0), b = tw::Device::remote(server.url(), 1);
  tw::Tensor x = tw::full({1}, 1.0, tw::kF32, a), y = tw::full({1}, 1.0, tw::kF32, b);
  auto pair_us = [&](const tw::Tensor& first, const tw::Tensor& second) {
    auto t0 = Clock::now();
    if ((first + 1.0).item<float>() != 2.0f || (second + 1.0).item<float>() != 2.0f) {
      throw std::runtime_error("two devices: wrong result");
    }
    return us_since(t0);
  };
  for (int i = 0; i < 200; ++i) (void)pair_us(x, y), (void)pair_us(x, x);  // warm up
  std::vector<double> both, one;
  for (int done = 0; done < iters; done += 50) {
    for (int i = 0; i < 50; ++i) both.push_back(pair_us(x, y));
    for (int i = 0; i < 50; ++i) one.push_back(pair_us(x, x));
  }
  const Dist t = dist(both), o = dist(one);
  rows.push_back({"a2",
                  "one client alternating between 2 devices of one server: a round trip on each, "
                  "us (min / median / p99)",
                  fmt3(t.min, t.median, t.p99),
                  fmt3(o.min, o.median, o.p99) + " (two round trips on one of them)",
                  fmt("%.2fx min, ", t.min / o.min) + fmt("%.2fx median", t.median / o.median),
                  "(for comparison)", true});
}

// `no_spin_url`: a server started with --spin-us 0 (its threads sleep as soon as they are idle).
void bench_latency(const std::string& url, const std::string& no_spin_url, int iters) {
  const int spin_us = client_spin_us();
  tw::Device d = tw::Device::remote(url);
  const char* set = std::getenv("TW_SPIN_US");
  const std::string before = set ? set : "";
  ::setenv("TW_SPIN_US", "0", 1);
  tw::Device sleeper = tw::Device::remote(url);  // waits in poll() at once
  if (set) {
    ::setenv("TW_SPIN_US", before.c_str(), 1);
  } else {
    ::unsetenv("TW_SPIN_US");
  }
  tw::Device server_sleeps = tw::Device::remote(no_spin_url);
  tw::Tensor x = tw::full({1}, 1.0, tw::kF32, d), xs = tw::full({1}, 1.0, tw::kF32, sleeper);
  tw::Tensor xn = tw::full({1}, 1.0, tw::kF32, server_sleeps);
  d.sync();
  sleeper.sync();
  server_sleeps.sync();
  for (int i = 0; i < 200; ++i) {  // warm up
    (void)(x + 1.0).item<float>();
    (void)(xs + 1.0).item<float>();
    (void)(xn + 1.0).item<float>();
  }
  tw::WireCounters c0 = tw::wire_counters(d);
  (void)(x + 1.0).item<float>();
  tw::WireCounters c1 = tw::wire_counters(d);
  // One iteration: one frame each way (the drop of the temporary rides in the next frame).
  size_t req = static_cast<size_t>(c1.bytes_out - c0.bytes_out);
  size_t resp = static_cast<size_t>(c1.bytes_in - c0.bytes_in);

  // Raw ping-pong of the same sizes against a peer in a child process (the topology of a client
  // and a tensorwire-server), its client reading as tensorwire's does (spinning first) and
  // plainly (a blocking recv).
  RawPeer peer(
      [req, resp](int fd) {
        std::vector<char> in(req), out(resp, 1);
        for (;;) {
          read_all(fd, in.data(), req);
          write_all(fd, out.data(), resp);
        }
      },
      true);
  RawPeer busy([req, resp](int fd) { serve_busy_polling(fd, req, resp); }, true);
  RawPeer asio_echo([req, resp](int fd) { serve_asio_spinning(fd, req, resp); }, true);
  std::vector<char> out(req, 2), in(resp);
  auto ping = [&](const RawPeer& to, int spin) {
    auto t0 = Clock::now();
    write_all(to.fd(), out.data(), req);
    read_all_spinning(to.fd(), in.data(), resp, spin);
    return us_since(t0);
  };
  auto raw = [&](int spin) { return ping(peer, spin); };
  for (int i = 0; i < 200; ++i) {
    (void)raw(spin_us);
    (void)raw(0);
    (void)ping(busy, spin_us);
    (void)ping(asio_echo, spin_us);
  }
  // Rounds of 50 of each in turn: all four see the same machine.
  std::vector<double> tw_us, sleeper_us, server_sleeps_us, raw_spin_us, raw_us, busy_us, asio_us;
  for (int done = 0; done < iters; done += 50) {
    for (double v : round_trips_us(x, 50)) tw_us.push_back(v);
    for (double v : round_trips_us(xs, 50)) sleeper_us.push_back(v);
    for (double v : round_trips_us(xn, 50)) server_sleeps_us.push_back(v);
    for (int i = 0; i < 50; ++i) raw_spin_us.push_back(raw(spin_us));
    for (int i = 0; i < 50; ++i) raw_us.push_back(raw(0));
    for (int i = 0; i < 50; ++i) busy_us.push_back(ping(busy, spin_us));
    for (int i = 0; i < 50; ++i) asio_us.push_back(ping(asio_echo, spin_us));
  }
  const Dist t = dist(tw_us), ts = dist(sleeper_us), tn = dist(server_sleeps_us),
             rs = dist(raw_spin_us), r = dist(raw_us), bp = dist(busy_us), ae = dist(asio_us);
  const double by_min = t.min / rs.min, by_median = t.median / rs.median;
  rows.push_back(
      {"a",
       "1-element op + read round trip, us (min / median / p99); " + std::to_string(req) +
           " B out, " + std::to_string(resp) + " B back; client spins " + std::to_string(spin_us) +
           " us before it sleeps (TW_SPIN_US), the server's threads " +
           std::to_string(tw::ServerOptions{}.spin_us) + " us (--spin-us)",
       fmt3(t.min, t.median, t.p99),
       fmt3(rs.min, rs.median, rs.p99) + " (raw TCP, peer process, same spin)",
       fmt("%.2fx min, ", by_min) + fmt("%.2fx median", by_median),
       "<= 1.0x raw by the median, <= 1.6x by the min", by_median <= 1.0 && by_min <= 1.6});
  // A row for comparison: `got` against `base` (described by `base_name`), by min and median.
  auto compare = [](const char* id, const std::string& what, const Dist& got, const Dist& base,
                    const std::string& base_name) {
    rows.push_back(
        {id, what, fmt3(got.min, got.median, got.p99),
         fmt3(base.min, base.median, base.p99) + " (" + base_name + ")",
         fmt("%.2fx min, ", got.min / base.min) + fmt("%.2fx median", got.median / base.median),
         "(for comparison)", true});
  };
  const std::string same_spin = "raw TCP, peer process, same spin", blocking = "raw TCP, blocking";
  compare("a0",
          "floor: the raw client against a peer process that busy-polls its socket (no sleep, no "
          "epoll)",
          bp, rs, same_spin);
  compare("a1",
          "floor: the raw client against an Asio echo with tensorwire-server's spin loop and "
          "nothing else",
          ae, rs, same_spin);
  compare("a'", "the same against a raw client that sleeps in recv at once", t, r, blocking);
  compare("a*", "tensorwire against a server whose threads sleep at once (--spin-us 0)", tn, rs,
          same_spin);
  compare("a''", "tensorwire with TW_SPIN_US=0 (sleeps at once) against that raw client", ts, r,
          blocking);
}

// ---------------------------------------------------------------- (b) throughput

void bench_throughput(const std::string& url, size_t bytes, int reps) {
  const double gb = static_cast<double>(bytes) / 1e9;
  std::vector<uint8_t> host(bytes);
  for (size_t i = 0; i < bytes; i += 4096) host[i] = static_cast<uint8_t>(i >> 12);
  tw::Device d = tw::Device::remote(url);
  d.connect();
  // Raw: the same bytes through one socket to a thread of this process, received into buffers
  // allocated once (as the buffer pools on both sides are reused by tensorwire).
  RawPeer sink([bytes](int fd) {
    std::vector<uint8_t> buf(bytes, 0);
    for (;;) {
      char cmd = 0;
      read_all(fd, &cmd, 1);
      if (cmd == 'u') {
        read_all(fd, buf.data(), bytes);
        write_all(fd, "k", 1);
      } else {
        write_all(fd, buf.data(), bytes);
      }
    }
  });
  std::vector<uint8_t> in(bytes, 0);
  // The two are interleaved, so that both see the same machine load.
  double up = 0, down = 0, raw_up = 0, raw_down = 0;
  for (int r = 0; r < reps; ++r) {
    {
      auto t0 = Clock::now();
      tw::Tensor t = tw::from_bytes(host, {static_cast<int64_t>(bytes)}, tw::kU8, d);
      d.sync();
      up = std::max(up, gb / (us_since(t0) / 1e6));
      t0 = Clock::now();
      tw::detail::HostValues v = t.host_values();  // the received buffer itself, no extra copy
      down = std::max(down, gb / (us_since(t0) / 1e6));
      if (static_cast<const uint8_t*>(v.data)[4096 * 7] != host[4096 * 7])
        throw std::runtime_error("download: wrong bytes");
    }
    d.sync();  // the tensor's drop has run: both sides' pools can reuse the buffers next time
    auto t0 = Clock::now();
    write_all(sink.fd(), "u", 1);
    write_all(sink.fd(), host.data(), bytes);
    char ack;
    read_all(sink.fd(), &ack, 1);
    raw_up = std::max(raw_up, gb / (us_since(t0) / 1e6));
    t0 = Clock::now();
    write_all(sink.fd(), "d", 1);
    read_all(sink.fd(), in.data(), bytes);
    raw_down = std::max(raw_down, gb / (us_since(t0) / 1e6));
  }
  std::string mib = std::to_string(bytes >> 20) + " MiB";
  rows.push_back({"b",
                  "upload " + mib + " (from_bytes + sync), GB/s, best of " + std::to_string(reps),
                  fmt("%.2f", up), fmt("%.2f", raw_up) + " (raw TCP)", fmt("%.2fx", up / raw_up),
                  ">= 0.8x raw", up / raw_up >= 0.8});
  rows.push_back({"b", "download " + mib + " (read), GB/s, best of " + std::to_string(reps),
                  fmt("%.2f", down), fmt("%.2f", raw_down) + " (raw TCP)",
                  fmt("%.2fx", down / raw_down), ">= 0.8x raw", down / raw_down >= 0.8});
}

// ---------------------------------------------------------------- (c) fire-and-forget

double adds_per_second(const tw::Device& d, int n) {
  tw::Tensor one = tw::full({1}, 1.0, tw::kF32, d);
  tw::Tensor x = tw::full({1}, 0.0, tw::kF32, d);
  d.sync();
  auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) x = x + one;
  float v = x.item<float>();
  double s = us_since(t0) / 1e6;
  if (v != static_cast<float>(n))
    throw std::runtime_error("fire-and-forget: wrong sum " + std::to_string(v));
  return n / s;
}

void bench_fire_and_forget(const std::string& url, int n) {
  tw::Device d = tw::Device::remote(url);
  d.connect();
  (void)adds_per_second(d, n / 10);  // warm up
  double remote = adds_per_second(d, n);
  tw::WireCounters c = tw::wire_counters(d);
  double local = adds_per_second(tw::Device::cpu(), n);
  rows.push_back({"c",
                  std::to_string(n) +
                      " chained adds of 1-element tensors, one read at the end, ops/s (" +
                      fmt("%.0f", static_cast<double>(c.ops) / c.frames_out) + " ops per frame)",
                  fmt("%.0f", remote), fmt("%.0f", local) + " (local CPU device)",
                  fmt("%.2fx", remote / local), ">= 250000 ops/s", remote >= 250000});
}

// ---------------------------------------------------------------- (e) one graph of 200k adds

tw::ir::Op add_op(tw::ir::TensorId a, tw::ir::TensorId b, tw::ir::TensorId out) {
  tw::ir::Binary op;
  op.kind = tw::ir::BinaryKind::kAdd;
  op.a = {a};
  op.b = {b};
  op.out = {out};
  return op;
}

tw::ir::Op full_op(tw::ir::TensorId out, tw::Shape shape, double v) {
  tw::ir::Full f;
  f.out = {out};
  f.shape = std::move(shape);
  f.dtype = tw::kF32;
  f.value = tw::ir::Scalar(v);
  return f;
}

void check(const tw::Status& st, const char* what) {
  if (!st.ok()) throw std::runtime_error(std::string(what) + ": " + st.message());
}

void bench_graph_adds(const std::string& url, int n) {
  tw::Device d = tw::Device::remote(url);
  d.connect();
  tw::detail::Sink& sink = *d.sink();
  // x_{i+1} = x_i + one, graph-local ids: 1 = x_0, 2 = one, 3.. the sums.
  tw::ir::Graph g;
  g.input_ids = {1, 2};
  g.inputs = {{{1}, tw::kF32}, {{1}, tw::kF32}};
  for (int i = 0; i < n; ++i) {
    g.ops.push_back(add_op(i == 0 ? 1 : static_cast<tw::ir::TensorId>(i + 2), 2,
                           static_cast<tw::ir::TensorId>(i + 3)));
  }
  g.output_ids = {static_cast<tw::ir::TensorId>(n + 2)};
  auto t0 = Clock::now();
  auto id = sink.register_graph(g);
  check(id.status(), "register_graph");
  double reg_s = us_since(t0) / 1e6;
  const tw::ir::TensorId x = sink.new_id(), one = sink.new_id();
  check(sink.submit(full_op(x, {1}, 0.0)), "submit");
  check(sink.submit(full_op(one, {1}, 1.0)), "submit");
  check(sink.sync(), "sync");
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const tw::ir::TensorId out = sink.new_id();
    const std::vector<tw::ir::TensorId> ins = {x, one}, outs = {out};
    t0 = Clock::now();
    check(sink.run_graph(*id, ins, outs), "run_graph");
    auto v = sink.read(out);
    double s = us_since(t0) / 1e6;
    check(v.status(), "read");
    float got = 0;
    std::memcpy(&got, v->bytes.data(), sizeof got);
    if (got != static_cast<float>(n))
      throw std::runtime_error("graph adds: wrong sum " + std::to_string(got));
    sink.drop(out);
    best = std::max(best, n / s);
  }
  tw::WireCounters before = tw::wire_counters(d);
  const tw::ir::TensorId out = sink.new_id();
  const std::vector<tw::ir::TensorId> ins = {x, one}, outs = {out};
  check(sink.run_graph(*id, ins, outs), "run_graph");
  check(sink.read(out).status(), "read");
  tw::WireCounters after = tw::wire_counters(d);
  double eager = adds_per_second(d, n);
  rows.push_back(
      {"e",
       std::to_string(n) +
           " chained 1-element adds as ONE graph, run by id, one read, effective ops/s (" +
           fmt("%.0f", static_cast<double>(after.bytes_out - before.bytes_out)) +
           " bytes sent per run; registered in " + fmt("%.2f s", reg_s) + ")",
       fmt("%.0f", best), fmt("%.0f", eager) + " (eager remote)", fmt("%.2fx", best / eager),
       ">= 5000000 ops/s", best >= 5e6});
}

// ---------------------------------------------------------------- (f) steady-state replay

// One SGD step of an MLP 64-512-512-10 on a batch of 256, forward (tanh), backward of
// 0.5 * sum(out^2), update w -= 0.01 * dw: inputs x, w1, w2, w3; outputs w1', w2', w3', loss.
tw::ir::Graph mlp_step() {
  using namespace tw::ir;
  Graph g;
  g.input_ids = {1, 2, 3, 4};
  g.inputs = {
      {{256, 64}, tw::kF32}, {{64, 512}, tw::kF32}, {{512, 512}, tw::kF32}, {{512, 10}, tw::kF32}};
  TensorId next = 5;
  auto emit = [&](auto op) {
    op.out = {next};
    g.ops.push_back(op);
    return next++;
  };
  auto mm = [&](TensorId a, TensorId b) { return emit(MatMul{{a}, {b}, {}}); };
  auto t = [&](TensorId a) { return emit(Permute{{a}, {1, 0}, {}}); };
  auto bin = [&](BinaryKind k, TensorId a, TensorId b) { return emit(Binary{k, {a}, {b}, {}}); };
  auto scalar = [&](BinaryKind k, TensorId a, double s, bool reverse) {
    return emit(BinaryScalar{k, {a}, Scalar(s), reverse, {}});
  };
  auto tanh = [&](TensorId a) { return emit(Unary{UnaryKind::kTanh, {a}, {}}); };
  const TensorId h1 = tanh(mm(1, 2)), h2 = tanh(mm(h1, 3)), o = mm(h2, 4);
  const TensorId loss = scalar(
      BinaryKind::kMul,
      emit(Reduce{ReduceKind::kSum, {bin(BinaryKind::kMul, o, o)}, {}, false, {}}), 0.5, false);
  const TensorId dw3 = mm(t(h2), o);
  auto dtanh = [&](TensorId grad, TensorId h) {
    return bin(BinaryKind::kMul, grad,
               scalar(BinaryKind::kSub, bin(BinaryKind::kMul, h, h), 1.0, true));
  };
  const TensorId gz2 = dtanh(mm(o, t(4)), h2);
  const TensorId dw2 = mm(t(h1), gz2);
  const TensorId gz1 = dtanh(mm(gz2, t(3)), h1);
  const TensorId dw1 = mm(t(1), gz1);
  auto sgd = [&](TensorId w, TensorId dw) {
    return bin(BinaryKind::kSub, w, scalar(BinaryKind::kMul, dw, 0.01, false));
  };
  g.output_ids = {sgd(2, dw1), sgd(3, dw2), sgd(4, dw3), loss};
  return g;
}

void bench_graph_replay_rss(const std::string& binary, int replays) {
  tw::testing::ServerProcess server({}, binary);
  tw::Device d = tw::Device::remote(server.url());
  tw::detail::Sink& sink = *d.sink();
  const tw::ir::Graph g = mlp_step();
  auto id = sink.register_graph(g);
  check(id.status(), "register_graph");
  std::vector<tw::ir::TensorId> ins;
  for (const tw::TensorMeta& m : g.inputs) {
    ins.push_back(sink.new_id());
    check(sink.submit(full_op(ins.back(), m.shape, 0.01)), "submit");
  }
  auto replay = [&](int n) {
    for (int i = 0; i < n; ++i) {
      std::vector<tw::ir::TensorId> outs;
      for (size_t k = 0; k < g.output_ids.size(); ++k) outs.push_back(sink.new_id());
      check(sink.run_graph(*id, ins, outs), "run_graph");
      for (tw::ir::TensorId o : outs) sink.drop(o);
    }
    check(sink.sync(), "sync");
  };
  replay(10);
  const uint64_t at10 = rss_bytes(server.pid());
  auto t0 = Clock::now();
  replay(replays - 10);
  const double per_step = us_since(t0) / (replays - 10);
  const uint64_t at_end = rss_bytes(server.pid());
  const double growth = static_cast<double>(at_end) - static_cast<double>(at10);
  rows.push_back(
      {"f",
       "replays of an MLP 64-512-512-10 b256 SGD step graph (" + std::to_string(g.ops.size()) +
           " ops, " + fmt("%.0f us", per_step) + " a step): server RSS growth from replay 10 to " +
           std::to_string(replays),
       fmt("%+.2f MiB", growth / 1048576.0),
       fmt("%.1f MiB", at10 / 1048576.0) + " -> " + fmt("%.1f MiB", at_end / 1048576.0) + " RSS",
       "", "within 1 MiB", growth <= 1048576.0 && growth >= -1048576.0});
}

// ---------------------------------------------------------------- (d) idle sessions

void bench_idle_sessions(const std::string& binary, int n) {
  tw::testing::ServerProcess server({"--max-sessions", std::to_string(n + 16)}, binary);
  {
    tw::Device warm = tw::Device::remote(server.url());  // first-session costs (pool, backend code)
    warm.connect();
  }
  uint64_t before = rss_bytes(server.pid());
  std::vector<tw::Device> devs;
  devs.reserve(n);
  auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) {
    devs.push_back(tw::Device::remote(server.url()));
    devs.back().connect();
  }
  double s = us_since(t0) / 1e6;
  uint32_t sessions = tw::remote_stats(devs.back()).sessions;
  uint64_t after = rss_bytes(server.pid());
  double per = (static_cast<double>(after) - static_cast<double>(before)) / n;
  rows.push_back(
      {"d",
       std::to_string(n) + " idle sessions (" + std::to_string(sessions) +
           " open): server RSS growth per session; all connected in " + fmt("%.2f s", s),
       fmt("%.1f KiB", per / 1024),
       fmt("%.1f MiB", before / 1048576.0) + " -> " + fmt("%.1f MiB", after / 1048576.0) + " RSS",
       "", "<= 64 KiB/session", per <= 64 * 1024});
}

// ---------------------------------------------------------------- (g) TLS

// GB/s of one upload of `host` (from_bytes + sync; the tensor is dropped before returning).
double upload_gbps(const tw::Device& d, const std::vector<uint8_t>& host) {
  auto t0 = Clock::now();
  {
    tw::Tensor t = tw::from_bytes(host, {static_cast<int64_t>(host.size())}, tw::kU8, d);
    d.sync();
  }
  double gbps = static_cast<double>(host.size()) / 1e9 / (us_since(t0) / 1e6);
  d.sync();  // the drop has run: the server's pool can reuse the buffer next time
  return gbps;
}

void bench_tls(const std::string& binary, int iters, size_t bytes, int reps) {
  // One worker: the three sessions on one shard. With two, the second session (the TLS one)
  // landed alone on the other worker and measured ~25% slower than the first and third whatever
  // its cipher (the third, ChaCha20, ~10% faster than plain TCP): placement, not encryption.
  tw::testing::ServerProcess server({"--listen", "tls://127.0.0.1:0", "--workers", "1"}, binary);
  tw::RemoteOptions pin;
  for (const std::string& l : server.lines())
    if (l.rfind("tls certificate sha256 ", 0) == 0) pin.tls_fingerprint = l.substr(23, 95);
  tw::Device plain = tw::Device::remote(server.urls().at(0));
  tw::Device tls = tw::remote_device(server.urls().at(1), 0, pin);
  // The same with ChaCha20-Poly1305 (offered alone), to show which cipher wins on this machine.
  ::setenv("TW_TLS_CIPHERS", "TLS_CHACHA20_POLY1305_SHA256", 1);
  tw::Device chacha = tw::remote_device(server.urls().at(1), 0, pin);
  ::unsetenv("TW_TLS_CIPHERS");
  const tw::Device* devices[] = {&plain, &tls, &chacha};
  std::vector<tw::Tensor> xs;
  for (const tw::Device* d : devices) {
    xs.push_back(tw::full({1}, 1.0, tw::kF32, *d));
    (void)round_trips_us(xs.back(), 200);  // warm up
  }
  // One round trip of each in turn, so that all three see the same machine load, the order
  // rotating.
  std::vector<double> us[3];
  for (int i = 0; i < iters; ++i)
    for (int j = 0; j < 3; ++j) {
      const int k = (i + j) % 3;
      us[k].push_back(round_trips_us(xs[k], 1).front());
    }
  double rt[3] = {dist(us[0]).median, dist(us[1]).median, dist(us[2]).median}, up[3] = {0, 0, 0};
  std::vector<uint8_t> host(bytes);
  for (size_t i = 0; i < bytes; i += 4096) host[i] = static_cast<uint8_t>(i >> 12);
  for (int r = 0; r < reps; ++r)
    for (int k = 0; k < 3; ++k) up[k] = std::max(up[k], upload_gbps(*devices[k], host));
  const char* names[] = {"", "TLS 1.3 (AES-128-GCM, the default)", "TLS 1.3 ChaCha20-Poly1305"};
  for (int k = 1; k < 3; ++k) {
    bool target = k == 1;  // the default suite is the one with targets
    rows.push_back({"g",
                    std::string(names[k]) + " round trip (1-element op + read), us, median of " +
                        std::to_string(iters) + " (the three kinds in turn)",
                    fmt("%.1f", rt[k]), fmt("%.1f", rt[0]) + " (tcp:// to the same server)",
                    fmt("%.2fx", rt[k] / rt[0]), target ? "<= 1.25x tcp://" : "(for comparison)",
                    rt[k] / rt[0] <= 1.25});
    rows.push_back({"g",
                    std::string(names[k]) + " upload " + std::to_string(bytes >> 20) +
                        " MiB, GB/s, best of " + std::to_string(reps),
                    fmt("%.2f", up[k]), fmt("%.2f", up[0]) + " (tcp:// to the same server)",
                    fmt("%.2fx", up[k] / up[0]), target ? ">= 0.4x tcp://" : "(for comparison)",
                    up[k] / up[0] >= 0.4});
  }
}

// ---------------------------------------------------------------- (h) --metrics overhead

// What --metrics adds to the server's work per op, measured in this process: an OpTimer with
// timing on against one with timing off, around an op that does nothing (ns per op). On a busy
// machine the side-by-side ratio below is noisy by a few percent; this is the steady figure it
// comes from.
double timing_ns_per_op() {
  tw::ir::Op op = tw::ir::BinaryScalar{};
  auto per_op = [&](tw::server::ServerMetrics& m) {
    constexpr int kOps = 2'000'000;
    double best = 1e30;
    tw::server::OpSampling sampling;  // as a session's (the adds are fast: sampled)
    for (int rep = 0; rep < 5; ++rep) {
      tw::server::OpTimer timer(m, &sampling);
      auto t0 = Clock::now();
      for (int i = 0; i < kOps; ++i) (void)timer.run(op, [] { return tw::Status::OK(); });
      best = std::min(best, us_since(t0) * 1000 / kOps);
    }
    return best;
  };
  tw::server::ServerMetrics off, on;
  on.enable_timing();
  return per_op(on) - per_op(off);
}

// Two servers side by side, one with --metrics (scraped once a second, as Prometheus would, but
// more often), one without; the (c) stream runs on each in turn, the order alternating per
// round, and the row is the median of the rounds' ratios: only runs seconds apart compare on a
// shared machine.
void bench_metrics_overhead(const std::string& binary, int n, int rounds) {
  tw::testing::ServerProcess plain({}, binary);
  tw::testing::ServerProcess metered({"--metrics", "tcp://127.0.0.1:0"}, binary);
  tw::Device without = tw::Device::remote(plain.url());
  tw::Device with = tw::Device::remote(metered.url());
  (void)adds_per_second(without, n / 10);  // warm up
  (void)adds_per_second(with, n / 10);
  std::atomic<bool> done{false};
  std::atomic<int> scrapes{0};
  std::thread scraper([&] {
    httplib::Client client(metered.metrics_url());
    while (!done) {
      if (auto res = client.Get("/metrics"); res && res->status == 200) ++scrapes;
      for (int i = 0; i < 100 && !done; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  std::vector<double> ratios, with_rates, without_rates;
  for (int r = 0; r < rounds; ++r) {
    double w, wo;
    if (r % 2 == 0) {
      wo = adds_per_second(without, n);
      w = adds_per_second(with, n);
    } else {
      w = adds_per_second(with, n);
      wo = adds_per_second(without, n);
    }
    with_rates.push_back(w);
    without_rates.push_back(wo);
    ratios.push_back(w / wo);
  }
  done = true;
  scraper.join();
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  double ratio = median(ratios);
  double timing = timing_ns_per_op();
  double stream_ns = 1e9 / median(without_rates);
  rows.push_back(
      {"h",
       std::to_string(n) + " chained adds as (c) on a server with --metrics (" +
           std::to_string(scrapes.load()) +
           " scrapes during the run) vs without, ops/s; median of " + std::to_string(rounds) +
           " alternating rounds. Op timing costs " + fmt("%.1f", timing) + " ns/op in-process, " +
           fmt("%.1f%%", 100 * timing / stream_ns) + " of the stream's " +
           fmt("%.0f ns/op", stream_ns),
       fmt("%.0f", median(with_rates)), fmt("%.0f", median(without_rates)) + " (no --metrics)",
       fmt("%.3fx", ratio), ">= 0.98x (<= 2% cost)", ratio >= 0.98});
}

// ---------------------------------------------------------------- (i) fairness

// Seconds per 2048x2048 f32 matmul on `d`, from batches of six (what the heavy session sends).
double matmul_seconds(const tw::Device& d, const tw::Tensor& a, int batches) {
  auto t0 = Clock::now();
  for (int i = 0; i < batches; ++i) {
    for (int k = 0; k < 6; ++k) (void)a.matmul(a);
    d.sync();
  }
  return us_since(t0) / 1e6 / (6.0 * batches);
}

// One light request's round trip, microseconds: a 1-element op and its read.
double light_sync_us(const tw::Tensor& x) {
  auto t0 = Clock::now();
  if ((x + 1.0).item<float>() != 2.0f) throw std::runtime_error("fairness: wrong light result");
  return us_since(t0);
}

void bench_fairness(const std::string& binary, int samples) {
  tw::testing::ServerProcess server({"--workers", "1"}, binary);
  tw::Device heavy = tw::Device::remote(server.url());
  tw::Device light = tw::Device::remote(server.url());
  tw::Tensor a = tw::full({2048, 2048}, 0.5, tw::kF32, heavy);
  tw::Tensor x = tw::full({1}, 1.0, tw::kF32, light);
  (void)matmul_seconds(heavy, a, 1);  // warm up (kernel plans, the pool's buffers)
  const double matmul = matmul_seconds(heavy, a, 2);
  std::vector<double> alone;
  for (int i = 0; i < 100; ++i) alone.push_back(light_sync_us(x));
  std::atomic<bool> stop{false};
  std::thread streamer([&] {
    while (!stop) (void)matmul_seconds(heavy, a, 1);
  });
  // Requests at times unrelated to the heavy session's ops, so that they land at every point
  // of an op.
  std::minstd_rand gen(7);
  std::uniform_int_distribution<int> gap_us(0, static_cast<int>(matmul * 1e6));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::vector<double> busy;
  for (int i = 0; i < samples; ++i) {
    std::this_thread::sleep_for(std::chrono::microseconds(gap_us(gen)));
    busy.push_back(light_sync_us(x));
  }
  stop = true;
  streamer.join();
  Dist b = dist(busy), q = dist(alone);
  double ratio = b.p99 / (matmul * 1e6);
  rows.push_back(
      {"i",
       "--workers 1: a light session's 1-element op + read while a heavy one streams 2048x2048 f32 "
       "matmuls (6 a batch), min / median / p99 ms (" +
           std::to_string(samples) + " syncs; idle " + fmt("%.2f ms", q.median / 1e3) +
           " median); baseline: one matmul",
       fmt3(b.min / 1e3, b.median / 1e3, b.p99 / 1e3), fmt("%.1f ms", matmul * 1e3),
       fmt("%.2fx", ratio), "p99 <= 1.5x one matmul", ratio <= 1.5});
}

// ---------------------------------------------------------------- (m) server-wide memory

void bench_memory_limit(const std::string& binary) {
  constexpr uint64_t kLimit = uint64_t{4} << 30;
  constexpr int64_t kChunk = int64_t{64} << 20;   // f32 elements: 256 MiB a tensor
  constexpr int kSessions = 4, kChunksEach = 32;  // each tries to hold 8 GiB
  tw::testing::ServerProcess server({"--max-memory", "4G"}, binary);
  std::vector<int> held(kSessions, 0), clean(kSessions, 0), other(kSessions, 0);
  auto t0 = Clock::now();
  {
    std::vector<tw::Device> devices;
    for (int s = 0; s < kSessions; ++s) devices.push_back(tw::Device::remote(server.url()));
    std::vector<std::vector<tw::Tensor>> tensors(kSessions);
    std::vector<std::thread> threads;
    for (int s = 0; s < kSessions; ++s) {
      threads.emplace_back([&, s] {
        for (int i = 0; i < kChunksEach; ++i) {
          tw::Tensor t = tw::full({kChunk}, 1.0, tw::kF32, devices[s]);
          try {
            if (t.sum().item<float>() != static_cast<float>(kChunk)) ++other[s];
            tensors[s].push_back(t);
            ++held[s];
          } catch (const tw::Error& e) {
            bool named = std::string(e.what()).find("server memory limit") != std::string::npos;
            ++(named ? clean[s] : other[s]);
          }
        }
      });
    }
    for (auto& t : threads) t.join();
  }
  const double s = us_since(t0) / 1e6;
  const uint64_t peak = status_bytes(server.pid(), "VmHWM:");
  bool alive = ::kill(server.pid(), 0) == 0;
  if (alive) {
    tw::Device after = tw::Device::remote(server.url());
    alive = tw::full({4}, 2.0, tw::kF32, after).sum().item<float>() == 8.0f;
  }
  int total_held = 0, total_clean = 0, total_other = 0;
  for (int i = 0; i < kSessions; ++i) {
    total_held += held[i];
    total_clean += clean[i];
    total_other += other[i];
  }
  const bool met = total_clean + total_held == kSessions * kChunksEach && total_other == 0 &&
                   static_cast<uint64_t>(total_held) * kChunk * 4 <= kLimit &&
                   peak <= (uint64_t{9} << 29) && alive;
  rows.push_back(
      {"m",
       "--max-memory 4G, 4 sessions each creating and summing 256 MiB tensors up to 8 GiB (" +
           fmt("%.1f s", s) +
           "): tensors held / over-limit ops failed naming the limit / "
           "other failures; the server " +
           (alive ? "alive" : "DEAD") + " after",
       std::to_string(total_held) + " / " + std::to_string(total_clean) + " / " +
           std::to_string(total_other),
       fmt("%.2f GiB peak RSS", peak / 1073741824.0), "",
       "over-limit ops fail cleanly, RSS <= 4.5 GiB, alive", met});
}

}  // namespace

// ---------------------------------------------------------------- (n, o) moves

// Bytes the client sent and received on the connections of `a` and `b`.
uint64_t client_bytes(const tw::Device& a, const tw::Device& b) {
  uint64_t n = 0;
  for (const tw::Device* d : {&a, &b}) {
    tw::WireCounters c = tw::wire_counters(*d);
    n += c.bytes_out + c.bytes_in;
  }
  return n;
}

// The best time, in seconds, of `reps` moves of `t` to `to`, each waited for with a sync;
// *through: the client's bytes of the last one. The moved tensor's sum must equal the source's.
double best_move_s(const tw::Tensor& t, const tw::Device& to, int reps, uint64_t* through) {
  const tw::Device from = t.device();
  const float want = t.sum().item<float>();
  if (t.to(to).sum().item<float>() != want)
    throw std::runtime_error("move: the moved tensor differs");
  double best = 1e9;
  for (int r = 0; r < reps; ++r) {
    to.sync();  // the previous copy's drop has run: the destination's pool reuses its buffer
    const uint64_t before = client_bytes(from, to);
    auto t0 = Clock::now();
    tw::Tensor m = t.to(to);
    to.sync();
    best = std::min(best, us_since(t0) / 1e6);
    *through = client_bytes(from, to) - before;
  }
  return best;
}

void bench_moves(const std::string& binary, size_t bytes, int reps, bool same, bool across) {
  const int64_t n = static_cast<int64_t>(bytes / 4);
  const double gb = static_cast<double>(bytes) / 1e9;
  const std::string mib = std::to_string(bytes >> 20) + " MiB";
  if (same) {
    tw::testing::ServerProcess server({"--devices", "2"}, binary);
    tw::Device d0 = tw::Device::remote(server.url(), 0), d1 = tw::Device::remote(server.url(), 1);
    tw::manual_seed(1);
    tw::Tensor t = tw::randn({n}, tw::kF32, d0);
    d1.connect();
    uint64_t through = 0;
    const double move = best_move_s(t, d1, reps, &through);
    // The floor: one copy of the bytes in this process, into memory touched before.
    std::vector<uint8_t> src(bytes, 1), dst(bytes, 0);
    double copy = 1e9;
    for (int r = 0; r < reps; ++r) {
      auto t0 = Clock::now();
      std::memcpy(dst.data(), src.data(), bytes);
      copy = std::min(copy, us_since(t0) / 1e6);
    }
    if (dst[bytes / 2] != 1) throw std::runtime_error("memcpy");
    rows.push_back({"n",
                    "same-server move of " + mib + " (t.to(device 1) + sync), ms, best of " +
                        std::to_string(reps) + "; " + std::to_string(through) +
                        " B through the client",
                    fmt("%.2f", move * 1e3), fmt("%.2f", copy * 1e3) + " (local memcpy)",
                    fmt("%.4fx", move / copy), "<= 2x memcpy, <= 1 KiB via client",
                    move <= 2 * copy && through <= 1024});
  }
  if (!across) return;
  tw::testing::ServerProcess sa({}, binary), sb({}, binary);
  tw::Device a = tw::Device::remote(sa.url()), b = tw::Device::remote(sb.url());
  tw::manual_seed(2);
  tw::Tensor t = tw::randn({n}, tw::kF32, a);
  b.connect();
  // Raw: a child process streams the same bytes to this one over loopback TCP, each side's
  // buffer allocated once.
  RawPeer source(
      [bytes](int fd) {
        std::vector<uint8_t> buf(bytes, 3);
        for (;;) {
          char cmd = 0;
          read_all(fd, &cmd, 1);
          write_all(fd, buf.data(), bytes);
        }
      },
      true);
  std::vector<uint8_t> in(bytes, 0);
  double raw = 0, moved = 0;
  uint64_t through = 0;
  // Interleaved, so that both see the same machine load.
  for (int r = 0; r < reps; ++r) {
    moved = std::max(moved, gb / best_move_s(t, b, 1, &through));
    auto t0 = Clock::now();
    write_all(source.fd(), "d", 1);
    read_all(source.fd(), in.data(), bytes);
    raw = std::max(raw, gb / (us_since(t0) / 1e6));
  }
  rows.push_back({"o",
                  "server-to-server move of " + mib +
                      " (t.to(other server) + sync), GB/s, best of " + std::to_string(reps) + "; " +
                      std::to_string(through) + " B through the client",
                  fmt("%.2f", moved), fmt("%.2f", raw) + " (raw TCP)", fmt("%.2fx", moved / raw),
                  ">= 0.8x raw, <= 1 KiB via client", moved / raw >= 0.8 && through <= 1024});
}

// (p) all_reduce of `bytes` of f32 across 2 server processes (Gloo between them): algorithm
// bandwidth, bytes / time, against raw TCP in the same run, one way and both ways at once.
// (q) data-parallel digits CNN training on 2 servers beside the same loop on 1.
void bench_dist(const std::string& binary, size_t bytes, int reps, bool reduce, bool train) {
  // One core each: two servers with a thread per core each would fight over this machine's two.
  tw::testing::ServerProcess sa({"--threads", "1", "--workers", "1"}, binary),
      sb({"--threads", "1", "--workers", "1"}, binary);
  std::vector<tw::Device> devices = {tw::Device::remote(sa.url()), tw::Device::remote(sb.url())};
  if (reduce) {
    const int64_t n = static_cast<int64_t>(bytes / 4);
    const double gb = static_cast<double>(bytes) / 1e9;
    tw::dist::Group group(devices);
    tw::manual_seed(3);
    std::vector<tw::Tensor> ts = {tw::randn({n}, tw::kF32, devices[0]),
                                  tw::randn({n}, tw::kF32, devices[1])};
    tw::dist::all_reduce(ts, tw::dist::ReduceOp::kSum, group);  // connects the group
    for (const tw::Device& d : devices) d.sync();
    // Raw: a child process and this one over loopback TCP, each buffer allocated once. One way:
    // the child streams the bytes here. Exchange: both send the bytes at once (what a
    // two-participant all-reduce must do: each sends and receives the whole tensor's size), this
    // side's send on a thread of its own.
    RawPeer source(
        [bytes](int fd) {
          std::vector<uint8_t> buf(bytes, 3), back(bytes, 0);
          for (;;) {
            char cmd = 0;
            read_all(fd, &cmd, 1);
            if (cmd == 'x') {
              std::thread t([&] { read_all(fd, back.data(), bytes); });
              write_all(fd, buf.data(), bytes);
              t.join();
            } else {
              write_all(fd, buf.data(), bytes);
            }
          }
        },
        true);
    std::vector<uint8_t> in(bytes, 0), out(bytes, 5);
    double raw = 0, exchange = 0, algo = 0;
    for (int r = 0; r < reps; ++r) {
      auto t0 = Clock::now();
      tw::dist::all_reduce(ts, tw::dist::ReduceOp::kSum, group);
      for (const tw::Device& d : devices) d.sync();
      algo = std::max(algo, gb / (us_since(t0) / 1e6));
      t0 = Clock::now();
      write_all(source.fd(), "d", 1);
      read_all(source.fd(), in.data(), bytes);
      raw = std::max(raw, gb / (us_since(t0) / 1e6));
      t0 = Clock::now();
      write_all(source.fd(), "x", 1);
      std::thread sender([&] { write_all(source.fd(), out.data(), bytes); });
      read_all(source.fd(), in.data(), bytes);
      sender.join();
      exchange = std::max(exchange, gb / (us_since(t0) / 1e6));
    }
    if (ts[0].to_bytes() != ts[1].to_bytes())
      throw std::runtime_error("all_reduce: replicas differ");
    rows.push_back(
        {"p",
         "all_reduce (sum) of " + std::to_string(bytes >> 20) +
             " MiB f32 across 2 servers (Gloo ring), algorithm bandwidth GB/s, best of " +
             std::to_string(reps) + "; vs raw one way",
         fmt("%.2f", algo), fmt("%.2f", raw) + " (raw TCP, one way)", fmt("%.2fx", algo / raw),
         ">= 0.7x raw", algo / raw >= 0.7});
    rows.push_back({"p'",
                    "the same all_reduce vs raw TCP exchanging the bytes both ways at once (the "
                    "traffic a 2-participant all-reduce needs at least)",
                    fmt("%.2f", algo), fmt("%.2f", exchange) + " (raw TCP, both ways)",
                    fmt("%.2fx", algo / exchange), "(context for p)", true});
  }
  if (!train) return;
  const tw::digits::Dataset all = tw::digits::load(tw::digits::default_path());
  const auto [train_set, test_set] = tw::digits::split(all, 360, 7);
  auto step_ms = [&](const std::vector<tw::Device>& on) {
    tw::digits::DataParallelTrainer t(tw::digits::ModelKind::kCnn, on, train_set, 64, 3e-3, 7);
    t.run_epoch(1, 3, 7, 0);  // warm: the group connects, buffers settle
    t.finish();
    double best = 1e9;
    for (int e = 2; e <= 3; ++e) {
      auto t0 = Clock::now();
      t.run_epoch(e, 3, 7, 0);
      t.finish();
      best = std::min(best, us_since(t0) / 1e3 / static_cast<double>(t.steps_per_epoch()));
    }
    if (!t.differing_parameters().empty()) throw std::runtime_error("replicas differ");
    return best;
  };
  const double two = step_ms(devices), one = step_ms({devices[0]});
  rows.push_back({"q",
                  "data-parallel digits CNN training step (batch 64 split over the servers, "
                  "gradients all_reduced; servers --threads 1 each), ms, best epoch of 2; replicas "
                  "bit-identical",
                  fmt("%.2f", two) + " (2 servers)", fmt("%.2f", one) + " (1 server)",
                  fmt("%.2fx", two / one), "printed beside 1 server (one 2-core machine)", true});
}

// ---------------------------------------------------------------- (s) shared memory

void bench_shm(const std::string& binary, size_t bytes, int reps) {
  const double gb = static_cast<double>(bytes) / 1e9;
  const std::string path = "/tmp/tw-bench-shm-" + std::to_string(getpid()) + ".sock";
  tw::testing::ServerProcess server({"--listen", "unix://" + path}, binary);
  const std::string url = "unix://" + path;
  std::vector<uint8_t> host(bytes), dst(bytes);
  for (size_t i = 0; i < bytes; i += 4096) host[i] = static_cast<uint8_t>(i >> 12);
  std::memset(dst.data(), 1, bytes);  // touched: the memcpy measures copying, not page faults
  tw::Device shm = tw::Device::remote(url);
  ::setenv("TW_SHM", "0", 1);
  tw::Device sock = tw::Device::remote(url);
  ::unsetenv("TW_SHM");
  shm.connect();
  sock.connect();
  struct Figures {
    double up = 0, down = 0;
    uint64_t wire = 0;  // bytes through the socket, both ways, in the last round
  };
  // One upload (from_bytes + sync) and one download (host_values, the result's bytes as they
  // land) on `d`; the best of the rounds.
  auto round = [&](const tw::Device& d, Figures& f) {
    tw::WireCounters c0 = tw::wire_counters(d);
    auto t0 = Clock::now();
    tw::Tensor t = tw::from_bytes(host, {static_cast<int64_t>(bytes)}, tw::kU8, d);
    d.sync();
    f.up = std::max(f.up, gb / (us_since(t0) / 1e6));
    t0 = Clock::now();
    tw::detail::HostValues v = t.host_values();
    f.down = std::max(f.down, gb / (us_since(t0) / 1e6));
    if (static_cast<const uint8_t*>(v.data)[4096 * 7] != host[4096 * 7]) {
      throw std::runtime_error("shm download: wrong bytes");
    }
    tw::WireCounters c1 = tw::wire_counters(d);
    f.wire = (c1.bytes_out - c0.bytes_out) + (c1.bytes_in - c0.bytes_in);
  };
  Figures fs, fk;
  Figures warm;
  round(shm, warm);  // the segments' and pools' first touch (slow on this VM) is not measured
  round(sock, warm);
  shm.sync();
  sock.sync();
  double copy = 0, pcopy = 0;
  // Interleaved, so that every figure sees the same machine load.
  for (int r = 0; r < reps; ++r) {
    round(shm, fs);
    round(sock, fk);
    auto t0 = Clock::now();
    std::memcpy(dst.data(), host.data(), bytes);
    copy = std::max(copy, gb / (us_since(t0) / 1e6));
    t0 = Clock::now();
    tw::net::parallel_copy(dst.data(), host.data(), bytes);
    pcopy = std::max(pcopy, gb / (us_since(t0) / 1e6));
    shm.sync();
    sock.sync();
  }
  if (dst[4096 * 9] != host[4096 * 9]) throw std::runtime_error("memcpy: wrong bytes");
  const std::string mib = std::to_string(bytes >> 20) + " MiB";
  const std::string base =
      fmt("%.2f", copy) + " (memcpy; parallel_copy " + fmt("%.2f", pcopy) + ")";
  rows.push_back({"s",
                  "unix:// upload " + mib +
                      " via shared memory (from_bytes + sync), GB/s, best of " +
                      std::to_string(reps) + "; " + fmt("%.0f", static_cast<double>(fs.wire)) +
                      " bytes through the socket per upload + download",
                  fmt("%.2f", fs.up), base, fmt("%.2fx", fs.up / copy), ">= 0.5x memcpy",
                  fs.up / copy >= 0.5});
  rows.push_back({"s",
                  "unix:// download " + mib + " via shared memory (read), GB/s, best of " +
                      std::to_string(reps),
                  fmt("%.2f", fs.down), base, fmt("%.2fx", fs.down / copy), ">= 0.5x memcpy",
                  fs.down / copy >= 0.5});
  rows.push_back({"s", "the same through the unix socket (TW_SHM=0): upload / download, GB/s",
                  fmt("%.2f", fk.up) + " / " + fmt("%.2f", fk.down), base,
                  fmt("%.2fx", fk.up / copy) + " / " + fmt("%.2fx", fk.down / copy),
                  "(for comparison)", true});
}

// ---------------------------------------------------------------- (x) denial of service

// Seconds until the server's session count, as `watch` sees it, is `n` (at most `limit`).
double seconds_until_sessions(tw::testing::RawClient& watch, uint32_t n, double limit) {
  const auto t0 = Clock::now();
  for (uint64_t req = 1000; us_since(t0) < limit * 1e6; ++req) {
    if (tw::testing::server_stats(watch, req).sessions == n) return us_since(t0) / 1e6;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return -1;
}

// A new connection's handshake, microseconds.
double welcome_us(const std::string& url) {
  const auto t0 = Clock::now();
  tw::testing::RawClient c(url, 30000);
  auto w = c.hello();
  if (!w.ok() || w->kind != tw::protocol::ServerMsg::kWelcome) {
    throw std::runtime_error("dos: a new connection got no Welcome");
  }
  return us_since(t0);
}

void bench_abandoned_work(const std::string& binary, bool quick) {
  namespace tt = tw::testing;
  constexpr int kClients = 4;
  const std::string frame_bytes =
      std::to_string(tt::flatten(tt::attention_frame(131072)).size() + 4) + "-byte frame";
  {
    // Default grace, resumable clients: each one's attention (T = 32768, about 1e9 scores) runs
    // to its end while its session is parked; a second frame queued behind it must not run.
    tt::ServerProcess server({"--max-op-cost", "0"}, binary);
    tt::RawClient watch(server.url(), 60000);
    if (!watch.hello().ok()) throw std::runtime_error("dos: no watch session");
    tw::Device light = tw::Device::remote(server.url());
    tw::Tensor x = tw::full({1}, 1.0, tw::kF32, light);
    std::vector<double> idle_welcome, idle_read, welcome, read;
    for (int i = 0; i < 50; ++i) {
      idle_welcome.push_back(welcome_us(server.url()));
      idle_read.push_back(light_sync_us(x));
    }
    const uint64_t ops0 = tt::server_stats(watch, 1).ops_executed;
    std::vector<std::thread> clients;
    for (int i = 0; i < kClients; ++i) {
      clients.emplace_back([&] {
        tw::protocol::BatchWriter queued;
        for (tw::ir::TensorId id = 10; id < 20; ++id)  // ten ops: had they run, the count shows
          queued.add_op(tw::ir::Full{.out = {id}, .shape = {4}, .dtype = tw::kF32, .value = 2.0});
        queued.add_sync(2);
        tt::send_and_go(server.url(), {tt::attention_frame(32768), queued.take()}, true);
      });
    }
    for (std::thread& t : clients) t.join();
    // While the sessions' work runs (their sessions still count until it has returned).
    const auto t0 = Clock::now();
    while (tt::server_stats(watch, 2).sessions > 2 && us_since(t0) < 120e6) {
      welcome.push_back(welcome_us(server.url()));
      read.push_back(light_sync_us(x));
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    const double ran_s = us_since(t0) / 1e6;
    // (Less the light session's ops: one a sample.)
    const uint64_t ran_ops = tt::server_stats(watch, 3).ops_executed - ops0 - read.size();
    if (welcome.empty()) throw std::runtime_error("dos: the work ended before any sample");
    const Dist w = dist(welcome), r = dist(read), iw = dist(idle_welcome), idr = dist(idle_read);
    const std::string during = "while " + std::to_string(kClients) +
                               " abandoned attention ops over T = 32768 run (" +
                               fmt("%.1f s", ran_s) + ", " + std::to_string(welcome.size()) +
                               " samples), min / median / p99 ms; baseline: idle p99";
    rows.push_back({"x", "a new connection's Welcome " + during,
                    fmt3(w.min / 1e3, w.median / 1e3, w.p99 / 1e3), fmt("%.2f ms", iw.p99 / 1e3),
                    fmt("%.1fx", w.p99 / iw.p99), "p99 <= 50 ms", w.p99 <= 50e3});
    rows.push_back({"x", "a light session's 1-element op + read " + during,
                    fmt3(r.min / 1e3, r.median / 1e3, r.p99 / 1e3), fmt("%.2f ms", idr.p99 / 1e3),
                    fmt("%.1fx", r.p99 / idr.p99), "p99 <= 50 ms", r.p99 <= 50e3});
    // The first frames' Full and attention at most; a queued frame that ran adds ten.
    const int64_t queued_ran = std::max<int64_t>(0, static_cast<int64_t>(ran_ops) - 2 * kClients);
    rows.push_back({"x",
                    "default --resume-grace: ops of the parked sessions' queued frames that ran "
                    "(each sent the " +
                        frame_bytes +
                        " then 10 Fulls + Sync; ops run in all: " + std::to_string(ran_ops) + ")",
                    std::to_string(queued_ran), "", "", "0", queued_ran == 0});
  }
  {
    // --resume-grace 0: the sessions end with their connections, and their work is cancelled.
    tt::ServerProcess server({"--max-op-cost", "0", "--resume-grace", "0"}, binary);
    tt::RawClient watch(server.url(), 60000);
    if (!watch.hello().ok()) throw std::runtime_error("dos: no watch session");
    std::vector<double> stops;
    for (int round = 0; round < (quick ? 2 : 5); ++round) {
      std::vector<std::thread> clients;
      for (int i = 0; i < kClients; ++i) {
        clients.emplace_back([&] { tt::send_and_go(server.url(), {tt::attention_frame(131072)}); });
      }
      for (std::thread& t : clients) t.join();
      stops.push_back(seconds_until_sessions(watch, 1, 120));
    }
    const Dist st = dist(stops);
    rows.push_back({"x",
                    "--resume-grace 0: from the last of " + std::to_string(kClients) +
                        " clients' close (each sent the " + frame_bytes +
                        ", T = 131072: 1.7e10 scores, a minute of work) until their work has "
                        "stopped and the sessions ended, min / median / max s over " +
                        std::to_string(stops.size()) + " rounds",
                    fmt3(st.min, st.median, *std::max_element(stops.begin(), stops.end())), "", "",
                    "<= 1 s", st.min >= 0 && *std::max_element(stops.begin(), stops.end()) <= 1.0});
  }
}

int main(int argc, char** argv) {
  std::string binary = TW_SERVER_BINARY;
  bool quick = false;
  std::string only = "abcdefghimnopqsx";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick")
      quick = true;
    else if (a == "--server" && i + 1 < argc)
      binary = argv[++i];
    else if (a == "--only" && i + 1 < argc)
      only = argv[++i];
    else {
      std::fprintf(stderr,
                   "usage: tw_bench_remote [--quick] [--only abcdefghimnopqsx] [--server PATH]\n");
      return 2;
    }
  }
  auto on = [&](char part) { return only.find(part) != std::string::npos; };
  std::signal(SIGPIPE, SIG_IGN);
  // 1,000 sessions need 1,000+ descriptors on both sides (the child inherits the limit).
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
  double load = 0;
  if (std::FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &load) != 1) load = 0;
    std::fclose(f);
  }
  try {
    {
      tw::testing::ServerProcess server({}, binary);
      if (on('a')) {
        tw::testing::ServerProcess no_spin({"--spin-us", "0"}, binary);
        bench_latency(server.url(), no_spin.url(), quick ? 500 : 3000);
        bench_two_devices(binary, quick ? 500 : 3000);
      }
      if (on('b')) bench_throughput(server.url(), size_t{256} << 20, quick ? 3 : 5);
      if (on('c')) bench_fire_and_forget(server.url(), quick ? 50000 : 200000);
      if (on('e')) bench_graph_adds(server.url(), 200000);
    }
    if (on('f')) bench_graph_replay_rss(binary, 1000);
    if (on('d')) bench_idle_sessions(binary, 1000);
    if (on('g')) bench_tls(binary, quick ? 600 : 3000, size_t{256} << 20, quick ? 3 : 5);
    if (on('h')) bench_metrics_overhead(binary, quick ? 50000 : 200000, quick ? 3 : 9);
    if (on('i')) bench_fairness(binary, quick ? 40 : 200);
    if (on('m')) bench_memory_limit(binary);
    if (on('n') || on('o')) {
      bench_moves(binary, size_t{256} << 20, quick ? 3 : 5, on('n'), on('o'));
    }
    if (on('p') || on('q')) bench_dist(binary, size_t{64} << 20, quick ? 3 : 5, on('p'), on('q'));
    if (on('s')) bench_shm(binary, size_t{256} << 20, quick ? 3 : 5);
    if (on('x')) bench_abandoned_work(binary, quick);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tw_bench_remote: %s\n", e.what());
    return 1;
  }
  std::printf(
      "tensorwire remote benchmark: tensorwire-server child process on 127.0.0.1 (TCP); baselines "
      "are plain\n"
      "sockets to a thread of this process and the local CPU device. %u hardware threads, load "
      "average %.2f.\n\n",
      std::thread::hardware_concurrency(), load);
  std::printf("| | measurement | tensorwire remote | baseline | ratio | target | met |\n");
  std::printf("|---|---|---:|---:|---:|---|---|\n");
  for (const Row& r : rows) {
    std::printf("| %s | %s | %s | %s | %s | %s | %s |\n", r.id.c_str(), r.what.c_str(),
                r.tw.c_str(), r.base.c_str(), r.ratio.c_str(), r.target.c_str(),
                r.met ? "yes" : "NO");
  }
  return 0;
}
