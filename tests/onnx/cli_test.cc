// `tensorwire onnx show` and `tensorwire onnx run` on models of ONNX's test data: show prints the
// names and the IR ops, run executes on cpu and on a real server process, and a model with an op
// the importer does not map is an error naming the node and op (exit status 1).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

#include "support/server_process.h"
#include "tensorwire/version.h"

namespace tw::testing {
namespace {

const std::string kData = TW_ONNX_TESTDATA;

std::pair<int, std::string> cli(const std::string& args) {
  std::string out;
  FILE* p = ::popen((std::string(TW_CLI_BINARY) + " " + args + " 2>&1").c_str(), "r");
  if (!p) return {-1, out};
  std::array<char, 4096> buf{};
  for (size_t n; (n = std::fread(buf.data(), 1, buf.size(), p)) > 0;) out.append(buf.data(), n);
  const int st = ::pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

TEST(OnnxCli, ShowNamesInputsOutputsAndOps) {
  const auto [status, out] =
      cli("onnx show " + kData + "/pytorch-converted/test_Conv2d/model.onnx");
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("opset 6, producer 'pytorch 0.3', 1 nodes, 2 initializers"), std::string::npos)
      << out;
  EXPECT_NE(out.find("input 0 '0': f32[2, 3, 7, 5]"), std::string::npos) << out;
  EXPECT_NE(out.find("conv2d("), std::string::npos) << out;
}

TEST(OnnxCli, RunsOnCpuAndRemotelyAsOneGraph) {
  const std::string model = kData + "/node/test_gemm_default_single_elem_vector_bias/model.onnx";
  auto [status, out] = cli("onnx run " + model);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("on cpu in"), std::string::npos) << out;
  ServerProcess server;
  std::tie(status, out) = cli("onnx run " + model + " --device " + server.url() + " --repeat 2");
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("as one graph"), std::string::npos) << out;
  EXPECT_NE(out.find("output 0 'y': f32[3, 3]"), std::string::npos) << out;
}

TEST(OnnxCli, UnsupportedOpIsAnErrorNamingNodeAndOp) {
  const auto [status, out] = cli("onnx show " + kData + "/node/test_nonzero_example/model.onnx");
  EXPECT_EQ(status, 1) << out;
  EXPECT_NE(out.find("(NonZero): op type NonZero is not supported"), std::string::npos) << out;
}

// --input-value gives an input by value (as LoadOptions::input_values), in its declared dtype
// and shape: Reshape's shape input, which must be known at load.
TEST(OnnxCli, InputValueGivesAnInputNodesUseAsAConstant) {
  const std::string model = kData + "/node/test_reshape_reordered_all_dims/model.onnx";
  auto [status, out] = cli("onnx run " + model);
  EXPECT_EQ(status, 1) << out;
  EXPECT_NE(out.find("must be known at load"), std::string::npos) << out;
  std::tie(status, out) = cli("onnx run " + model + " --input-value shape=4,2,3");
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("f32[4, 2, 3]"), std::string::npos) << out;
  std::tie(status, out) = cli("onnx run " + model + " --input-value shape=4,6");
  EXPECT_EQ(status, 1) << out;
  EXPECT_NE(out.find("input shape is i64[3], 2 values given"), std::string::npos) << out;
  std::tie(status, out) = cli("onnx run " + model + " --input-value nope=1");
  EXPECT_EQ(status, 1) << out;
  EXPECT_NE(out.find("the model has no input nope (its inputs: data, shape)"), std::string::npos)
      << out;
}

// The first hour's surface (issue 50): --help and --version exit 0, a bad ping count and an
// unknown flag are refused by name (exit 2), and onnx run prints summaries unless --full.
TEST(Cli, HelpAndVersionExitZero) {
  auto [status, out] = cli("--help");
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("usage: tensorwire"), std::string::npos) << out;
  EXPECT_NE(out.find("onnx run MODEL.onnx"), std::string::npos) << out;
  std::tie(status, out) = cli("--version");
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find(std::string("tensorwire ") + tw::version()), std::string::npos) << out;
  std::tie(status, out) = cli("");
  EXPECT_EQ(status, 2) << out;
}

TEST(Cli, PingRefusesACountThatIsNotANumber) {
  // (Refused before any connection: nothing listens at port 1.)
  auto [status, out] = cli("ping tcp://127.0.0.1:1 abc");
  EXPECT_EQ(status, 2) << out;
  EXPECT_NE(out.find("COUNT must be a whole number from 1, not 'abc'"), std::string::npos) << out;
  std::tie(status, out) = cli("ping tcp://127.0.0.1:1 0");
  EXPECT_EQ(status, 2) << out;
}

TEST(Cli, AnUnknownFlagIsNamedAsUnknown) {
  const std::string model = kData + "/node/test_gemm_default_single_elem_vector_bias/model.onnx";
  for (const std::string& args :
       {"onnx run " + model + " --bogus-flag", "onnx run " + model + " --bogus-flag 3",
        "onnx show " + model + " --bogus-flag",
        std::string("info tcp://127.0.0.1:1 --bogus-flag")}) {
    const auto [status, out] = cli(args);
    EXPECT_EQ(status, 2) << args << ": " << out;
    EXPECT_NE(out.find("unknown flag --bogus-flag"), std::string::npos) << args << ": " << out;
    EXPECT_EQ(out.find("needs a value"), std::string::npos) << args << ": " << out;
  }
  const auto [status, out] = cli("onnx run " + model + " --seed");
  EXPECT_EQ(status, 2) << out;
  EXPECT_NE(out.find("--seed needs a value"), std::string::npos) << out;
}

TEST(Cli, OnnxRunPrintsASummaryUnlessFull) {
  // Conv2d's output has 2*4*5*4 = 160 values (f32[2, 4, 5, 4]).
  const std::string model = kData + "/pytorch-converted/test_Conv2d/model.onnx";
  auto [status, out] = cli("onnx run " + model);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("160 values: min "), std::string::npos) << out;
  EXPECT_LT(out.size(), 1000u) << out;
  std::string full;
  std::tie(status, full) = cli("onnx run " + model + " --full");
  ASSERT_EQ(status, 0) << full;
  EXPECT_EQ(full.find("160 values: min "), std::string::npos) << full;
  EXPECT_GT(full.size(), out.size() + 500) << full;
}

}  // namespace
}  // namespace tw::testing
