// Conformance against ONNX's own backend tests (Debian's libonnx-testdata, ONNX 1.12): every test
// under node/, pytorch-converted/, pytorch-operator/ and simple/ whose ops the importer claims
// (tw::onnx::supported_ops) is loaded, run on cpu with each of its reference data sets and
// compared with ONNX's tolerance (rtol 1e-3, atol 1e-7; integers and bools exact). A wrong value
// or a run error of such a test fails this test. A test whose ops are all claimed but which the
// importer refuses at load (an unsupported dtype or attribute value: the error names it) is
// counted and listed as "refused", never run. Every passing test also runs on a real server
// process, whose outputs must equal cpu's bit for bit, and on the torch device (when built),
// compared with the reference. The table goes to TW_ONNX_REPORT (bench/results/onnx.md).
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "support/server_process.h"
#include "tensorwire/onnx.h"
#include "tensorwire/tensorwire.h"

namespace fs = std::filesystem;

namespace tw::testing {
namespace {

constexpr double kRtol = 1e-3, kAtol = 1e-7;
const char* const kFolders[] = {"node", "pytorch-converted", "pytorch-operator", "simple"};
// node/ tests that pass today (of 932): fewer means a mapping started refusing what it took.
constexpr int kMinNodePassed = 801;

enum class Outcome { kPassed, kFailed, kRefused, kUnsupported };

struct Result {
  std::string folder, name;
  Outcome outcome = Outcome::kUnsupported;
  std::string detail;  // failure, refusal, or the unclaimed ops
};

struct DataSet {
  std::vector<Tensor> inputs;  // graph inputs (non-initializers), in order
  std::vector<Tensor> outputs;
};

// ONNX 1.12's data sets store BFLOAT16 values as UINT16 tensors of their bits (numpy has no
// bfloat16): where the model's value i is BFLOAT16 (bf16[i]), a UINT16 file is read as those bits.
std::vector<Tensor> read_pbs(const fs::path& dir, const char* prefix,
                             const std::vector<bool>& bf16) {
  std::vector<Tensor> out;
  for (int i = 0;; ++i) {
    const fs::path p = dir / (std::string(prefix) + std::to_string(i) + ".pb");
    if (!fs::exists(p)) break;
    if (static_cast<size_t>(i) < bf16.size() && bf16[i]) {
      ::onnx::TensorProto t;
      std::ifstream f(p, std::ios::binary);
      if (t.ParseFromIstream(&f) && t.data_type() == ::onnx::TensorProto::UINT16) {
        Shape shape(t.dims().begin(), t.dims().end());
        std::vector<uint8_t> bits;
        if (t.has_raw_data()) {
          bits.assign(t.raw_data().begin(), t.raw_data().end());
        } else {
          for (int32_t v : t.int32_data()) {
            bits.push_back(static_cast<uint8_t>(v & 0xff));
            bits.push_back(static_cast<uint8_t>((v >> 8) & 0xff));
          }
        }
        out.push_back(from_bytes(bits, shape, kBF16));
        continue;
      }
    }
    out.push_back(onnx::read_tensor(p.string()));
  }
  return out;
}

std::vector<bool> bf16_values(const google::protobuf::RepeatedPtrField<::onnx::ValueInfoProto>& vs,
                              const std::set<std::string>& skip) {
  std::vector<bool> out;
  for (const auto& vi : vs) {
    if (skip.count(vi.name())) continue;
    out.push_back(vi.type().has_tensor_type() &&
                  vi.type().tensor_type().elem_type() == ::onnx::TensorProto::BFLOAT16);
  }
  return out;
}

// Empty when equal within tolerance, else what differs.
std::string compare(const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype() || got.shape() != want.shape()) {
    auto spec = [](const Tensor& t) { return graph::TensorSpec{t.shape(), t.dtype()}.str(); };
    return "got " + spec(got) + ", want " + spec(want);
  }
  if (!is_float(want.dtype())) {
    return got.to_bytes() == want.to_bytes() ? "" : "integer values differ";
  }
  const std::vector<double> g = got.to(kF64).to_vector<double>();
  const std::vector<double> w = want.to(kF64).to_vector<double>();
  // bfloat16 results: one bf16 step (2^-7 relative; coarser than kRtol). ONNX 1.12's reference
  // truncates float to bfloat16 (test_cast_FLOAT_to_BFLOAT16); tensorwire rounds to nearest even,
  // as PyTorch and later ONNX references do.
  const double rtol = want.dtype() == kBF16 ? 1.0 / 128 : kRtol;
  for (size_t i = 0; i < w.size(); ++i) {
    if (std::isnan(w[i]) && std::isnan(g[i])) continue;
    if (g[i] == w[i]) continue;
    if (!(std::abs(g[i] - w[i]) <= kAtol + rtol * std::abs(w[i]))) {
      std::ostringstream os;
      os << "element " << i << ": got " << g[i] << ", want " << w[i];
      return os.str();
    }
  }
  return "";
}

class Conformance : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    for (const std::string& op : onnx::supported_ops()) claimed_.insert(op);
  }
  static std::set<std::string> claimed_;
};
std::set<std::string> Conformance::claimed_;

// The op types of a model that the importer does not claim ("" if it claims them all).
std::string unclaimed_ops(const ::onnx::ModelProto& m, const std::set<std::string>& claimed) {
  std::set<std::string> missing;
  for (const auto& n : m.graph().node()) {
    const bool default_domain = n.domain().empty() || n.domain() == "ai.onnx";
    if (!default_domain)
      missing.insert(n.domain() + "." + n.op_type());
    else if (!claimed.count(n.op_type()))
      missing.insert(n.op_type());
  }
  std::string s;
  for (const std::string& op : missing) s += (s.empty() ? "" : " ") + op;
  return s;
}

TEST_F(Conformance, ClaimedOpsMatchOnnxReferenceOutputs) {
  const fs::path root = TW_ONNX_TESTDATA;
  ASSERT_TRUE(fs::exists(root)) << root << " is missing: apt-get install libonnx-testdata";
  ServerProcess server;
  const Device remote = Device::remote(server.url());
  std::vector<Result> results;
  int remote_checked = 0, torch_checked = 0;
  const bool torch = Device::torch_available();

  for (const char* folder : kFolders) {
    std::vector<fs::path> dirs;
    for (const auto& e : fs::directory_iterator(root / folder)) dirs.push_back(e.path());
    std::sort(dirs.begin(), dirs.end());
    for (const fs::path& dir : dirs) {
      Result r;
      r.folder = folder;
      r.name = dir.filename().string();
      ::onnx::ModelProto proto;
      {
        std::ifstream f(dir / "model.onnx", std::ios::binary);
        if (!proto.ParseFromIstream(&f)) {
          r.detail = "model.onnx does not parse";
          results.push_back(r);
          continue;
        }
      }
      r.detail = unclaimed_ops(proto, claimed_);
      if (!r.detail.empty()) {
        results.push_back(r);
        continue;
      }
      std::vector<std::string> input_names;
      std::set<std::string> inits;
      for (const auto& init : proto.graph().initializer()) inits.insert(init.name());
      for (const auto& vi : proto.graph().input()) {
        if (!inits.count(vi.name())) input_names.push_back(vi.name());
      }
      std::vector<fs::path> sets;
      for (const auto& e : fs::directory_iterator(dir)) {
        if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) {
          sets.push_back(e.path());
        }
      }
      std::sort(sets.begin(), sets.end());
      r.outcome = Outcome::kPassed;
      for (const fs::path& set : sets) {
        DataSet data;
        try {
          data = {read_pbs(set, "input_", bf16_values(proto.graph().input(), inits)),
                  read_pbs(set, "output_", bf16_values(proto.graph().output(), {}))};
        } catch (const Error& e) {  // reference data of a dtype tensorwire lacks
          r.outcome = Outcome::kRefused;
          r.detail = e.what();
          break;
        }
        onnx::LoadOptions options;
        // The data sets' shapes are the inputs' shapes, as ONNX's runner feeds them (the CastLike
        // tests' `like` data is [1] where the graph declares [3, 4]).
        for (size_t i = 0; i < data.inputs.size() && i < input_names.size(); ++i) {
          options.input_values[input_names[i]] = data.inputs[i];
          options.input_shapes[input_names[i]] = data.inputs[i].shape();
        }
        onnx::Model model;
        try {
          model = onnx::load((dir / "model.onnx").string(), options);
        } catch (const Error& e) {
          r.outcome = Outcome::kRefused;
          r.detail = e.what();
          break;
        }
        try {
          std::vector<Tensor> inputs;
          for (const std::string& name : model.input_names)
            inputs.push_back(options.input_values.at(name));
          const std::vector<Tensor> out = model.run(Device::cpu(), inputs);
          if (out.size() != data.outputs.size()) {
            r.outcome = Outcome::kFailed;
            r.detail = std::to_string(out.size()) + " outputs, want " +
                       std::to_string(data.outputs.size());
            break;
          }
          for (size_t i = 0; i < out.size() && r.outcome == Outcome::kPassed; ++i) {
            const std::string diff = compare(out[i], data.outputs[i]);
            if (!diff.empty()) {
              r.outcome = Outcome::kFailed;
              r.detail = set.filename().string() + " output " + std::to_string(i) + " ('" +
                         model.output_names[i] + "'): " + diff;
            }
          }
          // Passing on cpu, the data set runs on torch (compared with the reference) and on the
          // server (compared with cpu, bit for bit).
          if (r.outcome == Outcome::kPassed && torch) {
            std::vector<Tensor> tin;
            for (const Tensor& t : inputs) tin.push_back(t.to(Device::torch()));
            const std::vector<Tensor> tout = model.run(Device::torch(), tin);
            torch_checked += set == sets.front();
            for (size_t i = 0; i < out.size(); ++i) {
              const std::string diff = compare(tout[i].to(Device::cpu()), data.outputs[i]);
              EXPECT_EQ(diff, "") << folder << "/" << r.name << " output " << i << " on torch";
            }
          }
          if (r.outcome == Outcome::kPassed) {
            std::vector<Tensor> rin;
            for (const Tensor& t : inputs) rin.push_back(t.to(remote));
            const std::vector<Tensor> rout = model.run(remote, rin);
            remote_checked += set == sets.front();
            for (size_t i = 0; i < out.size(); ++i) {
              EXPECT_EQ(rout[i].to_bytes(), out[i].to_bytes())
                  << folder << "/" << r.name << " output " << i << ": remote differs from cpu";
            }
          }
        } catch (const std::exception& e) {
          r.outcome = Outcome::kFailed;
          r.detail = e.what();
        }
        if (r.outcome != Outcome::kPassed) break;
      }
      if (r.outcome == Outcome::kPassed) r.detail.clear();
      results.push_back(r);
    }
  }

  // The table.
  std::ostringstream md;
  md << "# ONNX conformance (ONNX 1.12 backend test data, libonnx-testdata)\n\n"
     << "Generated by `ctest --test-dir build -R tw_test_onnx` (tests/onnx/conformance_test.cc).\n"
     << "passed: every data set within rtol " << kRtol << ", atol " << kAtol
     << " (integers exact); failed: a claimed op gives wrong values or errors at run time;\n"
     << "refused: all ops claimed, but the importer refuses the model at load (an unsupported "
        "dtype or attribute value; reasons below); unsupported: uses ops the importer does not "
        "claim.\n\n"
     << "| folder | passed | failed | refused | unsupported | total |\n|---|---|---|---|---|---|\n";
  int total_failed = 0;
  for (const char* folder : kFolders) {
    int c[4] = {0, 0, 0, 0};
    for (const Result& r : results) {
      if (r.folder == folder) ++c[static_cast<int>(r.outcome)];
    }
    total_failed += c[1];
    md << "| " << folder << " | " << c[0] << " | " << c[1] << " | " << c[2] << " | " << c[3]
       << " | " << (c[0] + c[1] + c[2] + c[3]) << " |\n";
  }
  md << "\nEvery passing test also ran on a tensorwire-server over tcp (" << remote_checked
     << " tests; outputs bit-identical to cpu) and on the torch device (" << torch_checked
     << " tests; within the same tolerance of the reference).\n";
  md << "\n## Claimed ops (" << claimed_.size() << ")\n\n";
  {
    std::string line;
    for (const std::string& op : claimed_) line += (line.empty() ? "" : ", ") + op;
    md << line << "\n";
  }
  auto list = [&](Outcome o, const char* title) {
    md << "\n## " << title << "\n\n";
    for (const Result& r : results) {
      if (r.outcome == o) md << "- " << r.folder << "/" << r.name << ": " << r.detail << "\n";
    }
  };
  list(Outcome::kFailed, "Failed");
  list(Outcome::kRefused, "Refused at load");
  std::map<std::string, int> blockers;
  for (const Result& r : results) {
    if (r.outcome == Outcome::kUnsupported) ++blockers[r.detail];
  }
  std::vector<std::pair<int, std::string>> by_count;
  for (const auto& [ops, n] : blockers) by_count.emplace_back(n, ops);
  std::sort(by_count.rbegin(), by_count.rend());
  md << "\n## Unsupported: the unclaimed ops that block them (tests)\n\n";
  for (const auto& [n, ops] : by_count) md << "- " << ops << ": " << n << "\n";
  std::ofstream(TW_ONNX_REPORT) << md.str();

  for (const Result& r : results) {
    EXPECT_NE(r.outcome, Outcome::kFailed) << r.folder << "/" << r.name << ": " << r.detail;
  }
  int node_passed = 0;
  for (const Result& r : results) {
    node_passed += r.folder == "node" && r.outcome == Outcome::kPassed;
    // PyTorch's exports: every test whose ops are claimed passes, none is refused.
    if (r.folder.rfind("pytorch", 0) == 0) {
      EXPECT_NE(r.outcome, Outcome::kRefused) << r.folder << "/" << r.name << ": " << r.detail;
    }
  }
  EXPECT_GE(node_passed, kMinNodePassed);
  std::printf("onnx conformance: node/ passed %d, failed %d in total; table in %s\n", node_passed,
              total_failed, TW_ONNX_REPORT);
  EXPECT_GT(remote_checked, 0);
}

}  // namespace
}  // namespace tw::testing
