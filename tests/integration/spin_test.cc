// The server's threads poll for more work for --spin-us after running some (run_shard in
// server.cc): results must not change with it, and a server left idle must stop spinning.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/server_process.h"
#include "tensorwire/tensorwire.h"

namespace tw {
namespace {

using testing::ServerProcess;

// CPU time (user + system) the process has used, in seconds, from /proc/PID/stat.
double cpu_seconds(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  // Fields after the command name (which may hold spaces) start past the last ')'.
  std::istringstream rest(s.substr(s.rfind(')') + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// The same chained ops and reads against a server that spins long and one that never spins.
std::vector<float> work(const Device& d) {
  Tensor x = arange(0.0, 64.0, 1.0, kF32, d);
  std::vector<float> seen;
  for (int i = 0; i < 50; ++i) {
    x = (x * 1.5 + 0.25).sin();
    if (i % 10 == 0) seen.push_back(x.sum().item<float>());
  }
  for (float v : x.to_vector<float>()) seen.push_back(v);
  return seen;
}

TEST(Spin, ResultsAreTheSameWithAndWithoutTheServersSpin) {
  ServerProcess spinning({"--spin-us", "2000"}), sleeping({"--spin-us", "0"});
  EXPECT_EQ(work(Device::remote(spinning.url())), work(Device::remote(sleeping.url())));
}

TEST(Spin, AnIdleServerStopsSpinning) {
  ServerProcess server({"--spin-us", "10000", "--workers", "1"});
  Device d = Device::remote(server.url());
  (void)work(d);
  // The spin after the last request ends within 10 ms; then the thread sleeps in the kernel.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const double before = cpu_seconds(server.pid());
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const double used = cpu_seconds(server.pid()) - before;
  // A thread spinning all along would have used ~0.5 s; a few clock ticks is noise.
  EXPECT_LT(used, 0.1) << "the idle server used " << used << " s of CPU in 0.5 s";
}

}  // namespace
}  // namespace tw
