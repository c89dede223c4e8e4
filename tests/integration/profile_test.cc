// tw::profile: the client's own account of its remote time, and TW_PROFILE=1's report at exit.
#include "tensorwire/profile.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "support/server_process.h"
#include "tensorwire/tensorwire.h"

namespace tw {
namespace {

using testing::ServerProcess;

const profile::DeviceProfile* find(const std::vector<profile::DeviceProfile>& ds,
                                   const std::string& name) {
  for (const auto& d : ds)
    if (d.device == name) return &d;
  return nullptr;
}

// The work both tests measure: 300 chained adds and one read.
void work(const Device& d) {
  Tensor x = full({128}, 0.0, kF32, d);
  for (int i = 0; i < 300; ++i) x = x + 1.0;
  ASSERT_EQ(x.to_vector<float>()[0], 300.0f);
}

TEST(Profile, CountsOpsFramesBytesAndWaitingPerDevice) {
  ServerProcess server;
  const std::string name = "remote(" + server.url() + ", 0)";
  // What the profile holds under this name already: it is per process and keyed by address, and
  // the port of an earlier test's server may be given to this one (a make asan run found one
  // session and one op more than this test makes). The figures are counted from there.
  const profile::DeviceProfile base = [&] {
    const std::vector<profile::DeviceProfile> devices = profile::devices();
    const profile::DeviceProfile* p = find(devices, name);
    return p ? *p : profile::DeviceProfile{};
  }();
  {
    Device d = Device::remote(server.url());
    work(d);
    // (Held here: find() points into the vector, which must outlive p.)
    const std::vector<profile::DeviceProfile> devices = profile::devices();
    const profile::DeviceProfile* p = find(devices, name);
    ASSERT_NE(p, nullptr) << profile::report();
    EXPECT_EQ(p->sessions, base.sessions + 1u);
    EXPECT_EQ(p->ops, base.ops + 301u);
    EXPECT_GE(p->round_trips, base.round_trips + 1u);
    EXPECT_GE(p->frames_out, base.frames_out + 1u);  // batches (the handshake is not counted)
    EXPECT_GT(p->bytes_out, base.bytes_out + 301u * 8);
    EXPECT_GE(p->frames_in, base.frames_in + 1u);  // the read's reply
    EXPECT_GT(p->bytes_in, base.bytes_in + 128u * 4) << "the read's payload";
    EXPECT_GT(p->wait_seconds, base.wait_seconds);
  }
  // The connection has closed: its figures stay, and a second session adds to them.
  Device again = Device::remote(server.url());
  work(again);
  const std::vector<profile::DeviceProfile> devices = profile::devices();
  const profile::DeviceProfile* p = find(devices, name);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->sessions, base.sessions + 2u);
  EXPECT_EQ(p->ops, base.ops + 602u);
  std::string report = profile::report();
  EXPECT_NE(report.find(name), std::string::npos) << report;
  EXPECT_NE(report.find("waited for replies"), std::string::npos) << report;
}

// Steps count on the device of their tensors: a step run on the CPU (a determinism check beside
// the remote run, say) does not dilute the remote device's per-step figures.
TEST(Profile, StepsCountOnTheirOwnDevice) {
  ServerProcess server;
  const std::string name = "remote(" + server.url() + ", 0)";
  Device d = Device::remote(server.url());
  auto twice = graph::compile([](const std::vector<Tensor>& a) { return std::vector{a[0] * 2.0}; });
  const uint64_t before = profile::steps();
  const Tensor on_remote = full({4}, 1.0, kF32, d), on_cpu = full({4}, 1.0, kF32, Device::cpu());
  for (int i = 0; i < 5; ++i) (void)twice({on_remote});
  for (int i = 0; i < 7; ++i) (void)twice({on_cpu});
  d.sync();
  EXPECT_EQ(profile::steps(), before + 12);
  const std::vector<profile::DeviceProfile> devices = profile::devices();
  const profile::DeviceProfile* p = find(devices, name);
  ASSERT_NE(p, nullptr) << profile::report();
  EXPECT_EQ(p->steps, 5u);
  const std::string report = profile::report();
  EXPECT_NE(report.find("per step (5 steps)"), std::string::npos) << report;
}

// Run by the test below in a child process of this binary, with TW_PROFILE=1.
TEST(Profile, ChildForAtExit) {
  const char* url = std::getenv("TW_PROFILE_CHILD_URL");
  if (!url) GTEST_SKIP() << "only run as the child of Profile.PrintedAtExitWithTwProfile";
  work(Device::remote(url));
}

TEST(Profile, PrintedAtExitWithTwProfile) {
  ServerProcess server;
  // (Resolved here: in the shell popen starts, /proc/self/exe would be the shell.)
  std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::string cmd = "TW_PROFILE=1 TW_PROFILE_CHILD_URL=" + server.url() + " " + self +
                    " --gtest_filter=Profile.ChildForAtExit 2>&1";
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  EXPECT_EQ(::pclose(p), 0) << out;
  size_t at = out.find("tensorwire profile:");
  ASSERT_NE(at, std::string::npos) << out;
  EXPECT_GT(at, out.find("[  PASSED  ]")) << "printed at exit, after the tests:\n" << out;
  EXPECT_NE(out.find("remote(" + server.url() + ", 0)", at), std::string::npos) << out;
  EXPECT_NE(out.find(" 301 ", at), std::string::npos) << "the child's 301 ops:\n" << out;
}

}  // namespace
}  // namespace tw
