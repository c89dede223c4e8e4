// `make chaos`: losing nothing when links drop and servers die (issue 35's measured targets),
// printed as one table. Every server is a tensorwire-server child process on a loopback port.
//   cuts      one digits training run through a fault-injecting relay (tests/support/
//             fault_relay.h: seeded random cuts, FIN or RST, stalls, split writes) that cuts the
//             connection --cuts times; each cut is recovered by resuming the session (protocol
//             9's resumable sessions, client/resume.cc): the same session goes on, only the
//             frames the server had not received are sent again. The final parameters must equal
//             an uncut run's bit for bit, and the server must have executed exactly as many ops
//             as for an uncut run (its counter) in one session. Resume time: the client's, from
//             the failure seen to the frames re-sent (reconnect and handshake included).
//   kill -9   --kills servers killed (SIGKILL) at random steps of one run with failover over a
//             pool of servers; bit-identical, and steps redone per kill <= the checkpoint interval.
//   ckpt      tw::Checkpoint::save of --ckpt-mib MiB of parameters held by a remote device
//             (fsync included) against downloading them (best and median): the judged row over
//             a shaped 1 Gbit/s link with a 2 ms RTT (tests/support/shaped_link.h; needs root,
//             else skipped with the reason) into $TMPDIR (a disk), 3 runs; then over loopback
//             into $TMPDIR and into /dev/shm (tmpfs), 5 runs each, not judged; each with
//             save_async: the caller's stall and the time until the checkpoint is durable.
//             --ckpt-only (= --only ckpt) runs these alone.
//   moves     --moves server-to-server moves (t.to(d2): the destination pulls the bytes from the
//             source by capability) with relays in front of both servers cutting the client's
//             links and the destination's pulls --move-cuts times in all, over tcp://, tls://
//             and unix://; every moved tensor must equal its source bit for bit and the
//             destination must have landed exactly --moves tensors (its
//             tensorwire_transfers_total{direction="in"}): none lost, none twice. A cut pull
//             resumes from the byte it reached (the bytes-resent row, not judged).
//   cost      what resumability costs on the hot path, TW_RESUME=1 against TW_RESUME=0 (keeping
//             every frame until a reply shows it ran, the Acks) in alternating rounds on one
//             server: chained 1-element adds (ops/s) and a digits training run (seconds); the
//             median of the per-round ratios. Not judged in --short.
//   crash     a checkpoint writer (this program, re-run with --writer DIR) killed with SIGKILL
//             --crashes times at random moments; every newest valid checkpoint must load and hold
//             exactly what its step wrote.
// --short runs a small version of each (the ctest tw_chaos_short: correctness only; timing rows
// are printed but not judged, timing targets live in bench/ only). Exit status 0 when every
// judged row holds.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "digits/digits.h"
#include "support/fault_relay.h"
#include "support/metric.h"
#include "support/server_process.h"
#include "support/shaped_link.h"
#include "tensorwire/profile.h"
#include "tensorwire/remote.h"
#include "tensorwire/tensorwire.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using tw::testing::ServerProcess;

double since_ms(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

struct Args {
  bool short_form = false;
  int cuts = 200;
  int kills = 5;
  int64_t ckpt_mib = 256;
  int crashes = 40;
  uint64_t seed = 35;
  int epochs = 10;
  int64_t every_kill = 5;  // checkpoint interval for the kill -9 row
  int moves = 200, move_cuts = 100;
  int rounds = 7;    // of the cost row, each mode once per round
  std::string only;  // run only this row (cuts, kills, ckpt, moves, cost, crash); empty: all
};

struct Row {
  std::string what, target, measured;
  bool judged = true, holds = true;
};
std::vector<Row> rows;

std::vector<std::vector<uint8_t>> param_bytes(const tw::nn::Module& m) {
  std::vector<std::vector<uint8_t>> out;
  for (const auto& [name, p] : m.named_parameters()) out.push_back(p->value().to_bytes());
  return out;
}

int port_of(const std::string& url) { return std::stoi(url.substr(url.rfind(':') + 1)); }

std::string fresh_dir(const std::string& name) {
  const fs::path p =
      fs::temp_directory_path() / ("tw_chaos_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p.string();
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  return v[i];
}

std::string fmt(const char* f, double a, double b = 0, double c = 0) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), f, a, b, c);
  return buf;
}

const tw::digits::Dataset& train_set() {
  static const tw::digits::Dataset d =
      tw::digits::split(tw::digits::load(tw::digits::default_path()), 360, 7).first;
  return d;
}

tw::digits::ResumableOptions base(const Args& a) {
  tw::digits::ResumableOptions o;
  o.kind = tw::digits::ModelKind::kMlp;
  o.epochs = a.epochs;
  o.seed = a.seed;
  return o;
}

// The server's address to train through: its tls:// one (its generated certificate pinned by
// fingerprint, TW_TLS_FINGERPRINT) or its first.
std::string target_of(const ServerProcess& server, bool tls) {
  if (!tls) return server.url();
  std::string target = server.url();
  for (const std::string& u : server.urls())
    if (u.rfind("tls://", 0) == 0) target = u;
  const std::string prefix = "tls certificate sha256 ";
  for (const std::string& l : server.lines())
    if (l.rfind(prefix, 0) == 0)
      ::setenv("TW_TLS_FINGERPRINT", l.substr(prefix.size(), 95).c_str(), 1);
  return target;
}

// The server's count of ops executed for one uncut run of the training on a fresh server (the
// "ops lost or doubled" row compares a cut run's count with it).
uint64_t uncut_ops(const Args& a, const std::vector<std::string>& server_args, bool tls) {
  ServerProcess server(server_args);
  const tw::Device d = tw::Device::remote(target_of(server, tls));
  (void)tw::digits::train_resumable(train_set(), d, base(a));
  return tw::remote_stats(d).ops_executed;
}

// One training run (one Device, one session) through the relay, which cuts the connection
// --cuts times; each cut is recovered by resuming the session (TW_RESUME, client/resume.cc):
// the client reconnects, presents its token, re-sends the frames the server had not received,
// and the server re-sends the replies the client had not received. tls: the client speaks TLS
// through the relay to the server's tls:// address; the relay cuts the encrypted stream.
void row_cuts(const Args& a, const std::vector<std::vector<uint8_t>>& whole, bool tls) {
  const std::vector<std::string> args =
      tls ? std::vector<std::string>{"--listen", "tls://127.0.0.1:0"} : std::vector<std::string>{};
  const uint64_t want_ops = uncut_ops(a, args, tls);
  ServerProcess server(args);
  const std::string target = target_of(server, tls);
  const int cuts = tls ? std::max(1, a.cuts / 4) : a.cuts;
  const std::string name = tls ? "cuts (tls://)" : "cuts";
  tw::testing::FaultOptions fo;
  fo.seed = a.seed;
  fo.max_cuts = cuts;
  // Small enough that the cuts all come within the run (it moves a few MB in all).
  fo.cut_min_bytes = 4 << 10;
  fo.cut_max_bytes = (tls ? 96 : 40) << 10;
  if (a.short_form) fo.cut_max_bytes = 96 << 10;
  if (const char* piece = std::getenv("TW_CHAOS_PIECE")) fo.max_piece = std::stoul(piece);
  if (const char* r = std::getenv("TW_CHAOS_RESET")) fo.reset_fraction = std::stod(r);
  tw::testing::FaultRelay relay(port_of(target), fo);
  auto resumes_so_far = [] {
    std::vector<double> v;
    for (const tw::profile::DeviceProfile& p : tw::profile::devices())
      v.insert(v.end(), p.resume_seconds.begin(), p.resume_seconds.end());
    return v;
  };
  const size_t resumes_before = resumes_so_far().size();
  const auto t0 = Clock::now();
  const tw::Device d = tw::Device::remote(relay.url(tls ? "tls" : "tcp"));
  tw::digits::ResumableRun run = tw::digits::train_resumable(train_set(), d, base(a));
  const bool same = param_bytes(*run.model) == whole;
  const tw::RemoteStats st = tw::remote_stats(d);
  const double total_s = since_ms(t0) / 1000;
  std::vector<double> resume_ms = resumes_so_far();
  resume_ms.erase(resume_ms.begin(),
                  resume_ms.begin() + static_cast<std::ptrdiff_t>(resumes_before));
  for (double& v : resume_ms) v *= 1000;
  rows.push_back({name + ": final parameters",
                  "bit-identical to the uncut run, " + std::to_string(cuts) + " cuts",
                  (same ? "identical" : "DIFFER") + std::string(", ") +
                      std::to_string(relay.cuts()) + " cuts, " + std::to_string(resume_ms.size()) +
                      " resumes, " + std::to_string(relay.connections()) + " connections, " +
                      fmt("%.1f s", total_s),
                  true, same && relay.cuts() == cuts});
  const int64_t diff = static_cast<int64_t>(st.ops_executed) - static_cast<int64_t>(want_ops);
  rows.push_back({name + ": ops lost or doubled", "0 (server counters; resumable sessions)",
                  std::to_string(diff < 0 ? -diff : diff) + " (" + std::to_string(st.ops_executed) +
                      " ops executed, uncut " + std::to_string(want_ops) + "; " +
                      std::to_string(st.sessions_opened) + " session opened)",
                  true, diff == 0 && st.sessions_opened == 1});
  if (tls) ::unsetenv("TW_TLS_FINGERPRINT");
  const double p99 = percentile(resume_ms, 0.99);
  const auto slow =
      std::count_if(resume_ms.begin(), resume_ms.end(), [](double v) { return v > 50; });
  if (std::getenv("TW_CHAOS_VERBOSE")) {
    std::vector<double> s = resume_ms;
    std::sort(s.begin(), s.end());
    for (double v : s) std::fprintf(stderr, "%.1f ", v);
    std::fprintf(stderr, "\n");
  }
  rows.push_back({name + ": resume time p99", "<= 50 ms on loopback",
                  fmt("p50 %.1f ms, p99 %.1f ms, max %.1f ms", percentile(resume_ms, 0.5), p99,
                      percentile(resume_ms, 1.0)) +
                      " (" + std::to_string(resume_ms.size()) + " resumes, " +
                      std::to_string(slow) + " over 50 ms)",
                  !a.short_form, p99 <= 50});
}

void row_kills(const Args& a, const std::vector<std::vector<uint8_t>>& whole) {
  std::vector<std::unique_ptr<ServerProcess>> pool;
  std::vector<std::string> urls;
  for (int i = 0; i <= a.kills; ++i) {
    pool.push_back(std::make_unique<ServerProcess>());
    urls.push_back(pool.back()->url());
  }
  tw::digits::ResumableOptions o = base(a);
  o.checkpoint_dir = fresh_dir("kills");
  o.checkpoint_every = a.every_kill;
  const int64_t total = 23 * o.epochs;  // digits: 1437 samples, batch 64
  std::mt19937_64 rng(a.seed);
  std::vector<int64_t> at;  // distinct random steps, ascending
  while (static_cast<int>(at.size()) < a.kills) {
    const int64_t s = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(total - 1));
    if (std::find(at.begin(), at.end(), s) == at.end()) at.push_back(s);
  }
  std::sort(at.begin(), at.end());
  size_t next = 0, current = 0;
  int64_t last_step = 0, worst_redo = 0;
  bool dead = false;  // the current server was killed; the client has not noticed yet
  o.after_step = [&](int64_t step) {
    last_step = step;
    if (!dead && next < at.size() && step >= at[next]) {
      pool[current]->kill_hard();
      dead = true;
      ++next;
    }
  };
  tw::FailoverOptions f;
  f.max_failovers = a.kills + 1;
  f.on_failover = [&](const std::string&, const std::string&, const std::string&) {
    const auto latest = tw::Checkpoint(o.checkpoint_dir).latest();
    worst_redo = std::max(worst_redo, last_step - (latest ? latest->step : 0));
    dead = false;
    ++current;
  };
  tw::digits::ResumableRun run;
  tw::run_with_failover(
      urls, [&](const tw::Device& d) { run = tw::digits::train_resumable(train_set(), d, o); }, f);
  const bool same = param_bytes(*run.model) == whole;
  std::string steps;
  for (int64_t s : at) steps += (steps.empty() ? "" : ",") + std::to_string(s);
  rows.push_back({"kill -9: final parameters",
                  "bit-identical, " + std::to_string(a.kills) + " kills with failover",
                  std::string(same ? "identical" : "DIFFER") + ", killed at steps " + steps + ", " +
                      std::to_string(current) + " failovers",
                  true, same && current == at.size()});
  rows.push_back({"kill -9: work redone per kill",
                  "<= checkpoint interval (" + std::to_string(o.checkpoint_every) + " steps)",
                  "at most " + std::to_string(worst_redo) + " steps", true,
                  worst_redo <= o.checkpoint_every});
  fs::remove_all(o.checkpoint_dir);
}

// The time to write `bytes` from memory to a file in `dir` and fsync it: what the disk alone
// costs a checkpoint of that size.
double disk_ms(const std::string& dir, const std::vector<uint8_t>& bytes) {
  const std::string path = dir + "/disk_reference";
  const auto t = Clock::now();
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) throw tw::Error("cannot write " + path);
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fflush(f);
  ::fsync(fileno(f));
  std::fclose(f);
  const double ms = since_ms(t);
  fs::remove(path);
  return ms;
}

// Times in ms: best and median of `v`.
std::string best_median(const std::vector<double>& v, const char* f = "best %.0f, median %.0f") {
  return fmt(f, *std::min_element(v.begin(), v.end()), percentile(v, 0.5));
}

// tw::Checkpoint::save of ckpt_mib MiB held by a remote device against downloading them, `runs`
// runs each (best and median); then save_async: the caller's stall and the time until the
// checkpoint is durable (wait() returned). The server is a loopback one, or with `link` one in
// the link's server namespace, reached through its shaped path from the client's.
void row_checkpoint(const Args& a, const std::string& root, const std::string& where, bool judged,
                    tw::testing::ShapedLink* link = nullptr, int runs = 5) {
  std::unique_ptr<ServerProcess> served =
      link ? link->in_server([] { return std::make_unique<ServerProcess>(); })
           : std::make_unique<ServerProcess>();
  const tw::Device d =
      tw::Device::remote(link ? link->relay_to(port_of(served->url())) : served->url());
  if (link) link->in_client([&] { d.connect(); });  // (its sockets stay in the client namespace)
  const int64_t floats = a.ckpt_mib << 18;          // MiB * 2^20 / 4
  tw::nn::Linear lin(4096, floats / 4096, false, {d, tw::kF32});
  d.sync();
  const std::string dir = root + "/tw_chaos_ckpt_" + std::to_string(::getpid());
  fs::remove_all(dir);
  tw::Checkpoint ckpt(dir, 1);
  std::vector<double> down, save, disk, stall, durable;
  const tw::Tensor w = lin.weight()->value();
  int64_t step = 0;
  for (int i = 0; i < runs; ++i) {
    // The download: the faster of one read of the whole tensor and 8 MiB slices all in flight
    // (as the checkpoint reads it), the values left where they landed (no copy).
    auto t = Clock::now();
    (void)w.host_values();
    double dl = since_ms(t);
    t = Clock::now();
    {
      const tw::Tensor flat = w.reshape({w.numel()});
      std::vector<std::function<tw::detail::HostValues()>> reads;
      for (int64_t b = 0; b < w.numel(); b += 2 << 20)
        reads.push_back(flat.slice(0, b, std::min(w.numel(), b + (2 << 20))).host_values_async());
      for (auto& r : reads) (void)r();
    }
    down.push_back(std::min(dl, since_ms(t)));
    const std::vector<uint8_t> b = w.to_bytes();
    t = Clock::now();
    ckpt.save(++step, lin);
    save.push_back(since_ms(t));
    disk.push_back(disk_ms(dir, b));
  }
  for (int i = 0; i < runs; ++i) {
    const auto t = Clock::now();
    ckpt.save_async(++step, lin);
    stall.push_back(since_ms(t));
    (void)ckpt.wait();
    durable.push_back(since_ms(t));
  }
  const double best_down = *std::min_element(down.begin(), down.end());
  const double best_save = *std::min_element(save.begin(), save.end());
  const double ratio = best_save / best_down;
  const std::string what =
      "checkpoint " + std::to_string(a.ckpt_mib) + " MiB from a remote device (" + where + ")";
  rows.push_back({what, "<= 1.5x downloading them",
                  fmt("%.2fx (best/best; median/median %.2fx): save ", ratio,
                      percentile(save, 0.5) / percentile(down, 0.5)) +
                      best_median(save) +
                      fmt(" ms (fsync'd; the first, into a new file, %.0f)", save[0]) +
                      ", download " + best_median(down) + " ms; the disk alone (write + fsync) " +
                      best_median(disk) + " ms; " + std::to_string(runs) + " runs",
                  judged && !a.short_form, ratio <= 1.5});
  rows.push_back(
      {what + ", save_async", "the caller's stall; time to durable", "(not judged)", false, true});
  rows.back().measured = "stall " + best_median(stall, "best %.2f, median %.2f") +
                         " ms; durable (wait() returned) " + best_median(durable) +
                         " ms (no training beside it); " + std::to_string(runs) + " runs";
  fs::remove_all(dir);
}

constexpr int64_t kCrashFloats = 1 << 20;  // 4 MiB per checkpoint

// Tensors the server received from other servers (tensorwire_transfers_total{direction="in"} at
// its --metrics endpoint), or -1.
double transfers_in(const ServerProcess& s) {
  return tw::testing::metric_value(s, "tensorwire_transfers_total{direction=\"in\"}");
}

// The fingerprint a server printed for its generated certificate ("tls certificate sha256 ...").
std::string fingerprint_of(const ServerProcess& s) {
  const std::string prefix = "tls certificate sha256 ";
  for (const std::string& l : s.lines())
    if (l.rfind(prefix, 0) == 0) return l.substr(prefix.size(), 95);  // AB:CD:... 32 bytes
  return {};
}

// Moves between two servers over `scheme` (tcp, tls or unix) while relays in front of both cut
// the client's links (resumed sessions) and the destination's pulls (retried, protocol 10's
// FetchBound; resumed from the byte reached, protocol 11's FetchFrom). tls: both servers serve
// tls:// only, the client pins each one's certificate, the destination pins the source's as the
// client does, and the relays cut the encrypted streams; unix: both serve unix:// only.
void moves_over(Args a, const std::string& scheme) {
  const bool tls = scheme == "tls", unix_socket = scheme == "unix";
  const std::string base = fresh_dir("moves");  // (the unix sockets' paths start with it)
  auto server = [&](const std::string& name) {
    std::vector<std::string> v{"--metrics", "tcp://127.0.0.1:0"};
    if (tls) v.insert(v.end(), {"--listen", "tls://127.0.0.1:0"});
    if (unix_socket) v.insert(v.end(), {"--listen", "unix://" + base + name + ".sock"});
    return std::make_unique<ServerProcess>(v);
  };
  const std::unique_ptr<ServerProcess> sa = server("a"), sb = server("b");
  tw::testing::FaultOptions fo;
  fo.max_cuts = a.move_cuts / 2;
  // A 256 KiB pull is cut about one time in eight: kPullAttempts cuts in a row, which would fail
  // the move, are out of reach.
  fo.cut_min_bytes = 16 << 10;
  fo.cut_max_bytes = 2 << 20;
  auto relay = [&](const ServerProcess& s, const std::string& name, uint64_t seed) {
    fo.seed = seed;
    if (unix_socket)
      return std::make_unique<tw::testing::FaultRelay>(base + name + ".sock",
                                                       base + name + "_relay.sock", fo);
    return std::make_unique<tw::testing::FaultRelay>(port_of(s.urls().back()), fo);
  };
  const auto ra = relay(*sa, "a", a.seed + 1), rb = relay(*sb, "b", a.seed + 2);
  auto device = [&](const tw::testing::FaultRelay& r, const ServerProcess& s) {
    tw::RemoteOptions pin;
    if (tls) pin.tls_fingerprint = fingerprint_of(s);
    return tw::remote_device(r.url(tls ? "tls" : "tcp"), 0, pin);
  };
  const auto t0 = Clock::now();
  const tw::Device da = device(*ra, *sa), db = device(*rb, *sb);
  tw::manual_seed(a.seed);
  std::vector<tw::Tensor> want, got;
  for (int i = 0; i < a.moves; ++i) {
    const tw::Tensor x = tw::randn({256, 256}, tw::kF32, da) * static_cast<double>(i + 1);
    const tw::Tensor y = x.to(db) * 2.0 + 1.0;  // 256 KiB moved, then used on the destination
    want.push_back(x * 2.0 + 1.0);
    got.push_back(y);
    if (i % 8 == 7) (void)y.to_bytes();  // the client's links carry data while moves run
  }
  int differ = 0;
  for (int i = 0; i < a.moves; ++i) differ += want[i].to_bytes() != got[i].to_bytes();
  const double secs = since_ms(t0) / 1000;
  const int64_t landed = static_cast<int64_t>(transfers_in(*sb));
  const int64_t off = landed > a.moves ? landed - a.moves : a.moves - landed;
  const uint64_t sessions =
      tw::remote_stats(da).sessions_opened + tw::remote_stats(db).sessions_opened;
  // What the retried pulls cost: the bytes the source sent beyond the tensors moved.
  constexpr double kMiB = 1 << 20;
  const double moved = static_cast<double>(a.moves) * (256 << 10) / kMiB;
  const double served =
      tw::testing::metric_value(*sa, "tensorwire_transfer_bytes_total{direction=\"out\"}") / kMiB;
  const double retries = tw::testing::metric_value(*sb, "tensorwire_pull_retries_total");
  const double kept = tw::testing::metric_value(*sb, "tensorwire_pull_bytes_kept_total") / kMiB;
  const std::string over = scheme == "tcp" ? "" : " (" + scheme + "://)";
  rows.push_back(
      {"moves under cuts" + over + ": data", "identical, " + std::to_string(a.move_cuts) + " cuts",
       (differ ? std::to_string(differ) + " DIFFER" : std::string("identical")) + ", " +
           std::to_string(a.moves) + " moves, " + std::to_string(ra->cuts() + rb->cuts()) +
           " cuts: " + std::to_string(ra->cuts()) + " on the source's links (" +
           std::to_string(ra->connections()) + " connections: the client's, " +
           std::to_string(a.moves) + " pulls, their retries and resumes), " +
           std::to_string(rb->cuts()) + " on the client's link to the destination, " +
           fmt("%.1f s", secs),
       true, differ == 0 && ra->cuts() + rb->cuts() == a.move_cuts});
  rows.push_back({"moves under cuts" + over + ": lost or doubled",
                  "0 (destination's transfer counter)",
                  std::to_string(off) + " (" + std::to_string(landed) + " landed of " +
                      std::to_string(a.moves) + "; " + std::to_string(sessions) +
                      " sessions opened on 2 servers)",
                  true, off == 0 && sessions == 2});
  rows.push_back(
      {"moves under cuts" + over + ": bytes resent", "the rest only (protocol 11)",
       fmt("source sent %.1f MiB for %.1f MiB moved (+%.1f MiB", served, moved, served - moved) +
           fmt("; each retry from byte 0: +%.1f MiB) over %.0f pull retries, ", retries * 0.25,
               retries) +
           fmt("which kept %.1f MiB received before the cut", kept),
       false});
  std::error_code ec;
  for (const char* name : {"a.sock", "b.sock"}) fs::remove(base + name, ec);
}

// The moves row over each transport (--short: tls:// and unix:// with half the moves and cuts).
void row_moves(const Args& a) {
  moves_over(a, "tcp");
  Args half = a;
  if (a.short_form) {
    half.moves /= 2;
    half.move_cuts /= 2;
  }
  moves_over(half, "tls");
  moves_over(half, "unix");
}

// `n` chained adds of 1-element tensors, one read at the end.
void chained_adds(const tw::Device& d, int n) {
  tw::Tensor x = tw::full({1}, 0.0, tw::kF32, d);
  const tw::Tensor one = tw::full({1}, 1.0, tw::kF32, d);
  for (int i = 0; i < n; ++i) x = x + one;
  if (x.to_vector<float>()[0] != static_cast<float>(n)) throw tw::Error("adds: wrong sum");
}

// CPU seconds this process has used (all its threads, ended ones too).
double cpu_self() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// CPU seconds process `pid`'s live threads have used (the scheduler's nanoseconds: a server's
// threads live as long as it does).
double cpu_of(pid_t pid) {
  double ns = 0;
  const fs::path tasks = "/proc/" + std::to_string(pid) + "/task";
  std::error_code ec;
  for (const auto& t : fs::directory_iterator(tasks, ec)) {
    if (std::FILE* f = std::fopen((t.path() / "schedstat").c_str(), "r")) {
      unsigned long long run = 0;
      if (std::fscanf(f, "%llu", &run) == 1) ns += static_cast<double>(run);
      std::fclose(f);
    }
  }
  return ns / 1e9;
}

// What resumability costs on the hot path: TW_RESUME=1 against TW_RESUME=0 on one server, each
// workload on a fresh device (a fresh session) per mode per round, alternating which mode goes
// first. Wall time is what a program sees, and on a shared machine it is noisy; CPU time (this
// process and the server's) is what the window, the copies and the Acks cost, and is steadier.
void row_cost(const Args& a) {
  ServerProcess server;
  const int n = a.short_form ? 20000 : 200000;
  tw::digits::ResumableOptions o = base(a);
  o.epochs = a.short_form ? 2 : 30;  // about a quarter of a second a run here
  struct Workload {
    std::string name;
    std::function<void(const tw::Device&)> run;
    std::vector<double> wall[2] = {}, cpu[2] = {}, wall_ratio = {}, cpu_ratio = {};
  };
  std::vector<Workload> work = {
      {"small ops (" + std::to_string(n) + " chained 1-element adds, one read)",
       [&](const tw::Device& d) { chained_adds(d, n); }},
      {"digits training (MLP, " + std::to_string(o.epochs) + " epochs)",
       [&](const tw::Device& d) { (void)tw::digits::train_resumable(train_set(), d, o); }}};
  for (int r = 0; r < a.rounds; ++r) {
    for (Workload& w : work) {
      double wall[2], cpu[2];
      for (int k = 0; k < 2; ++k) {
        const int on = (r + k) % 2;
        ::setenv("TW_RESUME", on ? "1" : "0", 1);
        const tw::Device d = tw::Device::remote(server.url());
        d.connect();
        ::unsetenv("TW_RESUME");
        const double c0 = cpu_self() + cpu_of(server.pid());
        const auto t0 = Clock::now();
        w.run(d);
        wall[on] = since_ms(t0) / 1000;
        cpu[on] = cpu_self() + cpu_of(server.pid()) - c0;
      }
      for (int on = 0; on < 2; ++on) {
        w.wall[on].push_back(wall[on]);
        w.cpu[on].push_back(cpu[on]);
      }
      w.wall_ratio.push_back(wall[1] / wall[0]);
      w.cpu_ratio.push_back(cpu[1] / cpu[0]);
    }
  }
  for (const Workload& w : work) {
    const double wall = percentile(w.wall_ratio, 0.5), cpu = percentile(w.cpu_ratio, 0.5);
    rows.push_back(
        {"resumability cost: " + w.name, "<= 1.03x the time of TW_RESUME=0",
         fmt("wall %.3fx (%.3f s on, %.3f s off; ", wall, percentile(w.wall[1], 0.5),
             percentile(w.wall[0], 0.5)) +
             fmt("ratios %.2f..%.2f), ", percentile(w.wall_ratio, 0), percentile(w.wall_ratio, 1)) +
             fmt("CPU client+server %.3fx (%.3f s on, %.3f s off); median of ", cpu,
                 percentile(w.cpu[1], 0.5), percentile(w.cpu[0], 0.5)) +
             std::to_string(a.rounds) + " alternating rounds",
         !a.short_form, std::min(wall, cpu) <= 1.03});
  }
}

// The crash row's writer (this program with --writer DIR): checkpoints 1, 2, ... until killed.
int writer(const std::string& dir) {
  tw::nn::Linear lin(1024, kCrashFloats / 1024, false);
  tw::Checkpoint ckpt(dir, 2);
  int64_t step = ckpt.latest() ? ckpt.latest()->step : 0;
  std::printf("writing\n");
  std::fflush(stdout);
  for (;;) {
    ++step;
    {
      tw::NoGradGuard g;
      lin.weight()->set(tw::full({kCrashFloats / 1024, 1024}, static_cast<double>(step)));
    }
    ckpt.save(step, lin);
  }
}

void row_crash(const Args& a, const char* self) {
  const std::string dir = fresh_dir("crash");
  std::mt19937_64 rng(a.seed);
  int committed = 0, mid_write = 0, bad = 0;
  int64_t newest = 0;
  std::vector<std::string> args = {self, "--writer", dir};
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  for (int k = 0; k < a.crashes; ++k) {
    int out[2];
    if (::pipe(out) != 0) throw tw::Error("pipe failed");
    const pid_t pid = fork();
    if (pid == 0) {
      ::dup2(out[1], STDOUT_FILENO);
      ::execv(argv[0], argv.data());
      _exit(127);
    }
    ::close(out[1]);
    char buf[64];
    while (::read(out[0], buf, sizeof(buf)) > 0 && std::string(buf, 7) != "writing") {
    }
    ::close(out[0]);
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 200000));
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    for (const fs::directory_entry& e : fs::directory_iterator(dir))
      mid_write += e.path().filename().string().rfind(".ckpt-tmp-", 0) == 0;
    tw::Checkpoint ckpt(dir, 2);
    const auto latest = ckpt.latest();
    if (!latest) continue;
    ++committed;
    if (latest->step < newest) ++bad;
    newest = latest->step;
    tw::nn::Linear lin(1024, kCrashFloats / 1024, false);
    try {
      ckpt.load(*latest, lin);
      for (float x : lin.weight()->value().to_vector<float>())
        if (x != static_cast<float>(latest->step)) {
          ++bad;
          break;
        }
    } catch (const tw::Error&) {
      ++bad;
    }
  }
  rows.push_back({"crash during a checkpoint write", "never a checkpoint that loads wrong",
                  std::to_string(a.crashes) + " SIGKILLs (" + std::to_string(mid_write) +
                      " inside a write), " + std::to_string(bad) + " bad loads, newest step " +
                      std::to_string(newest),
                  true, bad == 0 && committed > 0});
  fs::remove_all(dir);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    auto num = [&] { return i + 1 < argc ? std::atoll(argv[++i]) : 0; };
    if (f == "--writer" && i + 1 < argc) return writer(argv[i + 1]);
    if (f == "--short") {
      a.short_form = true;
      a.cuts = 20;
      a.kills = 2;
      a.ckpt_mib = 16;
      a.crashes = 6;
      a.epochs = 3;
      a.moves = 40;
      a.move_cuts = 20;
      a.rounds = 1;
    } else if (f == "--moves") {
      a.moves = static_cast<int>(num());
    } else if (f == "--move-cuts") {
      a.move_cuts = static_cast<int>(num());
    } else if (f == "--rounds") {
      a.rounds = static_cast<int>(num());
    } else if (f == "--only") {
      a.only = i + 1 < argc ? argv[++i] : "";
    } else if (f == "--cuts") {
      a.cuts = static_cast<int>(num());
    } else if (f == "--kills") {
      a.kills = static_cast<int>(num());
    } else if (f == "--ckpt-mib") {
      a.ckpt_mib = num();
    } else if (f == "--ckpt-only") {
      a.only = "ckpt";
    } else if (f == "--crashes") {
      a.crashes = static_cast<int>(num());
    } else if (f == "--seed") {
      a.seed = static_cast<uint64_t>(num());
    } else {
      std::fprintf(
          stderr,
          "usage: tw_bench_chaos [--short] [--ckpt-only] [--cuts N] [--kills N] [--ckpt-mib N] "
          "[--crashes N] [--seed N] [--moves N] [--move-cuts N] [--rounds N] "
          "[--only cuts|kills|ckpt|moves|cost|crash]\n");
      return 2;
    }
  }
  std::signal(SIGPIPE, SIG_IGN);
  try {
    // The reference: the same run, uncut, on the CPU device (remote runs equal it bit for bit).
    auto want = [&](const char* row) { return a.only.empty() || a.only == row; };
    std::vector<std::vector<uint8_t>> whole;
    if (want("cuts") || want("kills"))
      whole =
          param_bytes(*tw::digits::train_resumable(train_set(), tw::Device::cpu(), base(a)).model);
    if (want("cuts")) {
      row_cuts(a, whole, false);
      row_cuts(a, whole, true);
    }
    if (want("kills")) row_kills(a, whole);
    if (want("ckpt")) {
      // The target row: a remote device as issue 34 has them, over a 1 Gbit/s link with a 2 ms
      // round trip (tests/support/shaped_link.h), into a disk. There the download, not the disk,
      // is the slow side, and the write overlaps it. 3 runs (each moves the checkpoint 3 times
      // through the link: ~7 s). --short and --ckpt-mib keep their sizes.
      const std::string tmp = fs::temp_directory_path().string();
      std::string why;
      if (auto link = tw::testing::ShapedLink::open({2000, "1gbit"}, &why)) {
        row_checkpoint(a, tmp, "1 Gbit/s link, 2 ms RTT; disk, " + tmp, true, link.get(), 3);
      } else {
        rows.push_back({"checkpoint " + std::to_string(a.ckpt_mib) +
                            " MiB from a remote device (1 Gbit/s link)",
                        "<= 1.5x downloading them", "skipped: " + why, false, true});
      }
      // The same over loopback (~4 GB/s, faster than any real link), into a disk and into
      // memory (tmpfs: fsync costs nothing): what the checkpoint costs beside the download. Over
      // loopback the disk alone is slower than the download, so neither is a target row.
      row_checkpoint(a, tmp, "loopback; disk, " + tmp, false);
      if (fs::is_directory("/dev/shm")) row_checkpoint(a, "/dev/shm", "loopback; tmpfs", false);
    }
    if (want("moves")) row_moves(a);
    if (want("cost")) row_cost(a);
    if (want("crash")) row_crash(a, argv[0]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tw_bench_chaos: %s\n", e.what());
    return 1;
  }
  bool ok = true;
  std::printf("\n%-44s | %-46s | %s | %s\n", "target", "wanted", "holds", "measured");
  for (const Row& r : rows) {
    const char* verdict = !r.judged ? "  -  " : r.holds ? " yes " : " NO  ";
    if (r.judged && !r.holds) ok = false;
    std::printf("%-44s | %-46s | %s | %s\n", r.what.c_str(), r.target.c_str(), verdict,
                r.measured.c_str());
  }
  std::printf("(MLP on the digits, %d epochs, batch 64, seed %" PRIu64 "%s)\n", a.epochs, a.seed,
              a.short_form ? "; --short: timing rows not judged" : "");
  return ok ? 0 : 1;
}
