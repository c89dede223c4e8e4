// Resumable sessions (issue 35 item 1; client/resume.cc, server/resume.cc): a digits training
// run whose connection a fault relay (tests/support/fault_relay.h) cuts at random byte counts
// resumes the same session each time, so its final parameters equal an uncut run's bit for bit
// and the server ran exactly as many ops (none lost, none twice); TW_RESUME=0 fails as a dropped
// connection always did; a resume after the server's --resume-grace fails clearly.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <thread>

#include "digits/digits.h"
#include "support/fault_relay.h"
#include "support/server_process.h"
#include "tensorwire/profile.h"
#include "tensorwire/remote.h"
#include "tensorwire/tensorwire.h"

namespace tw {
namespace {

using testing::ServerProcess;
using Clock = std::chrono::steady_clock;

const digits::Dataset& train_set() {
  static const digits::Dataset d =
      digits::split(digits::load(digits::default_path()), 360, 7).first;
  return d;
}

digits::ResumableOptions options() {
  digits::ResumableOptions o;
  o.kind = digits::ModelKind::kMlp;
  o.epochs = 2;
  o.seed = 35;
  return o;
}

int port_of(const std::string& url) { return std::stoi(url.substr(url.rfind(':') + 1)); }

struct Outcome {
  std::vector<std::vector<uint8_t>> params;
  RemoteStats stats;
};

Outcome train_on(const std::string& url) {
  const Device d = Device::remote(url);
  digits::ResumableRun run = digits::train_resumable(train_set(), d, options());
  Outcome out;
  for (const auto& [name, p] : run.model->named_parameters())
    out.params.push_back(p->value().to_bytes());
  out.stats = remote_stats(d);
  return out;
}

uint64_t resumes_so_far() {
  uint64_t n = 0;
  for (const profile::DeviceProfile& p : profile::devices()) n += p.resumes;
  return n;
}

bool eventually(const std::function<bool()>& cond) {
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  for (;;) {
    if (cond()) return true;
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

struct EnvVar {
  EnvVar(const char* name, const char* value) : name(name) { ::setenv(name, value, 1); }
  ~EnvVar() { ::unsetenv(name); }
  const char* name;
};

TEST(Resume, CutsLoseNothingAndRunNothingTwice) {
  Outcome whole;
  {
    ServerProcess server;
    whole = train_on(server.url());
  }
  ServerProcess server;
  tw::testing::FaultOptions fo;
  fo.seed = 35;
  fo.max_cuts = 20;
  fo.cut_min_bytes = 8 << 10;
  fo.cut_max_bytes = 192 << 10;
  tw::testing::FaultRelay relay(port_of(server.url()), fo);
  const uint64_t resumes_before = resumes_so_far();
  const Outcome cut = train_on(relay.url());
  const uint64_t resumes = resumes_so_far() - resumes_before;
  std::fprintf(stderr, "%d cuts, %d connections, %llu resumes, %llu ops (uncut %llu)\n",
               relay.cuts(), relay.connections(), static_cast<unsigned long long>(resumes),
               static_cast<unsigned long long>(cut.stats.ops_executed),
               static_cast<unsigned long long>(whole.stats.ops_executed));
  EXPECT_GE(relay.cuts(), 10) << "the run ended before the relay cut it enough";
  EXPECT_TRUE(cut.params == whole.params) << "final parameters differ from the uncut run's";
  EXPECT_EQ(cut.stats.ops_executed, whole.stats.ops_executed) << "ops lost or run twice";
  EXPECT_EQ(cut.stats.sessions_opened, 1u) << "a new session instead of the resumed one";
  EXPECT_GE(resumes, 1u);
  EXPECT_LE(resumes, static_cast<uint64_t>(relay.cuts()));
}

TEST(Resume, OverUnixSockets) {
  Outcome whole;
  {
    ServerProcess server;
    whole = train_on(server.url());
  }
  const std::string dir = ::testing::TempDir();
  const std::string path = dir + "tw_resume_" + std::to_string(::getpid()) + ".sock";
  const std::string relayed = dir + "tw_resume_relay_" + std::to_string(::getpid()) + ".sock";
  ServerProcess server({"--listen", "unix://" + path});
  tw::testing::FaultOptions fo;
  fo.seed = 36;
  fo.max_cuts = 10;
  fo.cut_min_bytes = 8 << 10;
  fo.cut_max_bytes = 192 << 10;
  tw::testing::FaultRelay relay(path, relayed, fo);
  const Outcome cut = train_on(relay.url());
  EXPECT_GE(relay.cuts(), 5);
  EXPECT_TRUE(cut.params == whole.params) << "final parameters differ from the uncut run's";
  EXPECT_EQ(cut.stats.ops_executed, whole.stats.ops_executed) << "ops lost or run twice";
  EXPECT_EQ(cut.stats.sessions_opened, 1u);
}

TEST(Resume, AClosedSessionIsNotKept) {
  ServerProcess server;
  {
    const Device d = Device::remote(server.url());
    const Tensor t = full({256, 1024}, 1.0, kF32, d);  // 1 MiB held on the server
    EXPECT_GE(remote_stats(d).bytes_held, uint64_t{1} << 20);
  }
  // The client said goodbye as it closed: its tensors go now, not after the grace period.
  const Device direct = Device::remote(server.url());
  EXPECT_TRUE(eventually([&] { return remote_stats(direct).bytes_held == 0; }));
}

TEST(Resume, DisabledFailsAsBefore) {
  ServerProcess server;
  tw::testing::FaultOptions fo;
  fo.seed = 3;
  fo.max_cuts = 1;
  fo.cut_min_bytes = fo.cut_max_bytes = 64 << 10;
  tw::testing::FaultRelay relay(port_of(server.url()), fo);
  EnvVar off("TW_RESUME", "0");
  try {
    (void)train_on(relay.url());
    ADD_FAILURE() << "training through a cut connection succeeded with TW_RESUME=0";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("closed the connection"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("resum"), std::string::npos) << e.what();
  }
  EXPECT_EQ(relay.connections(), 1);
  // The server let the session go with its connection (the client never asked to keep it).
  const Device direct = Device::remote(server.url());
  EXPECT_TRUE(eventually([&] { return remote_stats(direct).sessions == 1; }));
}

TEST(Resume, AfterTheGracePeriodFailsClearly) {
  ServerProcess server({"--resume-grace", "0.1"});
  tw::testing::FaultOptions fo;
  fo.seed = 4;
  fo.max_cuts = 1;
  fo.cut_min_bytes = fo.cut_max_bytes = 64 << 10;
  fo.reconnect_delay_ms = 600;  // the link comes back after the session's grace ended
  tw::testing::FaultRelay relay(port_of(server.url()), fo);
  try {
    (void)train_on(relay.url());
    ADD_FAILURE() << "resumed a session whose grace period had ended";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("cannot resume the session"), std::string::npos) << m;
    EXPECT_NE(m.find("grace period"), std::string::npos) << m;
  }
  // The expired session is gone from the server.
  const Device direct = Device::remote(server.url());
  EXPECT_TRUE(eventually([&] { return remote_stats(direct).sessions == 1; }));
}

}  // namespace
}  // namespace tw
