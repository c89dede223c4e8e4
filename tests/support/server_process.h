// Starts a real tensorwire-server process on 127.0.0.1 port 0 and reads back the address it
// bound from its first output line; stops it (SIGTERM, then SIGKILL) on destruction. Used by the
// tests and by bench/remote_bench.cc.
#pragma once
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#ifndef TW_SERVER_BINARY
#error "TW_SERVER_BINARY must name the tensorwire-server executable"
#endif

namespace tw::testing {

class ServerProcess {
 public:
  explicit ServerProcess(std::vector<std::string> extra_args = {},
                         const std::string& binary = TW_SERVER_BINARY) {
    int out[2];
    if (pipe(out) != 0) throw std::runtime_error("pipe failed");
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      dup2(out[1], STDOUT_FILENO);
      close(out[0]);
      close(out[1]);
      std::vector<std::string> args = {binary, "--listen", "tcp://127.0.0.1:0"};
      args.insert(args.end(), extra_args.begin(), extra_args.end());
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(out[1]);
    stdout_ = fdopen(out[0], "r");
    // The server prints "listening on <url>" once per address, then "limits: ..." once bound.
    char line[512];
    while (std::fgets(line, sizeof line, stdout_)) {
      std::string l(line);
      lines_.push_back(l.substr(0, l.find_last_not_of("\r\n") + 1));
      if (l.rfind("listening on ", 0) == 0) {
        urls_.push_back(l.substr(13, l.find_last_not_of("\r\n") - 12));
      } else if (l.rfind("metrics on ", 0) == 0) {
        metrics_url_ = l.substr(11, l.find_last_not_of("\r\n") - 10);
      } else if (l.rfind("limits:", 0) == 0) {
        return;
      }
    }
    throw std::runtime_error("tensorwire-server (" + binary + ") exited before listening");
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
  }
  // SIGTERM and wait; returns the exit status.
  int stop() {
    int status = 0;
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      waitpid(pid_, &status, 0);
      pid_ = -1;
    }
    if (stdout_) {
      std::fclose(stdout_);
      stdout_ = nullptr;
    }
    return status;
  }

 private:
  pid_t pid_ = -1;
  FILE* stdout_ = nullptr;
  std::vector<std::string> urls_;
  std::vector<std::string> lines_;
  std::string metrics_url_;
};

}  // namespace tw::testing
