// tensorwire-server: hosts compute devices for remote clients.
//   tensorwire-server --listen tcp://127.0.0.1:7070 --devices 2
//   tensorwire-server --backend cpu,torch      (device 0 on cpu, device 1 on torch)
//   tensorwire-server --backend vulkan:0       (the first Vulkan device)
//   tensorwire-server --listen tls://0.0.0.0:7070 --credential-file key.txt
// Prints "listening on <url>" for every bound address (with the real port when 0 was asked),
// the TLS certificate's fingerprint when an address is tls://, "metrics on <url>" for the
// --metrics endpoint, then one line with its limits. SIGINT or SIGTERM drains it (Server::drain):
// no new sessions, a "server draining" notice to every client, the work already received run for
// up to --drain-timeout, then exit 0; a second signal during the drain exits at once (also 0).
#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "tensorwire/server.h"
#include "tensorwire/tensorwire.h"

namespace {

void usage(FILE* to) {
  std::fprintf(
      to,
      "usage: tensorwire-server [options]\n"
      "  --listen URL          tcp://host:port, tls://host:port or unix:///path (repeatable;\n"
      "                        default tcp://127.0.0.1:7070; port 0 picks a free one). An\n"
      "                        address other hosts can reach must be tls:// and needs\n"
      "                        --credential-file, unless --insecure\n"
      "  --tls-cert PATH       certificate chain (PEM) of the tls:// addresses; with --tls-key.\n"
      "                        Without both, a self-signed pair is generated at start and\n"
      "                        its SHA-256 fingerprint printed (clients: TW_TLS_FINGERPRINT)\n"
      "  --tls-key PATH        the certificate's private key (PEM)\n"
      "  --insecure            serve a reachable address without TLS or a credential\n"
      "  --devices N           devices to host (default 1)\n"
      "  --backend SPEC        cpu (default), torch (builds with libtorch) or vulkan:N\n"
      "                        (Vulkan device N, builds with libvulkan-dev), or one per\n"
      "                        device, comma-separated: cpu,vulkan:0 hosts device 0 on cpu\n"
      "                        and device 1 on the first Vulkan device\n"
      "  --workers N           execution threads shared by all sessions (default: cores)\n"
      "  --threads N           intra-op threads per kernel (default: cores)\n"
      "  --max-sessions N      (default 4096)\n"
      "  --max-frame BYTES     largest frame a client may send (default 1073741824)\n"
      "  --session-memory BYTES  tensor bytes one session may hold (default 8 GiB)\n"
      "  --max-memory BYTES    tensor bytes all sessions together may hold (default 80%%\n"
      "                        of physical memory)\n"
      "                        (BYTES: a number, or with K, M, G or T: 512M, 4G, 1.5T)\n"
      "  --handshake-timeout SECONDS  drop a peer that has not completed its handshake\n"
      "                        within this (default 10; fractions allowed)\n"
      "  --drain-timeout SECONDS  on SIGTERM, how long the work already received may\n"
      "                        run before the server exits anyway (default 30)\n"
      "  --capability-ttl SECONDS  how long a capability this server signs for a tensor\n"
      "                        move stays valid (default 60)\n"
      "  --resume-grace SECONDS  keep a session whose connection dropped this long for\n"
      "                        its client to resume it (default 60; 0: never)\n"
      "  --transfer-timeout SECONDS  fail an import from another server that makes no\n"
      "                        progress for this long (default 30)\n"
      "  --collective-host HOST  the address collectives' Gloo connections listen on\n"
      "                        (default: the first tcp:// or tls:// host; 127.0.0.1 for a\n"
      "                        wildcard)\n"
      "  --queue-depth N       batches queued per session before backpressure (default 64)\n"
      "  --spin-us N           after work, a server thread polls for more this long\n"
      "                        before it sleeps (default 50, at most 10000; 0: off)\n"
      "  --spin-threads N      at most N threads spin at once (default: cores - 1, at least 1)\n"
      "  --store DIR           keep deduplicated uploads (4 MiB or more) on disk in DIR, by hash\n"
      "                        and credential, so re-uploads after a restart send the hash only\n"
      "  --store-bytes BYTES   the store's size limit, least recently used out (default 16G)\n"
      "  --max-graph-ops N     ops one session's registered graphs may hold (default 262144)\n"
      "  --max-op-cost SECONDS refuse an op whose work, estimated from its shapes, would take\n"
      "                        longer than this on its device (default 1; fractions allowed;\n"
      "                        0: no limit)\n"
      "  --credential-file PATH  clients must present the first line of this file (TW_CREDENTIAL\n"
      "                        on the client side); encrypted over tls://, clear text otherwise\n"
      "  --metrics URL         tcp://host:port (port 0 picks a free one): Prometheus text at\n"
      "                        /metrics and a live dashboard at / (HTTP, no authentication)\n");
}

bool parse_u64(const char* s, uint64_t& out) {
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(s, &end, 10);
  if (errno || !end || *end || s[0] == '-') return false;
  out = v;
  return true;
}

// "4G" -> 4 << 30: a count of bytes, optionally with a binary suffix (K, M, G, T, with or
// without "iB" or "B") and then a fraction allowed ("1.5G").
bool parse_bytes(const char* s, uint64_t& out) {
  if (parse_u64(s, out)) return true;
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s, &end);
  if (errno || end == s || s[0] == '-' || !(v >= 0)) return false;
  const std::string suffix(end);
  const std::string units = "KMGT";
  size_t u =
      suffix.empty()
          ? std::string::npos
          : units.find(static_cast<char>(std::toupper(static_cast<unsigned char>(suffix[0]))));
  if (u == std::string::npos) return false;  // no unit (and not a whole number), or another
  const std::string rest = suffix.substr(1);
  if (!rest.empty() && rest != "B" && rest != "iB") return false;
  double bytes = std::ldexp(v, 10 * static_cast<int>(u + 1));
  if (bytes >= 18446744073709551615.0) return false;
  out = static_cast<uint64_t>(bytes);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  tw::ServerOptions opts;
  std::chrono::milliseconds drain_timeout{30000};
  opts.listen.clear();
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* name) -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "tensorwire-server: %s needs a value\n", name);
        std::exit(2);
      }
      return argv[++i];
    };
    auto number = [&](const char* name) -> uint64_t {
      const char* v = value(name);
      uint64_t n = 0;
      if (!parse_u64(v, n)) {
        std::fprintf(stderr, "tensorwire-server: %s expects a non-negative integer, got '%s'\n",
                     name, v);
        std::exit(2);
      }
      return n;
    };
    auto bytes = [&](const char* name) -> uint64_t {
      const char* v = value(name);
      uint64_t n = 0;
      if (!parse_bytes(v, n)) {
        std::fprintf(
            stderr,
            "tensorwire-server: %s expects a size in bytes such as 1048576, 512M or 4G, got '%s'\n",
            name, v);
        std::exit(2);
      }
      return n;
    };
    auto seconds = [&](const char* name) {
      const char* v = value(name);
      char* end = nullptr;
      double secs = std::strtod(v, &end);
      if (end == v || *end || !(secs > 0) || secs > 86400) {
        std::fprintf(stderr,
                     "tensorwire-server: %s expects seconds (> 0, at most a day), got '%s'\n", name,
                     v);
        std::exit(2);
      }
      return std::chrono::milliseconds(std::max<long long>(1, std::llround(secs * 1000)));
    };
    if (a == "--listen")
      opts.listen.push_back(value("--listen"));
    else if (a == "--devices")
      opts.devices = static_cast<int>(number("--devices"));
    else if (a == "--backend")
      opts.backend = value("--backend");
    else if (a == "--workers")
      opts.worker_threads = static_cast<int>(number("--workers"));
    else if (a == "--threads")
      tw::set_num_threads(static_cast<int>(number("--threads")));
    else if (a == "--max-sessions")
      opts.max_sessions = static_cast<uint32_t>(number("--max-sessions"));
    else if (a == "--max-frame")
      opts.max_frame_bytes = bytes("--max-frame");
    else if (a == "--session-memory")
      opts.session_memory_bytes = bytes("--session-memory");
    else if (a == "--max-memory") {
      opts.max_memory_bytes = bytes("--max-memory");
      if (opts.max_memory_bytes == 0) {
        std::fprintf(stderr, "tensorwire-server: --max-memory must be more than 0 bytes\n");
        return 2;
      }
    } else if (a == "--handshake-timeout")
      opts.handshake_timeout = seconds("--handshake-timeout");
    else if (a == "--drain-timeout")
      drain_timeout = seconds("--drain-timeout");
    else if (a == "--capability-ttl")
      opts.capability_ttl = seconds("--capability-ttl");
    else if (a == "--resume-grace")  // (0 allowed: sessions end with their connection)
      opts.resume_grace = std::string(argv[i + 1] ? argv[i + 1] : "") == "0"
                              ? (++i, std::chrono::milliseconds(0))
                              : seconds("--resume-grace");
    else if (a == "--transfer-timeout")
      opts.transfer_timeout = seconds("--transfer-timeout");
    else if (a == "--collective-host")
      opts.collective_host = value("--collective-host");
    else if (a == "--spin-us")
      opts.spin_us = static_cast<uint32_t>(std::min<uint64_t>(number("--spin-us"), 10000));
    else if (a == "--store")
      opts.store_dir = value("--store");
    else if (a == "--store-bytes")
      opts.store_bytes = bytes("--store-bytes");
    else if (a == "--spin-threads")
      opts.spin_threads = static_cast<uint32_t>(std::min<uint64_t>(number("--spin-threads"), 4096));
    else if (a == "--queue-depth")
      opts.session_queue_depth = static_cast<uint32_t>(number("--queue-depth"));
    else if (a == "--max-graph-ops")
      opts.max_graph_ops = number("--max-graph-ops");
    else if (a == "--max-op-cost") {  // (0 allowed: no limit)
      const char* v = value("--max-op-cost");
      char* end = nullptr;
      opts.max_op_cost = std::strtod(v, &end);
      if (end == v || *end || !(opts.max_op_cost >= 0) || opts.max_op_cost > 1e9) {
        std::fprintf(stderr,
                     "tensorwire-server: --max-op-cost expects seconds (>= 0; 0: no limit), got "
                     "'%s'\n",
                     v);
        return 2;
      }
    } else if (a == "--tls-cert")
      opts.tls_cert_file = value("--tls-cert");
    else if (a == "--tls-key")
      opts.tls_key_file = value("--tls-key");
    else if (a == "--insecure")
      opts.insecure = true;
    else if (a == "--metrics")
      opts.metrics = value("--metrics");
    else if (a == "--credential-file") {
      const char* path = value("--credential-file");
      std::ifstream f(path);
      std::string line;
      if (!f || !std::getline(f, line) || line.empty()) {
        std::fprintf(stderr,
                     "tensorwire-server: cannot read a credential from the first line of '%s'\n",
                     path);
        return 2;
      }
      opts.credential = line;
    } else if (a == "--help" || a == "-h") {
      usage(stdout);
      return 0;
    } else if (a == "--version") {
      std::printf("tensorwire-server %s (protocol %d)\n", tw::version(), tw::protocol_version());
      return 0;
    } else {
      std::fprintf(stderr, "tensorwire-server: unknown option '%s'\n", a.c_str());
      usage(stderr);
      return 2;
    }
  }
  if (opts.listen.empty()) opts.listen.push_back("tcp://127.0.0.1:7070");

  // Signals are taken synchronously by this thread; block them before any thread starts.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  std::unique_ptr<tw::Server> server;
  try {
    server = tw::serve(opts);
  } catch (const tw::Error& e) {
    std::fprintf(stderr, "tensorwire-server: %s\n", e.what());
    return 1;
  }
  for (const std::string& u : server->urls()) std::printf("listening on %s\n", u.c_str());
  if (std::string fp = server->tls_fingerprint(); !fp.empty()) {
    std::printf("tls certificate sha256 %s%s\n", fp.c_str(),
                server->tls_self_signed()
                    ? " (self-signed, generated at start: clients pin it with TW_TLS_FINGERPRINT)"
                    : "");
  }
  if (!server->metrics_url().empty()) std::printf("metrics on %s\n", server->metrics_url().c_str());
  std::printf("limits: %s\n", server->limits_summary().c_str());
  std::fflush(stdout);

  int sig = 0;
  sigwait(&set, &sig);
  std::printf(
      "received %s, draining: no new sessions, clients told, finishing in-flight work "
      "(at most %.1f s; a second signal exits now)\n",
      sig == SIGINT ? "SIGINT" : "SIGTERM", static_cast<double>(drain_timeout.count()) / 1000);
  std::fflush(stdout);
  std::atomic<int> drained{-1};  // 1: finished, 0: the timeout passed with work running
  std::thread drainer([&] { drained = server->drain(drain_timeout) ? 1 : 0; });
  while (drained.load() < 0) {
    const timespec poll{0, 20 * 1000 * 1000};
    const int again = sigtimedwait(&set, nullptr, &poll);
    if (again == SIGINT || again == SIGTERM) {
      std::printf("received a second signal: exiting now\n");
      std::fflush(stdout);
      std::_Exit(0);
    }
  }
  drainer.join();
  if (drained.load() == 0) {
    std::printf("drain timeout passed with work still running: exiting now\n");
    std::fflush(stdout);
    std::_Exit(0);
  }
  tw::ServerStatsSnapshot s = server->stats();
  std::printf("stopped: %llu sessions served, %llu ops executed\n",
              static_cast<unsigned long long>(s.sessions_opened),
              static_cast<unsigned long long>(s.ops_executed));
  return 0;
}
