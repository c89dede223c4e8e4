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
#include <limits>
#include <string>
#include <thread>
#include <type_traits>

#include "tensorwire/server.h"
#include "tensorwire/tensorwire.h"

namespace {

// Flags of this program that are not server options.
const tw::ServerOption kProgramFlags[] = {
    {.name = "",
     .flag = "--threads",
     .takes = "N",
     .help = "intra-op threads per kernel (default: cores)",
     .deflt = "cores",
     .doc =
         "intra-op threads each kernel may use (OpenMP's threads, shared with oneDNN; a worker "
         "thread that has been idle 20 ms hands its set back, so that sessions on other workers, "
         "or a program hosting the server in-process, keep libgomp's short spin between kernels)",
     .most = 4096,
     .zero = false},
    {.name = "",
     .flag = "--drain-timeout",
     .takes = "SECONDS",
     .help = "on SIGTERM, how long the work already received may run before the server exits "
             "anyway (default 30)",
     .deflt = "30",
     .doc = "on SIGTERM, how long the batches already received may run before the server exits "
            "anyway ([draining](#draining-checkpoints-and-failover))",
     .most = 86400,
     .zero = false},
};

// "  --flag TAKES          help", the help wrapped at 100 columns under column 24.
void usage_line(FILE* to, const tw::ServerOption& o) {
  std::string head = std::string("  ") + o.flag + (*o.takes ? std::string(" ") + o.takes : "");
  std::string line = head.size() < 23 ? head + std::string(24 - head.size(), ' ') : head + "\n";
  size_t col = head.size() < 23 ? 24 : 0;
  std::string out;
  std::string word;
  const std::string text = o.help;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i < text.size() && text[i] != ' ') {
      word += text[i];
      continue;
    }
    if (word.empty()) continue;
    if (col == 0) {
      line += std::string(24, ' ');
      col = 24;
    } else if (col > 24 && col + 1 + word.size() > 100) {
      line += "\n" + std::string(24, ' ');
      col = 24;
    } else if (col > 24) {
      line += ' ';
      ++col;
    }
    line += word;
    col += word.size();
    word.clear();
  }
  std::fprintf(to, "%s\n", line.c_str());
}

void usage(FILE* to) {
  std::fprintf(to, "usage: tensorwire-server [options]\n");
  tw::ServerOptions defaults;
  defaults.fields([&](const tw::ServerOption& o, auto&) { usage_line(to, o); });
  for (const tw::ServerOption& o : kProgramFlags) usage_line(to, o);
  std::fprintf(to,
               "  --help, --version, --help-markdown (the options as docs/remote.md's table)\n"
               "BYTES: a number, or with K, M, G or T: 512M, 4G, 1.5T. SECONDS: fractions "
               "allowed.\n");
}

// The table of docs/remote.md's "Server options" (a test compares them).
void usage_markdown() {
  std::printf("| flag | default | `tw.serve()` keyword | meaning |\n|---|---|---|---|\n");
  auto row = [](const tw::ServerOption& o) {
    std::printf("| `%s%s%s` | %s | %s | %s |\n", o.flag, *o.takes ? " " : "", o.takes, o.deflt,
                *o.name ? ("`" + std::string(o.name) + "`").c_str() : "(this program's)", o.doc);
  };
  tw::ServerOptions defaults;
  defaults.fields([&](const tw::ServerOption& o, auto&) { row(o); });
  for (const tw::ServerOption& o : kProgramFlags) row(o);
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
    auto fail = [](const std::string& why) {
      std::fprintf(stderr, "tensorwire-server: %s\n", why.c_str());
      std::exit(2);
    };
    // A flag's number: a count, or a size where the option takes BYTES; within its range.
    auto number = [&](const tw::ServerOption& o, uint64_t type_max) -> uint64_t {
      const char* v = value(o.flag);
      uint64_t n = 0;
      const bool bytes = std::string(o.takes) == "BYTES";
      if (!(bytes ? parse_bytes(v, n) : parse_u64(v, n))) {
        fail(std::string(o.flag) +
             (bytes ? " expects a size in bytes such as 1048576, 512M or 4G"
                    : " expects a non-negative integer") +
             ", got '" + v + "'");
      }
      const uint64_t most = o.most > 0 ? static_cast<uint64_t>(o.most) : type_max;
      if (n == 0 && !o.zero) fail(std::string(o.flag) + " must be more than 0");
      if (n > most) {
        fail(std::string(o.flag) + " takes at most " + std::to_string(most) + ", got '" + v + "'");
      }
      return n;
    };
    // Seconds, fractions allowed: more than 0 (or 0 where the option allows it), at most a day
    // (or the option's most).
    auto seconds = [&](const tw::ServerOption& o) -> double {
      const char* v = value(o.flag);
      char* end = nullptr;
      const double secs = std::strtod(v, &end);
      const double most = o.most > 0 ? o.most : 86400;
      if (end == v || *end || !(secs >= 0) || (secs == 0 && !o.zero) || secs > most) {
        char range[96];
        std::snprintf(range, sizeof range, " expects seconds (%s, at most %g), got '",
                      o.zero ? ">= 0" : "> 0", most);
        fail(std::string(o.flag) + range + v + "'");
      }
      return secs;
    };
    auto first_line = [&](const tw::ServerOption& o) {
      const char* path = value(o.flag);
      std::ifstream f(path);
      std::string line;
      if (!f || !std::getline(f, line) || line.empty()) {
        fail(std::string("cannot read a credential from the first line of '") + path + "' (" +
             o.flag + ")");
      }
      return line;
    };
    if (a == "--help" || a == "-h") {
      usage(stdout);
      return 0;
    }
    if (a == "--help-markdown") {
      usage_markdown();
      return 0;
    }
    if (a == "--version") {
      std::printf("tensorwire-server %s (protocol %d)\n", tw::version(), tw::protocol_version());
      return 0;
    }
    if (a == kProgramFlags[0].flag) {
      tw::set_num_threads(static_cast<int>(number(kProgramFlags[0], 4096)));
      continue;
    }
    if (a == kProgramFlags[1].flag) {
      drain_timeout = std::chrono::milliseconds(std::llround(seconds(kProgramFlags[1]) * 1000));
      continue;
    }
    // Every server option by its flag (tensorwire/server.h declares them).
    bool known = false;
    opts.fields([&](const tw::ServerOption& o, auto& member) {
      if (known || a != o.flag) return;
      known = true;
      using T = std::remove_reference_t<decltype(member)>;
      if constexpr (std::is_same_v<T, bool>) {
        member = true;
      } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
        member.push_back(value(o.flag));
      } else if constexpr (std::is_same_v<T, std::string>) {
        member = o.file ? first_line(o) : std::string(value(o.flag));
      } else if constexpr (std::is_same_v<T, std::chrono::milliseconds>) {
        const double secs = seconds(o);
        member = std::chrono::milliseconds(
            secs == 0 ? 0 : std::max<long long>(1, std::llround(secs * 1000)));
      } else if constexpr (std::is_floating_point_v<T>) {
        member = static_cast<T>(seconds(o));
      } else {
        member = static_cast<T>(number(o, static_cast<uint64_t>(std::numeric_limits<T>::max())));
      }
    });
    if (!known) {
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
