// Remote execution beside its floor, in one run: a tensorwire-server child process on 127.0.0.1
// (TCP) against plain POSIX sockets served by a thread of this binary, and against the local CPU
// device. Prints one table with a target per row.
//   (a) round trip of a 1-element op plus its read vs a raw TCP ping-pong of the same sizes
//   (b) upload and download of 256 MiB vs raw TCP streaming of the same bytes
//   (c) fire-and-forget throughput of 1-element adds (one read at the end) vs the CPU device
//   (d) 1,000 idle sessions: server RSS growth per session, time for all to connect
//   (e) the (c) stream on a server with --metrics, scraped once a second, vs one without
// Usage: tw_bench_remote [--quick] [--only abcde] [--server PATH]. Measures; never asserts.
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
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "server/metrics.h"
#include "support/server_process.h"
#include "tensorwire/remote.h"
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

uint64_t rss_bytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  while (in >> key) {
    if (key == "VmRSS:") {
      uint64_t kb = 0;
      in >> kb;
      return kb * 1024;
    }
    std::getline(in, key);
  }
  return 0;
}

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
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) throw std::runtime_error("raw connect failed");
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

void bench_latency(const std::string& url, int iters) {
  tw::Device d = tw::Device::remote(url);
  tw::Tensor x = tw::full({1}, 1.0, tw::kF32, d);
  d.sync();
  for (int i = 0; i < 200; ++i) (void)(x + 1.0).item<float>();  // warm up
  tw::WireCounters c0 = tw::wire_counters(d);
  (void)(x + 1.0).item<float>();
  tw::WireCounters c1 = tw::wire_counters(d);
  // One iteration: one frame each way (the drop of the temporary rides in the next frame).
  size_t req = static_cast<size_t>(c1.bytes_out - c0.bytes_out);
  size_t resp = static_cast<size_t>(c1.bytes_in - c0.bytes_in);
  std::vector<double> tw_us;
  for (int i = 0; i < iters; ++i) {
    auto t0 = Clock::now();
    float v = (x + 1.0).item<float>();
    tw_us.push_back(us_since(t0));
    if (v != 2.0f) throw std::runtime_error("latency: wrong result");
  }

  // Raw ping-pong of the same sizes: the peer on a thread of this process, and in a child
  // process (the topology of a client and a tensorwire-server).
  auto raw_pingpong = [&](bool child_process) {
    std::vector<double> us;
    RawPeer peer(
        [req, resp](int fd) {
          std::vector<char> in(req), out(resp, 1);
          for (;;) {
            read_all(fd, in.data(), req);
            write_all(fd, out.data(), resp);
          }
        },
        child_process);
    std::vector<char> out(req, 2), in(resp);
    for (int i = 0; i < 200 + iters; ++i) {
      auto t0 = Clock::now();
      write_all(peer.fd(), out.data(), req);
      read_all(peer.fd(), in.data(), resp);
      if (i >= 200) us.push_back(us_since(t0));
    }
    return us;
  };
  std::vector<double> raw_us = raw_pingpong(false);
  std::vector<double> raw_proc_us = raw_pingpong(true);
  Dist t = dist(tw_us), r = dist(raw_us), rp = dist(raw_proc_us);
  double ratio = t.median / r.median;
  rows.push_back({"a", "1-element op + read round trip, us (min / median / p99); " + std::to_string(req) + " B out, " +
                           std::to_string(resp) + " B back",
                  fmt3(t.min, t.median, t.p99), fmt3(r.min, r.median, r.p99) + " (raw TCP ping-pong)",
                  fmt("%.2fx", ratio), "<= 2x raw (median)", ratio <= 2.0});
  rows.push_back({"a'", "the same, raw peer in a child process (two processes, as client and server are)",
                  fmt3(t.min, t.median, t.p99), fmt3(rp.min, rp.median, rp.p99) + " (raw TCP, 2 processes)",
                  fmt("%.2fx", t.median / rp.median), "(for comparison)", t.median / rp.median <= 2.0});
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
      if (static_cast<const uint8_t*>(v.data)[4096 * 7] != host[4096 * 7]) throw std::runtime_error("download: wrong bytes");
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
  rows.push_back({"b", "upload " + mib + " (from_bytes + sync), GB/s, best of " + std::to_string(reps),
                  fmt("%.2f", up), fmt("%.2f", raw_up) + " (raw TCP)", fmt("%.2fx", up / raw_up), ">= 0.8x raw",
                  up / raw_up >= 0.8});
  rows.push_back({"b", "download " + mib + " (read), GB/s, best of " + std::to_string(reps), fmt("%.2f", down),
                  fmt("%.2f", raw_down) + " (raw TCP)", fmt("%.2fx", down / raw_down), ">= 0.8x raw",
                  down / raw_down >= 0.8});
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
  if (v != static_cast<float>(n)) throw std::runtime_error("fire-and-forget: wrong sum " + std::to_string(v));
  return n / s;
}

void bench_fire_and_forget(const std::string& url, int n) {
  tw::Device d = tw::Device::remote(url);
  d.connect();
  (void)adds_per_second(d, n / 10);  // warm up
  double remote = adds_per_second(d, n);
  tw::WireCounters c = tw::wire_counters(d);
  double local = adds_per_second(tw::Device::cpu(), n);
  rows.push_back({"c", std::to_string(n) + " chained adds of 1-element tensors, one read at the end, ops/s (" +
                           fmt("%.0f", static_cast<double>(c.ops) / c.frames_out) + " ops per frame)",
                  fmt("%.0f", remote), fmt("%.0f", local) + " (local CPU device)", fmt("%.2fx", remote / local),
                  ">= 250000 ops/s", remote >= 250000});
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
  rows.push_back({"d", std::to_string(n) + " idle sessions (" + std::to_string(sessions) +
                           " open): server RSS growth per session; all connected in " + fmt("%.2f s", s),
                  fmt("%.1f KiB", per / 1024), fmt("%.1f MiB", before / 1048576.0) + " -> " +
                                                    fmt("%.1f MiB", after / 1048576.0) + " RSS",
                  "", "<= 64 KiB/session", per <= 64 * 1024});
}

// ---------------------------------------------------------------- (e) --metrics overhead

// What --metrics adds to the server's work per op, measured in this process: an OpTimer with
// timing on against one with timing off, around an op that does nothing (ns per op). On a busy
// machine the side-by-side ratio below is noisy by a few percent; this is the steady figure it
// comes from.
double timing_ns_per_op() {
  tw::ir::Op op = tw::ir::BinaryScalar{};
  auto per_op = [&](tw::server::ServerMetrics& m) {
    constexpr int kOps = 2'000'000;
    double best = 1e30;
    for (int rep = 0; rep < 5; ++rep) {
      tw::server::OpTimer timer(m);
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
      for (int i = 0; i < 100 && !done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
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
  rows.push_back({"e", std::to_string(n) + " chained adds as (c) on a server with --metrics (" +
                           std::to_string(scrapes.load()) + " scrapes during the run) vs without, ops/s; median of " +
                           std::to_string(rounds) + " alternating rounds. Op timing costs " + fmt("%.1f", timing) +
                           " ns/op in-process, " + fmt("%.1f%%", 100 * timing / stream_ns) + " of the stream's " +
                           fmt("%.0f ns/op", stream_ns),
                  fmt("%.0f", median(with_rates)), fmt("%.0f", median(without_rates)) + " (no --metrics)",
                  fmt("%.3fx", ratio), ">= 0.98x (<= 2% cost)", ratio >= 0.98});
}

}  // namespace

int main(int argc, char** argv) {
  std::string binary = TW_SERVER_BINARY;
  bool quick = false;
  std::string only = "abcde";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick") quick = true;
    else if (a == "--server" && i + 1 < argc) binary = argv[++i];
    else if (a == "--only" && i + 1 < argc) only = argv[++i];
    else {
      std::fprintf(stderr, "usage: tw_bench_remote [--quick] [--only abcde] [--server PATH]\n");
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
      if (on('a')) bench_latency(server.url(), quick ? 500 : 3000);
      if (on('b')) bench_throughput(server.url(), size_t{256} << 20, quick ? 3 : 5);
      if (on('c')) bench_fire_and_forget(server.url(), quick ? 50000 : 200000);
    }
    if (on('d')) bench_idle_sessions(binary, 1000);
    if (on('e')) bench_metrics_overhead(binary, quick ? 50000 : 200000, quick ? 3 : 9);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tw_bench_remote: %s\n", e.what());
    return 1;
  }
  std::printf("tensorwire remote benchmark: tensorwire-server child process on 127.0.0.1 (TCP); baselines are plain\n"
              "sockets to a thread of this process and the local CPU device. %u hardware threads, load average %.2f.\n\n",
              std::thread::hardware_concurrency(), load);
  std::printf("| | measurement | tensorwire remote | baseline | ratio | target | met |\n");
  std::printf("|---|---|---:|---:|---:|---|---|\n");
  for (const Row& r : rows) {
    std::printf("| %s | %s | %s | %s | %s | %s | %s |\n", r.id.c_str(), r.what.c_str(), r.tw.c_str(), r.base.c_str(),
                r.ratio.c_str(), r.target.c_str(), r.met ? "yes" : "NO");
  }
  return 0;
}
