// Starts a real tensorwire-server process on 127.0.0.1 port 0 and reads back the address it
// bound from its first output line; stops it (SIGTERM, then SIGKILL) on destruction. Used by the
// tests and by bench/remote_bench.cc.
//
// A server that does not end cleanly is reported: one killed by a signal other than the
// SIGTERM sent to it (a sanitizer finding aborts it: abort_on_error=1), one that exits non-zero
// (LeakSanitizer at its exit), or one that has to be killed because it did not stop. The report
// goes to stderr, where the server's own stderr (its sanitizer report) already went, and in the
// tests fails the running test, or the binary when the server was shared by its tests and stops
// at exit (programs without gtest, the benchmarks, define TW_SERVER_PROCESS_NO_GTEST).
//
// The server also dies with the test: it gets SIGKILL when the thread that started it ends
// (PR_SET_PDEATHSIG). A test binary aborted by a finding otherwise leaves its servers running,
// and they hold the output pipe ctest waits on, so ctest waited for its full time limit (1800 s
// under the sanitizers) instead of reporting the finding. Start a server from a thread that
// outlives it: a test's body, or a static.
#pragma once
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#ifndef TW_SERVER_PROCESS_NO_GTEST
#include <gtest/gtest.h>
#endif

#ifndef TW_SERVER_BINARY
#error "TW_SERVER_BINARY must name the tensorwire-server executable"
#endif

namespace tw::testing {

class ServerProcess {
 public:
  // Generous bounds, so that a sanitised server (several times slower, loading libtorch) never
  // meets them: they only turn a server that is stuck into an error instead of a hang.
  static constexpr std::chrono::seconds kStartLimit{120};  // to its limits line
  static constexpr std::chrono::seconds kStopLimit{60};    // from SIGTERM to its exit

  explicit ServerProcess(std::vector<std::string> extra_args = {},
                         const std::string& binary = TW_SERVER_BINARY)
      : binary_(binary) {
    // Everything the child needs is made before fork: the child of a multithreaded process may
    // only make async-signal-safe calls (another thread may hold the allocator's lock).
    std::vector<std::string> args = {binary, "--listen", "tcp://127.0.0.1:0"};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ < 0) {
      close(out[0]);
      close(out[1]);
      throw std::runtime_error("fork failed");
    }
    if (pid_ == 0) {
      // Dies with the thread that started it; if that happened already, goes at once.
      if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(127);
      dup2(out[1], STDOUT_FILENO);  // dup2 clears close-on-exec on the copy
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(out[1]);
    out_ = out[0];
    // The server prints "listening on <url>" once per address, then "limits: ..." once bound.
    const auto deadline = std::chrono::steady_clock::now() + kStartLimit;
    std::string line;
    while (read_line(line, deadline)) {
      lines_.push_back(line);
      if (line.rfind("listening on ", 0) == 0) {
        urls_.push_back(line.substr(13));
      } else if (line.rfind("metrics on ", 0) == 0) {
        metrics_url_ = line.substr(11);
      } else if (line.rfind("limits:", 0) == 0) {
        return;
      }
    }
    // Not listening: reaped here, since no destructor runs for a constructor that throws.
    const bool timed_out = std::chrono::steady_clock::now() >= deadline;
    if (timed_out) ::kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    close(out_);
    out_ = -1;
    throw std::runtime_error(timed_out
                                 ? "tensorwire-server (" + binary + ") did not listen within " +
                                       std::to_string(kStartLimit.count()) + " s; killed"
                                 : "tensorwire-server (" + binary + ") exited before listening (" +
                                       describe(status) + ")");
  }
  ~ServerProcess() { stop(); }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  const std::string& url() const { return urls_.at(0); }
  const std::vector<std::string>& urls() const { return urls_; }
  // What it printed up to its limits line, that included.
  const std::vector<std::string>& lines() const { return lines_; }
  // The --metrics endpoint (http://127.0.0.1:port); empty when not asked for.
  const std::string& metrics_url() const { return metrics_url_; }
  pid_t pid() const { return pid_; }

  // SIGKILL: the server vanishes without closing anything itself.
  void kill_hard() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
    close_output();
  }
  // SIGTERM and wait (SIGKILL after kStopLimit); returns the exit status. A server that did not
  // end cleanly is reported (see the top of this file).
  int stop() {
    int status = 0;
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      bool exited = wait_exit(status);
      if (!exited) {
        ::kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
      }
      const pid_t pid = pid_;
      pid_ = -1;
      const bool clean = exited && ((WIFEXITED(status) && WEXITSTATUS(status) == 0) ||
                                    (WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM));
      if (!clean) {
        report("tensorwire-server (pid " + std::to_string(pid) + ", " + url_or_binary() + ") " +
               (exited ? "did not end cleanly: " + describe(status)
                       : "did not stop within " + std::to_string(kStopLimit.count()) +
                             " s of SIGTERM; killed") +
               " (its stderr, a sanitizer report included, is above)");
      }
    }
    close_output();
    return status;
  }

 private:
  // One line of the server's output, without its line end; false at its end or the deadline.
  bool read_line(std::string& line, std::chrono::steady_clock::time_point deadline) {
    line.clear();
    for (;;) {
      size_t nl = pending_.find('\n');
      if (nl != std::string::npos) {
        line = pending_.substr(0, nl);
        pending_.erase(0, nl + 1);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        return true;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{out_, POLLIN, 0};
      int r = ::poll(&p, 1, static_cast<int>(left.count()));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;
      char buf[512];
      ssize_t n = ::read(out_, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      pending_.append(buf, static_cast<size_t>(n));
    }
  }

  // Waits up to kStopLimit for the server to exit; false if it has not.
  bool wait_exit(int& status) {
    // The system call itself: Debian 12's <sys/pidfd.h> declares pidfd_open without C linkage.
    int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
    if (fd >= 0) {
      pollfd p{fd, POLLIN, 0};
      const auto deadline = std::chrono::steady_clock::now() + kStopLimit;
      int r;
      do {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        r = left.count() > 0 ? ::poll(&p, 1, static_cast<int>(left.count())) : 0;
      } while (r < 0 && errno == EINTR);
      close(fd);
      if (r == 0) return false;
    }
    // Exited (or no pidfd, where it is waited for without a bound).
    return waitpid(pid_, &status, 0) == pid_;
  }

  void close_output() {
    if (out_ >= 0) {
      close(out_);
      out_ = -1;
    }
  }

  std::string url_or_binary() const { return urls_.empty() ? binary_ : urls_.front(); }

  static std::string describe(int status) {
    if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
    if (WIFSIGNALED(status)) {
      return "killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
             strsignal(WTERMSIG(status)) + ")";
    }
    return "status " + std::to_string(status);
  }

  static void report(const std::string& what) {
#ifndef TW_SERVER_PROCESS_NO_GTEST
    if (::testing::UnitTest::GetInstance()->current_test_info() != nullptr) {
      ADD_FAILURE() << what;
      return;
    }
#endif
    std::fprintf(stderr, "%s\n", what.c_str());
    std::fflush(stderr);
#ifndef TW_SERVER_PROCESS_NO_GTEST
    // Past the last test (a server shared by the binary's tests, stopped at its exit): the
    // binary's status is the only place left to fail.
    std::_Exit(EXIT_FAILURE);
#endif
  }

  std::string binary_;
  pid_t pid_ = -1;
  int out_ = -1;         // the read end of the server's stdout
  std::string pending_;  // read from it, past the last whole line
  std::vector<std::string> urls_;
  std::vector<std::string> lines_;
  std::string metrics_url_;
};

}  // namespace tw::testing
