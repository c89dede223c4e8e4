// tensorwire over a shaped link (tests/support/shaped_link.h: client and server in their own
// network namespaces, a veth pair limited by tc tbf, latency from a delaying relay), each row
// against its target from issue 34, in one run, printed as one table:
//   (L) the link itself: raw TCP streaming through it (what "the link rate" means below)
//   (U) 256 MiB random upload at 100 Mbit/s: >= 0.9x the link rate
//   (Z) 256 MiB compressible upload (int64 labels, one-hot f32, zeros) at 100 Mbit/s: >= 3x the
//       link rate (zstd frames, protocol 9; TW_COMPRESS)
//   (D) re-upload of the same 64 MiB (deduplicated, protocol 9): <= 1 KiB on the wire, < 5 ms,
//       three ways: a host tensor moved (.to), a vector handed over (from_vector(std::move(v))),
//       lent bytes (from_bytes of a span, which waits one round trip; client/dedup.cc)
//   (Zd) 256 MiB reads, compressible (int64 labels) and random (f32), with compressed replies
//       (protocol 10, asked for by the client's auto rule) and with TW_COMPRESS=0: compressible
//       >= 3x the link rate, random >= 0.9x (measured; no target in issue 34)
//   (F) 1M tiny ops (1-element adds) to a server slowed to ~10k ops/s (TW_TEST_OP_DELAY_US=50,
//       a sleep of ~100 us): client and server RSS growth <= 64 MiB each (flow control,
//       TW_WINDOW_BYTES)
//   (T) digits CNN training (batch 64, Adam, graph replay), --t-epochs epochs (to the last
//       report and an idle device) after three of warm-up, at 1 Gbit/s and 2 ms and 20 ms RTT
//       against loopback: with the loss read every 20 steps (asynchronous reports), steps/s >=
//       0.9x loopback's; read every step (asynchronous, and waited for at once), step time <=
//       loopback's + 1.1 RTT (--t-reps runs each side, link and loopback alternating; the best
//       against the best, medians beside). A run's time ends with one round trip (the last
//       report, then a sync), a fixed cost, not a per-step one: the asynchronous rows run 100
//       epochs (2400 steps, ~1.5 s), so that it is ~1% of a run at 20 ms, as in a real training
//       run of thousands of steps; at 20 epochs it was ~7% of one. The waited row, one round
//       trip per step, needs no such length (--t-waited-epochs, 10).
//   (K) a black-holed link (every packet dropped, no RST) under a waiting read, with
//       TW_DEAD_PEER_MS=2000: the read fails within the deadline + 1 s
// Usage: tw_bench_net [--quick] [--only LUZDFTK, or Zd for the reads] [--rtt-us N]
//        [--rate 100mbit] [--server PATH] [--t-rtt-us 2000,20000] [--t-reps 5] [--t-epochs 100]
//        [--t-waited-epochs 10]
//        [--d-reps 5].
// Needs root (network namespaces); measures, never asserts. `make bench-net` runs it.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "digits/digits.h"
#include "support/server_process.h"
#include "support/shaped_link.h"
#include "tensorwire/profile.h"
#include "tensorwire/tensorwire.h"

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
std::string fmt(const char* f, double a) {
  char b[64];
  std::snprintf(b, sizeof b, f, a);
  return b;
}

struct Row {
  std::string id, what, measured, target;
  bool ok;
};
std::vector<Row> rows;

struct Args {
  bool quick = false;
  std::string only = "LUZDFTK";
  bool reads = true;  // rows Zd (in --only as "Zd", taken out of `only` by main)
  uint32_t rtt_us = 2000;
  std::string rate = "100mbit";
  std::string server = TW_SERVER_BINARY;
  std::vector<uint32_t> t_rtts_us = {2000, 20000};  // row T's links (--t-rtt-us 0,2000,20000)
  int t_reps = 5;            // row T: runs per side, link and loopback alternating (--t-reps)
  int t_epochs = 100;        // row T: epochs timed per run, after the warm-up (--t-epochs)
  int t_waited_epochs = 10;  // the same for its waited row (--t-waited-epochs)
  int d_reps = 5;            // row D: uploads timed per way (--d-reps)
};

// "100mbit" in bytes per second.
double rate_bytes(const std::string& r) {
  double v = std::atof(r.c_str());
  if (r.find("gbit") != std::string::npos) return v * 1e9 / 8;
  if (r.find("mbit") != std::string::npos) return v * 1e6 / 8;
  if (r.find("kbit") != std::string::npos) return v * 1e3 / 8;
  return v;
}

uint16_t port_of(const std::string& url) {
  return static_cast<uint16_t>(std::stoi(url.substr(url.rfind(':') + 1)));
}

// A server in the link's server namespace with the relay in front of it.
struct Served {
  std::unique_ptr<tw::testing::ServerProcess> server;
  std::string url;
};
Served serve(tw::testing::ShapedLink& link, const Args& a, std::vector<std::string> extra = {}) {
  Served s;
  s.server =
      link.in_server([&] { return std::make_unique<tw::testing::ServerProcess>(extra, a.server); });
  s.url = link.relay_to(port_of(s.server->url()));
  return s;
}

// A listening socket in the server's namespace on `addr`, port chosen by the kernel: the
// descriptor, and in *a the address it bound.
int listen_in_server(tw::testing::ShapedLink& link, const char* addr, sockaddr_in* a) {
  int lfd = link.in_server([] { return ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0); });
  *a = {};
  a->sin_family = AF_INET;
  ::inet_pton(AF_INET, addr, &a->sin_addr);
  ::bind(lfd, reinterpret_cast<sockaddr*>(a), sizeof *a);
  ::listen(lfd, 1);
  socklen_t n = sizeof *a;
  ::getsockname(lfd, reinterpret_cast<sockaddr*>(a), &n);
  return lfd;
}

// (L) raw TCP through the link: a sink in the server namespace, a sender in the client's.
double raw_stream_bytes_per_s(tw::testing::ShapedLink& link, size_t bytes) {
  sockaddr_in a;
  int lfd = listen_in_server(link, tw::testing::ShapedLink::kServerAddr, &a);
  std::thread sink([&] {
    int c = ::accept(lfd, nullptr, nullptr);
    std::vector<char> buf(1 << 20);
    size_t got = 0;
    while (got < bytes) {
      ssize_t r = ::recv(c, buf.data(), buf.size(), 0);
      if (r <= 0) break;
      got += static_cast<size_t>(r);
    }
    char ack = 1;
    (void)::send(c, &ack, 1, 0);
    ::close(c);
  });
  int c = link.in_client([] { return ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0); });
  ::connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a);
  std::vector<char> buf(1 << 20, 7);
  auto t0 = Clock::now();
  size_t sent = 0;
  while (sent < bytes) {
    ssize_t w = ::send(c, buf.data(), std::min(buf.size(), bytes - sent), MSG_NOSIGNAL);
    if (w <= 0) break;
    sent += static_cast<size_t>(w);
  }
  char ack;
  (void)::recv(c, &ack, 1, 0);
  double s = seconds_since(t0);
  sink.join();
  ::close(c);
  ::close(lfd);
  return static_cast<double>(bytes) / s;
}

// The link's own round trip, as ping would see it: the median of `reps` one-byte exchanges
// between raw TCP sockets through the delaying relay (an echo on 127.0.0.1 in the server's
// namespace, as a tensorwire server would be), no tensorwire code on the path. The emulated
// link's round trip is the nominal one plus what the relay's wake-ups add (kernel receive
// stamps keep its reading latency out; its timer's is in); a real link's would be measured the
// same way.
double raw_round_trip_s(tw::testing::ShapedLink& link, int reps) {
  sockaddr_in a;
  int lfd = listen_in_server(link, "127.0.0.1", &a);
  std::thread echo([&] {
    int c = ::accept(lfd, nullptr, nullptr);
    int one = 1;
    ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char b;
    while (::recv(c, &b, 1, 0) == 1 && ::send(c, &b, 1, MSG_NOSIGNAL) == 1) {
    }
    ::close(c);
  });
  const std::string url = link.relay_to(ntohs(a.sin_port));
  sockaddr_in r{};
  r.sin_family = AF_INET;
  r.sin_port = htons(static_cast<uint16_t>(port_of(url)));
  ::inet_pton(AF_INET, tw::testing::ShapedLink::kServerAddr, &r.sin_addr);
  int c = link.in_client([] { return ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0); });
  int one = 1;
  ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  std::vector<double> rt;
  if (::connect(c, reinterpret_cast<sockaddr*>(&r), sizeof r) == 0) {
    for (int i = 0; i < reps; ++i) {
      char b = 1;
      auto t0 = Clock::now();
      if (::send(c, &b, 1, MSG_NOSIGNAL) != 1 || ::recv(c, &b, 1, 0) != 1) break;
      rt.push_back(seconds_since(t0));
    }
  }
  ::shutdown(c, SHUT_WR);
  ::close(c);
  echo.join();
  ::close(lfd);
  if (rt.empty()) return 0;
  std::sort(rt.begin(), rt.end());
  return rt[rt.size() / 2];
}

uint64_t bytes_out(const std::string& url) {
  for (const auto& d : tw::profile::devices())
    if (d.device.find(url) != std::string::npos) return d.bytes_out;
  return 0;
}

// Seconds for one upload of `host` (from_bytes + sync); the tensor dropped after.
double upload_seconds(const tw::Device& d, const std::vector<uint8_t>& host) {
  auto t0 = Clock::now();
  {
    tw::Tensor t = tw::from_bytes(host, {static_cast<int64_t>(host.size())}, tw::kU8, d);
    d.sync();
  }
  double s = seconds_since(t0);
  d.sync();
  return s;
}

// int64 labels in [0, 10), their one-hot f32 rows, and zeros: a data set's typical bytes.
std::vector<uint8_t> compressible(size_t bytes) {
  std::vector<uint8_t> v(bytes, 0);
  std::mt19937_64 rng(7);
  const size_t third = bytes / 3 / 8 * 8;
  for (size_t i = 0; i + 8 <= third; i += 8) {
    int64_t label = static_cast<int64_t>(rng() % 10);
    std::memcpy(v.data() + i, &label, 8);
  }
  for (size_t i = third; i + 40 <= 2 * third; i += 40) {
    float one = 1.0f;
    std::memcpy(v.data() + i + 4 * (rng() % 10), &one, 4);
  }
  return v;  // the last third: zeros
}

std::vector<uint8_t> random_bytes(size_t bytes) {
  std::vector<uint8_t> v(bytes);
  std::mt19937_64 rng(11);
  for (size_t i = 0; i + 8 <= bytes; i += 8) {
    uint64_t x = rng();
    std::memcpy(v.data() + i, &x, 8);
  }
  return v;
}

void bench_reupload(tw::testing::ShapedLink& link, const Served& s, const tw::Device& first,
                    const Args& a);

void bench_uploads(tw::testing::ShapedLink& link, const Args& a, double link_rate) {
  Served s = serve(link, a);
  tw::Device d = tw::Device::remote(s.url);
  link.in_client([&] { d.connect(); });
  const size_t bytes = (a.quick ? 32u : 256u) << 20;
  const std::string mib = std::to_string(bytes >> 20) + " MiB";
  if (a.only.find('U') != std::string::npos) {
    std::vector<uint8_t> host = random_bytes(bytes);
    double rate = static_cast<double>(bytes) / upload_seconds(d, host);
    double ratio = rate / link_rate;
    rows.push_back({"U", "upload " + mib + " random at " + a.rate,
                    fmt("%.2f MB/s", rate / 1e6) + fmt(" (%.2fx link)", ratio), ">= 0.9x link",
                    ratio >= 0.9});
  }
  if (a.only.find('Z') != std::string::npos) {
    std::vector<uint8_t> host = compressible(bytes);
    const uint64_t before = bytes_out(s.url);
    double rate = static_cast<double>(bytes) / upload_seconds(d, host);
    const uint64_t wire = bytes_out(s.url) - before;
    double ratio = rate / link_rate;
    rows.push_back({"Z",
                    "upload " + mib + " compressible (int64 labels, one-hot, zeros) at " + a.rate,
                    fmt("%.2f MB/s", rate / 1e6) + fmt(" (%.2fx link", ratio) +
                        fmt(", %.1f MiB on the wire)", static_cast<double>(wire) / 1048576.0),
                    ">= 3x link", ratio >= 3});
  }
  if (a.only.find('D') != std::string::npos) bench_reupload(link, s, d, a);
}

// (D) re-uploads of the same 64 MiB on a new connection (a client's reconnect; the first
// session keeps its tensor, so the server holds the bytes), three ways: a host tensor moved to
// the device (t.to(remote): the client holds the bytes, so the call does not wait for the
// server's answer), a vector handed over (from_vector(std::move(v)): the same), and lent bytes
// (from_bytes of a span: the call waits one round trip, client/dedup.cc). Each timed to the
// call's return (and to the return of a sync after it: the tensor made on the server), --d-reps
// times; the wire bytes are those of the last upload and its sync.
void bench_reupload(tw::testing::ShapedLink& link, const Served& s, const tw::Device& first,
                    const Args& a) {
  const size_t n = 64u << 20;
  const tw::Shape shape{static_cast<int64_t>(n)};
  std::vector<uint8_t> host = random_bytes(n);
  double host_sum = 0;
  for (uint8_t b : host) host_sum += b;
  tw::Tensor keep = tw::from_bytes(host, shape, tw::kU8, first);
  first.sync();
  tw::Device again = tw::Device::remote(s.url);
  link.in_client([&] { again.connect(); });
  again.sync();
  const tw::Tensor on_host = tw::from_bytes(host, shape, tw::kU8);  // the CPU device's
  struct Way {
    std::string id, what;
    std::function<tw::Tensor()> upload;
    std::function<void()> prepare;  // untimed
  };
  std::vector<uint8_t> handed;
  const std::vector<Way> ways = {
      {"D", "host tensor .to(remote)", [&] { return on_host.to(again); }, [] {}},
      {"D", "from_vector(std::move(v))",
       [&] { return tw::from_vector(std::move(handed), shape, again); }, [&] { handed = host; }},
      {"D", "from_bytes(span): lent bytes, waits one round trip",
       [&] { return tw::from_bytes(host, shape, tw::kU8, again); }, [] {}},
  };
  for (const Way& w : ways) {
    std::vector<double> ms, ms_made;  // to the call's return; to the sync after it
    uint64_t wire = 0;
    for (int r = 0; r < a.d_reps; ++r) {
      w.prepare();
      const uint64_t before = bytes_out(s.url);
      auto t0 = Clock::now();
      tw::Tensor t = w.upload();
      ms.push_back(seconds_since(t0) * 1e3);
      again.sync();
      ms_made.push_back(seconds_since(t0) * 1e3);
      wire = bytes_out(s.url) - before;
      if (r + 1 == a.d_reps && t.to(tw::kF64).sum().item<double>() != host_sum)
        wire = ~uint64_t{0};  // the tensor's bytes are not the upload's
    }
    std::string runs, made;
    for (double m : ms) runs += (runs.empty() ? "" : " / ") + fmt("%.2f", m);
    for (double m : ms_made) made += (made.empty() ? "" : " / ") + fmt("%.2f", m);
    const double best = *std::min_element(ms.begin(), ms.end());
    std::vector<double> sorted = ms;
    std::sort(sorted.begin(), sorted.end());
    const double median = sorted[sorted.size() / 2];
    rows.push_back({w.id,
                    "re-upload of the same 64 MiB at " + a.rate + ", new connection: " + w.what,
                    (wire == ~uint64_t{0} ? std::string("WRONG DATA, ")
                                          : fmt("%.0f B on the wire", static_cast<double>(wire))) +
                        ", " + runs + " ms (median " + fmt("%.2f", median) +
                        "; with the sync after it, the tensor made: " + made + " ms)",
                    "<= 1 KiB and < 5 ms", wire <= 1024 && median < 5 && best < 5});
  }
}

uint64_t bytes_in(const std::string& url) {
  for (const auto& d : tw::profile::devices())
    if (d.device.find(url) != std::string::npos) return d.bytes_in;
  return 0;
}

// (Zd) reads of 256 MiB made on the server, a compressible one (int64 labels in [0, 10)) and a
// random one (uniform f32), on a connection that asks for compressed replies (the client's
// auto rule: another host over TCP; protocol 10) and on one with TW_COMPRESS=0.
void bench_downloads(tw::testing::ShapedLink& link, const Args& a, double link_rate) {
  Served s = serve(link, a);
  const size_t bytes = (a.quick ? 32u : 256u) << 20;
  const std::string mib = std::to_string(bytes >> 20) + " MiB";
  struct Kind {
    const char* what;
    double target;  // x the link rate
    std::function<tw::Tensor(const tw::Device&)> make;
  };
  const std::vector<Kind> kinds = {
      {"compressible (int64 labels)", 3.0,
       [&](const tw::Device& d) {
         return tw::arange(0, static_cast<int64_t>(bytes / 8), 1, tw::kI64, d).remainder(10);
       }},
      {"random (uniform f32)", 0.9,
       [&](const tw::Device& d) {
         return tw::rand({static_cast<int64_t>(bytes / 4)}, tw::kF32, d);
       }},
  };
  for (const Kind& k : kinds) {
    std::string measured;
    bool ok = true;
    for (bool compress : {true, false}) {
      if (!compress) ::setenv("TW_COMPRESS", "0", 1);
      tw::Device d = tw::Device::remote(s.url);
      ::unsetenv("TW_COMPRESS");
      link.in_client([&] { d.connect(); });
      tw::Tensor t = k.make(d);
      d.sync();
      const std::string url = s.url;
      const uint64_t before = bytes_in(url);
      auto t0 = Clock::now();
      std::vector<uint8_t> got = t.to_bytes();
      const double secs = seconds_since(t0);
      const double wire = static_cast<double>(bytes_in(url) - before);
      const double ratio = static_cast<double>(got.size()) / secs / link_rate;
      measured += std::string(measured.empty() ? "" : "; ") +
                  (compress ? "compressed replies " : "TW_COMPRESS=0 ") +
                  fmt("%.2f MB/s", static_cast<double>(got.size()) / secs / 1e6) +
                  fmt(" (%.2fx link, ", ratio) + fmt("%.1f MiB on the wire)", wire / 1048576.0);
      if (compress) ok = ratio >= k.target;
      t = tw::Tensor();
    }
    rows.push_back({"Zd", "read " + mib + " " + k.what + " at " + a.rate, measured,
                    fmt(">= %.1fx link (compressed replies)", k.target), ok});
  }
}

uint64_t rss_bytes(pid_t pid) {
  std::ifstream f("/proc/" + (pid ? std::to_string(pid) : std::string("self")) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  return 0;
}

void bench_flow_control(tw::testing::ShapedLink& link, const Args& a) {
  ::setenv("TW_TEST_OP_DELAY_US", "50", 1);  // ~100 us a sleep: ~10k ops/s
  Served s = serve(link, a);
  ::unsetenv("TW_TEST_OP_DELAY_US");
  tw::Device d = tw::Device::remote(s.url);
  link.in_client([&] { d.connect(); });
  const int n = a.quick ? 100000 : 1000000;
  const pid_t server_pid = s.server->pid();
  const uint64_t client0 = rss_bytes(0), server0 = rss_bytes(server_pid);
  std::atomic<bool> done{false};
  uint64_t client_max = client0, server_max = server0;
  std::thread sampler([&] {
    while (!done.load()) {
      client_max = std::max(client_max, rss_bytes(0));
      server_max = std::max(server_max, rss_bytes(server_pid));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  auto t0 = Clock::now();
  tw::Tensor x = tw::from_vector<float>({0}, {1}, d);
  for (int i = 0; i < n; ++i) x = x + 1.0f;
  const float got = x.item<float>();
  const double secs = seconds_since(t0);
  done.store(true);
  sampler.join();
  const double cg = static_cast<double>(client_max - client0) / 1048576.0;
  const double sg = static_cast<double>(server_max - server0) / 1048576.0;
  rows.push_back({"F",
                  std::to_string(n) + " 1-element adds to a server slowed to ~10k ops/s (" +
                      fmt("%.0f ops/s", n / secs) +
                      (got == static_cast<float>(n) ? "" : ", WRONG SUM") + ")",
                  fmt("client RSS +%.1f MiB, ", cg) + fmt("server +%.1f MiB", sg), "<= 64 MiB each",
                  cg <= 64 && sg <= 64 && got == static_cast<float>(n)});
}

// How row T reads the loss: the trainer's asynchronous reports every `every` steps (nothing
// waits for them until the run's end), or, `waited`, a report every step that the program waits
// for at once (Trainer::finish() after each step: what `loss.item()` every step costs).
struct TRead {
  int64_t every = 20;
  bool waited = false;
};

// One run of row T on a device: seconds per step, and per step the round trips and the time
// the program waited for replies (tw::profile's counters over the timed epochs).
struct TRun {
  double seconds = 0, round_trips = 0, waited = 0;  // per step, in the steps (run_epoch)
  double end_waited = 0;  // the final finish() and sync, in all (the device catching up)
};

// tw::profile's row for `d` (every session of that device name: one here).
tw::profile::DeviceProfile profile_of(const tw::Device& d) {
  for (const tw::profile::DeviceProfile& p : tw::profile::devices())
    if (p.device == d.str()) return p;
  return {};
}

// Digits CNN training on `d`: kWarmEpochs of warm-up, then `epochs` epochs timed up to the last
// report delivered and the device idle (Trainer::finish(), then a sync): a whole training run's
// throughput. The warm-up covers the step cache's recordings and graph registrations (round
// trips, once per batch shape: the epoch's short last batch is registered in its third epoch).
TRun digits_run(const tw::Device& d, const tw::digits::Dataset& train, TRead read, int epochs) {
  constexpr int kWarmEpochs = 3;
  tw::manual_seed(7);
  auto model = tw::digits::make_model(tw::digits::ModelKind::kCnn, {d, tw::kF32});
  tw::optim::Adam opt(model->parameters(), {.lr = 3e-3});
  const tw::digits::DeviceData data = tw::digits::upload(train, tw::digits::ModelKind::kCnn, d);
  tw::digits::Trainer trainer(*model, opt, data, 64, true);
  auto noop = [](const tw::digits::Progress&) {};
  auto after = [&](int64_t) {
    if (read.waited) (void)trainer.finish();
  };
  const int all = kWarmEpochs + epochs;
  for (int e = 1; e <= kWarmEpochs; ++e) trainer.run_epoch(e, all, 7, read.every, noop, 0, after);
  (void)trainer.finish();
  d.sync();
  const tw::profile::DeviceProfile p0 = profile_of(d);
  auto t0 = Clock::now();
  for (int e = kWarmEpochs + 1; e <= all; ++e)
    trainer.run_epoch(e, all, 7, read.every, noop, 0, after);
  const tw::profile::DeviceProfile p1 = profile_of(d);
  (void)trainer.finish();
  d.sync();
  TRun r;
  const double steps = static_cast<double>(epochs * trainer.steps_per_epoch());
  r.seconds = seconds_since(t0) / steps;
  r.round_trips = static_cast<double>(p1.round_trips - p0.round_trips) / steps;
  r.waited = (p1.wait_seconds - p0.wait_seconds) / steps;
  r.end_waited = profile_of(d).wait_seconds - p1.wait_seconds;
  return r;
}

// `reps` runs on the link's device and on loopback's, alternating (the 2-core VM's load swings a
// run's time several-fold, so both sides of a ratio are measured side by side). Seconds per
// step, sorted, for each side; the link's round trips and time waited per step of its best run.
struct TRuns {
  std::vector<double> link, loopback;
  TRun best_link;
  double best_ratio() const { return loopback.front() / link.front(); }  // steps/s ratio
  double median_ratio() const { return loopback[loopback.size() / 2] / link[link.size() / 2]; }
};
TRuns digits_step_seconds(const tw::Device& link, const tw::Device& loopback,
                          const tw::digits::Dataset& train, TRead read, int epochs, int reps) {
  TRuns r;
  r.best_link.seconds = 1e30;
  for (int i = 0; i < reps; ++i) {
    r.loopback.push_back(digits_run(loopback, train, read, epochs).seconds);
    const TRun l = digits_run(link, train, read, epochs);
    r.link.push_back(l.seconds);
    if (l.seconds < r.best_link.seconds) r.best_link = l;
  }
  std::sort(r.link.begin(), r.link.end());
  std::sort(r.loopback.begin(), r.loopback.end());
  return r;
}

// "1.02 1.10 1.30" (ms per step, sorted).
std::string ms_list(const std::vector<double>& v) {
  std::string out;
  for (double x : v) out += (out.empty() ? "" : " ") + fmt("%.2f", x * 1e3);
  return out;
}

// "; link, in its steps: 0.05 round trips and 0.00 ms waited per step, then 21.3 ms at the end"
// (the link's best run, tw::profile's counters).
std::string waits(const TRun& r) {
  return fmt("; link, in its steps: %.2f round trips", r.round_trips) +
         fmt(" and %.2f ms waited per step", r.waited * 1e3) +
         fmt(", then %.1f ms at the end", r.end_waited * 1e3);
}

void bench_digits(const Args& a) {
  const auto all = tw::digits::load(tw::digits::default_path());
  const auto train = tw::digits::split(all, 297, 7).first;
  const int epochs = a.quick ? 2 : a.t_epochs;
  tw::testing::ServerProcess loopback_server({}, a.server);
  tw::Device loopback = tw::Device::remote(loopback_server.url());
  for (uint32_t rtt_us : a.t_rtts_us) {
    std::string why;
    auto link = tw::testing::ShapedLink::open({rtt_us, "1gbit"}, &why);
    Served s = serve(*link, a);
    tw::Device d = tw::Device::remote(s.url);
    link->in_client([&] { d.connect(); });
    // The link's round trip (raw TCP, ping-like): the RTT the per-step targets are against.
    const double link_rtt = raw_round_trip_s(*link, 51);
    rows.push_back({"R",
                    "raw TCP round trip through the link (the RTT below), " +
                        fmt("%.0f ms nominal", rtt_us / 1e3),
                    fmt("%.2f ms (median of 51 one-byte exchanges)", link_rtt * 1e3),
                    "~ the nominal RTT", true});
    // The round trip a read costs through the link (median of 21 syncs), for reference.
    std::vector<double> rt;
    for (int i = 0; i < 21; ++i) {
      auto t0 = Clock::now();
      d.sync();
      rt.push_back(seconds_since(t0));
    }
    std::sort(rt.begin(), rt.end());
    rows.push_back({"R", "sync round trip through the link, " + fmt("%.0f ms RTT", rtt_us / 1e3),
                    fmt("%.2f ms (median of 21)", rt[10] * 1e3), "~ the RTT", true});
    // A read after a few ops: one round trip too.
    {
      tw::Tensor x = tw::from_vector<float>({0}, {1}, d);
      std::vector<double> it;
      for (int i = 0; i < 21; ++i) {
        auto t0 = Clock::now();
        x = x * 0.5f + 1.0f;
        (void)x.item<float>();
        it.push_back(seconds_since(t0));
      }
      std::sort(it.begin(), it.end());
      rows.push_back({"R", "2 ops then a read, " + fmt("%.0f ms RTT", rtt_us / 1e3),
                      fmt("%.2f ms (median of 21)", it[10] * 1e3), "~ the RTT", true});
    }
    const TRuns r20 = digits_step_seconds(d, loopback, train, {20, false}, epochs, a.t_reps);
    const TRuns r1 = digits_step_seconds(d, loopback, train, {1, false}, epochs, a.t_reps);
    const int waited_epochs = a.quick ? 2 : a.t_waited_epochs;
    const TRuns w1 = digits_step_seconds(d, loopback, train, {1, true}, waited_epochs, a.t_reps);
    // The per-step targets' RTT: the link's, as measured (never below the nominal one).
    const double rtt = std::max(rtt_us / 1e6, link_rtt);
    auto at_epochs = [&](int n) {
      return fmt("%.0f ms RTT, 1 Gbit/s", rtt_us / 1e3) + ", " + std::to_string(n) + " epochs of " +
             std::to_string((train.n + 63) / 64) + " steps";
    };
    const std::string at = at_epochs(epochs);
    const std::string runs = ", runs of " + std::to_string(a.t_reps);
    rows.push_back({"T", "digits CNN, loss read every 20 steps, " + at,
                    fmt("%.1f steps/s", 1 / r20.link.front()) +
                        fmt(" vs loopback %.1f", 1 / r20.loopback.front()) +
                        fmt(" (best %.2fx", r20.best_ratio()) +
                        fmt(", median %.2fx", r20.median_ratio()) + runs + "; ms/step link " +
                        ms_list(r20.link) + ", loopback " + ms_list(r20.loopback) +
                        waits(r20.best_link) + ")",
                    ">= 0.9x loopback", r20.best_ratio() >= 0.9});
    rows.push_back(
        {"T", "digits CNN, loss read every step (asynchronous reports), " + at,
         fmt("%.2f ms/step", r1.link.front() * 1e3) +
             fmt(" vs loopback %.2f", r1.loopback.front() * 1e3) +
             fmt(" + RTT %.2f = ", rtt * 1e3) + fmt("%.2f ms", (r1.loopback.front() + rtt) * 1e3) +
             fmt(" (%.2fx loopback's steps/s", r1.best_ratio()) + "; link " + ms_list(r1.link) +
             ", loopback " + ms_list(r1.loopback) + waits(r1.best_link) + ")",
         "<= loopback + 1.1 RTT", r1.link.front() <= r1.loopback.front() + 1.1 * rtt});
    rows.push_back(
        {"T", "digits CNN, loss read and waited for every step, " + at_epochs(waited_epochs),
         fmt("%.2f ms/step", w1.link.front() * 1e3) +
             fmt(" vs loopback %.2f", w1.loopback.front() * 1e3) +
             fmt(" + RTT %.2f = ", rtt * 1e3) + fmt("%.2f ms", (w1.loopback.front() + rtt) * 1e3) +
             fmt(", target %.2f", (w1.loopback.front() + 1.1 * rtt) * 1e3) + " (link " +
             ms_list(w1.link) + ", loopback " + ms_list(w1.loopback) + waits(w1.best_link) + ")",
         "<= loopback + 1.1 RTT", w1.link.front() <= w1.loopback.front() + 1.1 * rtt});
  }
}

void bench_dead_link(const Args& a) {
  const double deadline_s = 2.0;
  ::setenv("TW_DEAD_PEER_MS", "2000", 1);  // read as each socket is made
  std::string why;
  auto link = tw::testing::ShapedLink::open({a.rtt_us, a.rate}, &why);
  Served s = serve(*link, a);
  tw::Device d = tw::Device::remote(s.url);
  link->in_client([&] { d.connect(); });
  ::unsetenv("TW_DEAD_PEER_MS");
  tw::Tensor x = tw::from_vector<float>({1, 2, 3}, {3}, d);
  d.sync();
  link->blackhole(true);
  auto t0 = Clock::now();
  std::string error;
  try {
    (void)(x + 1.0f).to_vector<float>();
  } catch (const tw::Error& e) {
    error = e.what();
  }
  const double secs = seconds_since(t0);
  rows.push_back({"K", "black-holed link, TW_DEAD_PEER_MS=2000: a waiting read fails after",
                  fmt("%.2f s", secs) + (error.empty() ? " (no error!)" : ""),
                  fmt("<= %.1f s (deadline + 1 s)", deadline_s + 1),
                  !error.empty() && secs <= deadline_s + 1});
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (s == "--quick")
      a.quick = true;
    else if (s == "--only") {
      a.only = next();
      const size_t zd = a.only.find("Zd");
      a.reads = zd != std::string::npos;
      if (a.reads) a.only.erase(zd, 2);
    } else if (s == "--rtt-us")
      a.rtt_us = static_cast<uint32_t>(std::stoul(next()));
    else if (s == "--rate")
      a.rate = next();
    else if (s == "--t-reps")
      a.t_reps = std::max(1, std::stoi(next()));
    else if (s == "--t-epochs")
      a.t_epochs = std::max(1, std::stoi(next()));
    else if (s == "--t-waited-epochs")
      a.t_waited_epochs = std::max(1, std::stoi(next()));
    else if (s == "--d-reps")
      a.d_reps = std::max(1, std::stoi(next()));
    else if (s == "--server")
      a.server = next();
    else if (s == "--t-rtt-us") {
      a.t_rtts_us.clear();
      std::string list = next();
      for (size_t at = 0; at < list.size();) {
        size_t comma = list.find(',', at);
        if (comma == std::string::npos) comma = list.size();
        a.t_rtts_us.push_back(static_cast<uint32_t>(std::stoul(list.substr(at, comma - at))));
        at = comma + 1;
      }
    } else {
      std::fprintf(
          stderr,
          "usage: tw_bench_net [--quick] [--only LUZDFTK] [--rtt-us N] [--rate R] "
          "[--server PATH] [--t-rtt-us LIST] [--t-reps N] [--t-epochs N] [--t-waited-epochs N] "
          "[--d-reps N]\n");
      return 2;
    }
  }
  std::string why;
  auto link = tw::testing::ShapedLink::open({a.rtt_us, a.rate}, &why);
  if (!link) {
    std::printf("%s\n", why.c_str());
    return 1;
  }
  std::printf("shaped link: rtt %u us (relay), rate %s (tbf), client %s, server %s\n", a.rtt_us,
              a.rate.c_str(), tw::testing::ShapedLink::kClientAddr,
              tw::testing::ShapedLink::kServerAddr);
  const double nominal = rate_bytes(a.rate);
  double link_rate = nominal;
  {
    link_rate = raw_stream_bytes_per_s(*link, a.quick ? (8u << 20) : (64u << 20));
    rows.push_back({"L", "raw TCP through the link (the link rate below)",
                    fmt("%.2f MB/s", link_rate / 1e6), fmt("nominal %.2f MB/s", nominal / 1e6),
                    link_rate <= nominal * 1.05});
  }
  bench_uploads(*link, a, link_rate);
  if (a.reads) bench_downloads(*link, a, link_rate);
  if (a.only.find('F') != std::string::npos) bench_flow_control(*link, a);
  if (a.only.find('T') != std::string::npos) bench_digits(a);
  if (a.only.find('K') != std::string::npos) bench_dead_link(a);
  std::printf("\n| row | what | measured | target | met |\n|---|---|---|---|---|\n");
  for (const Row& r : rows)
    std::printf("| %s | %s | %s | %s | %s |\n", r.id.c_str(), r.what.c_str(), r.measured.c_str(),
                r.target.c_str(), r.ok ? "YES" : "NO");
  return 0;
}
