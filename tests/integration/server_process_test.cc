// The tests' server child process (tests/support/server_process.h) under the failures a
// sanitizer finding causes: a server that aborts fails the test that ran it, and a test process
// that aborts takes its servers with it, so that whoever reads its output (ctest) sees the end of
// it instead of waiting for its time limit.
#include "support/server_process.h"

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

namespace tw {
namespace {

using testing::ServerProcess;
using Clock = std::chrono::steady_clock;

TEST(ServerProcess, AServerKilledByASignalFailsTheTest) {
  ServerProcess server;
  ASSERT_EQ(::kill(server.pid(), SIGABRT), 0);  // as abort_on_error=1 ends it on a finding
  EXPECT_NONFATAL_FAILURE(server.stop(), "did not end cleanly: killed by signal 6");
}

TEST(ServerProcess, StoppedCleanlyItPasses) {
  ServerProcess server;
  const int status = server.stop();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

// Run by the test below in a child process of this binary: starts a server and aborts.
TEST(ServerProcess, ChildThatAborts) {
  if (!std::getenv("TW_SERVER_PROCESS_ABORTING_CHILD")) {
    GTEST_SKIP() << "only run as the child of ServerProcess.DiesWithItsAbortedTestProcess";
  }
  ServerProcess server;
  std::printf("server pid %d\n", static_cast<int>(server.pid()));
  std::fflush(stdout);
  std::abort();
}

// Whether `pid` has ended: gone, or a zombie its new parent has not reaped yet.
bool ended(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && line.size() > paren + 2 && line[paren + 2] == 'Z';
}

TEST(ServerProcess, DiesWithItsAbortedTestProcess) {
  // (Resolved here: in the shell popen starts, /proc/self/exe would be the shell.)
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string cmd = "TW_SERVER_PROCESS_ABORTING_CHILD=1 " + self +
                          " --gtest_filter=ServerProcess.ChildThatAborts 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  // Its output, to its end: the server holds the write end of this pipe (its stderr) for as
  // long as it lives. Bounded, so that a server that outlives the child fails the test instead
  // of hanging it.
  std::string out;
  bool eof = false;
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (!eof && Clock::now() < deadline) {
    pollfd pf{::fileno(p), POLLIN, 0};
    if (::poll(&pf, 1, 100) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(::fileno(p), buf, sizeof buf);
    if (n > 0) {
      out.append(buf, static_cast<size_t>(n));
    } else {
      eof = n == 0;
      if (n < 0) break;
    }
  }
  int server = 0;
  const size_t at = out.find("server pid ");
  if (at != std::string::npos) server = std::atoi(out.c_str() + at + 11);
  if (!eof && server > 0) ::kill(server, SIGKILL);  // what the fix does, so that pclose returns
  const int status = ::pclose(p);
  ASSERT_GT(server, 0) << out;
  EXPECT_TRUE(eof) << "the output did not end within 60 s of the child's start: its server "
                   << server << " outlived it\n"
                   << out;
  EXPECT_NE(status, 0) << "the child aborts";
  // Its output ends as the kernel closes its files on the way out, a moment before it is a
  // zombie: give that moment (bounded) rather than race it.
  const auto exit_deadline = Clock::now() + std::chrono::seconds(10);
  while (!ended(server) && Clock::now() < exit_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(ended(server)) << "server " << server << " outlived the test process that started it";
}

}  // namespace
}  // namespace tw
