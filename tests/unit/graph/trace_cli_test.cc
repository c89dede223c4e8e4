// The tensorwire CLI's trace commands on a saved trace: show prints every op with its shapes and
// dtypes, run replays it on cpu or a remote device with random or file-given inputs, and a
// corrupt file is an error message and exit status 1, not a crash.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <string>

#include "support/remote_device.h"
#include "tensorwire/graph.h"

namespace tw {
namespace {

struct RunResult {
  int status = -1;
  std::string out;
};

RunResult run_cli(const std::string& args) {
  RunResult r;
  const std::string cmd = std::string(TW_CLI_BINARY) + " " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

class TraceCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/tw_trace_cli_" + std::to_string(::getpid());
    path_ = dir_ + ".twtrace";
    graph::Capture cap(Device::cpu());
    const Tensor x = cap.input(ones({2, 3}));
    const Tensor w = cap.input(ones({3, 4}));
    const Tensor y =
        (x.matmul(w) + from_vector<float>({1, 2, 3, 4}, {4}, cap.device())).relu().sum(0);
    cap.finish({y}).save(path_);
  }
  void TearDown() override { std::remove(path_.c_str()); }
  std::string dir_, path_;
};

TEST_F(TraceCli, ShowPrintsOneOpALineWithShapes) {
  const RunResult r = run_cli("trace show " + path_);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("2 inputs, 5 ops, 1 outputs"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("input 0: %1 f32[2, 3]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("matmul("), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("-> f32[2, 4]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("output 0: "), std::string::npos) << r.out;
}

TEST_F(TraceCli, RunReplaysWithFileOrRandomInputs) {
  const std::string inputs = dir_ + ".safetensors";
  save_safetensors(inputs, NamedTensors{{"input0", ones({2, 3})}, {"input1", ones({3, 4})}});
  RunResult r = run_cli("trace run " + path_ + " --device cpu --inputs " + inputs);
  std::remove(inputs.c_str());
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("replayed 5 ops on cpu"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("output 0: f32[4] tensor([8.0000, 10.0000, 12.0000, 14.0000]"),
            std::string::npos)
      << r.out;
  r = run_cli("trace run " + path_ + " --device " + testing::test_server_url());
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("output 0: f32[4]"), std::string::npos) << r.out;
}

TEST_F(TraceCli, CorruptFilesAreErrors) {
  std::ifstream in(path_, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
  }
  RunResult r = run_cli("trace show " + path_);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("tensorwire: " + path_ + ": trace: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(": trace: graph op "), std::string::npos)
      << "names where it broke: " << r.out;
  r = run_cli("trace run /nonexistent.twtrace");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("cannot open"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace tw
