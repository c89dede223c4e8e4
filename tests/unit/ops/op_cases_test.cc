// Runs the op case table (op_cases.cc) on every test device: each case against the reference
// (one test per case and device), every case twice on the same device (bit for bit), and every
// further device of a backend against that backend's first (bit for bit). Then payloads of
// several MiB over each transport of the remote cpu device.
#include "unit/ops/op_cases.h"

#include <set>

#include "api/sink.h"
#include "tensorwire/remote.h"
#include "unit/ops/devices.h"

namespace tw::optest {
namespace {

using CaseParam = std::tuple<DeviceFactory, size_t>;  // (device, index into op_cases())

std::string case_param_name(const ::testing::TestParamInfo<CaseParam>& info) {
  return std::get<0>(info.param).name + "_" + op_cases()[std::get<1>(info.param)].name;
}

class OpTable : public ::testing::TestWithParam<CaseParam> {
 protected:
  const OpCase& test_case() const { return op_cases()[std::get<1>(GetParam())]; }
  Device device() const { return std::get<0>(GetParam()).make(); }
};

// Cases that need no device compute: views of their input, copies to the device (a transfer),
// empty results, and results equal to an input (the API hands the input back). A device that
// counts its dispatches must dispatch for every other case.
bool computes_nothing(const OpCase& c) {
  static const std::set<std::string> views = {
      "reshape", "view",      "permute", "transpose", "expand", "slice",     "narrow",
      "squeeze", "unsqueeze", "flatten", "t",         "select", "to_device", "squeeze_dim"};
  if (views.count(c.op)) return true;
  const std::vector<ref::HostTensor> inputs = make_host_inputs(c);
  const ref::HostTensor want = run_reference(c, inputs);
  if (want.numel() == 0) return true;
  for (const ref::HostTensor& in : inputs) {
    if (in.shape == want.shape && in.dtype == want.dtype &&
        ref::to_bytes(in) == ref::to_bytes(want)) {
      return true;
    }
  }
  return false;
}

// Every case on every device; a device other than cpu may decline an op or dtype it declares
// unsupported, and then its refusal must be clear: it names the op's device and says so (the
// test is then skipped with the refusal, which counts it). A device that counts its dispatches
// (a GPU backend, local) must have dispatched device work for the case, so that a backend
// computing on the host cannot pass.
TEST_P(OpTable, MatchesReference) {
  const DeviceFactory& f = std::get<0>(GetParam());
  TW_SKIP_IF_UNAVAILABLE(f.unavailable);
  const Device d = device();
  const bool may_refuse = f.name != "cpu" && f.same_bytes_as != "cpu";
  Backend& backend = d.sink()->backend();
  const uint64_t before = backend.device_dispatches();
  std::string refusal;
  EXPECT_TRUE(matches_reference(test_case(), d, may_refuse ? &refusal : nullptr));
  if (!refusal.empty()) {
    const std::string spec = testing::local_backend_named(f.name)
                                 ? testing::local_backend_named(f.name)->spec
                                 : f.same_bytes_as;
    EXPECT_NE(refusal.find(spec), std::string::npos)
        << "a refusal must name the device (" << spec << "): " << refusal;
    GTEST_SKIP() << "declared unsupported: " << refusal;
  }
  if (backend.counts_dispatches() && !computes_nothing(test_case())) {
    EXPECT_GT(backend.device_dispatches(), before)
        << d.str() << " ran " << test_case().name << " without dispatching device work";
  }
}

INSTANTIATE_TEST_SUITE_P(Table, OpTable,
                         ::testing::Combine(::testing::ValuesIn(test_devices()),
                                            ::testing::Range(size_t{0}, op_cases().size())),
                         case_param_name);

// Whole-table checks, one test per device (one process under ctest rather than thousands).
class WholeTable : public ::testing::TestWithParam<DeviceFactory> {};

// Every case, run twice on the same device, gives the same bytes (no uninitialised memory, no
// races, no dependence on allocation).
TEST_P(WholeTable, EveryCaseTwiceSameBytes) {
  TW_SKIP_IF_UNAVAILABLE(GetParam().unavailable);
  const Device d = GetParam().make();
  const std::vector<CaseRun> first = run_all_bytes(op_cases(), d),
                             second = run_all_bytes(op_cases(), d);
  for (size_t k = 0; k < op_cases().size(); ++k)
    EXPECT_TRUE(same_run(first[k], second[k])) << op_cases()[k].name;
}

// Every device agrees bit for bit, on every case, with the first device of its backend (remote
// with cpu, remote_torch with torch).
TEST_P(WholeTable, EveryCaseSameBytesAsItsBackendsFirstDevice) {
  TW_SKIP_IF_UNAVAILABLE(GetParam().unavailable);
  if (GetParam().same_bytes_as.empty()) GTEST_SKIP() << "the first device of its backend";
  const Device a = test_device_named(GetParam().same_bytes_as).make(), b = GetParam().make();
  const std::vector<CaseRun> on_a = run_all_bytes(op_cases(), a),
                             on_b = run_all_bytes(op_cases(), b);
  for (size_t k = 0; k < op_cases().size(); ++k)
    EXPECT_TRUE(same_run(on_a[k], on_b[k])) << op_cases()[k].name;
}

INSTANTIATE_TEST_SUITE_P(Devices, WholeTable, ::testing::ValuesIn(test_devices()),
                         [](const ::testing::TestParamInfo<DeviceFactory>& info) {
                           return info.param.name;
                         });

// Large payloads over each transport: the large cases (large_op_cases) of ops that move MiB
// each way for little work give the cpu device's bytes on each remote cpu device, and over
// unix:// those bytes travel through shared memory (the socket carries a small part of them)
// while tcp:// and tls:// carry every result (and the uploads the server does not hold already).
struct LargePayload {
  const OpCase* c;
  std::vector<ref::HostTensor> inputs;
  DeviceResult cpu;
  uint64_t bytes;  // of the contiguous inputs uploaded and the result read
};

// Made once per binary: drawing a million-element input costs more than sending it.
const std::vector<LargePayload>& large_payloads() {
  static const std::vector<LargePayload> payloads = [] {
    const std::set<std::string> cheap = {"exp", "cast", "permute", "full", "arange"};
    std::vector<LargePayload> v;
    for (const OpCase& c : large_op_cases()) {
      if (!cheap.count(c.op)) continue;
      LargePayload p{&c, make_host_inputs(c), {}, 0};
      for (size_t k = 0; k < p.inputs.size(); ++k) {
        if (c.inputs[k].layout == Layout::kContig) p.bytes += ref::to_bytes(p.inputs[k]).size();
      }
      const Tensor t = run_on_device(c, p.inputs, Device::cpu());
      p.cpu = DeviceResult{t.shape(), t.dtype(), t.to_bytes()};
      p.bytes += p.cpu.bytes.size();
      v.push_back(std::move(p));
    }
    return v;
  }();
  return payloads;
}

std::vector<DeviceFactory> remote_cpu_devices() {
  std::vector<DeviceFactory> v;
  for (const DeviceFactory& f : test_devices()) {
    if (f.name.rfind("remote", 0) == 0 && f.same_bytes_as == "cpu") v.push_back(f);
  }
  return v;
}

class LargeOverTransport : public ::testing::TestWithParam<DeviceFactory> {};

TEST_P(LargeOverTransport, SameBytesAsCpuAndSharedMemoryOverUnix) {
  const Device d = GetParam().make();
  d.sync();
  const WireCounters before = wire_counters(d);
  uint64_t payload = 0, results = 0;
  for (const LargePayload& p : large_payloads()) {
    const Tensor t = run_on_device(*p.c, p.inputs, d);
    EXPECT_TRUE(bit_identical(p.cpu, DeviceResult{t.shape(), t.dtype(), t.to_bytes()}))
        << p.c->name;
    payload += p.bytes;
    results += p.cpu.bytes.size();
  }
  const WireCounters after = wire_counters(d);
  const uint64_t socket = (after.bytes_out - before.bytes_out) + (after.bytes_in - before.bytes_in);
  ASSERT_GT(payload, uint64_t{32} << 20) << "too few large cases to tell";
  if (GetParam().name == testing::remote_name(testing::Transport::kUnix)) {
    EXPECT_LT(socket, payload / 16) << "the socket carried " << socket << " of " << payload
                                    << " bytes: the shared-memory path is not in use";
  } else {
    // Every result crosses the socket; an upload may not (protocol 9: another session of the
    // same server uploaded the same inputs, so they are deduplicated).
    EXPECT_GE(after.bytes_in - before.bytes_in, results);
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, LargeOverTransport, ::testing::ValuesIn(remote_cpu_devices()),
                         [](const ::testing::TestParamInfo<DeviceFactory>& info) {
                           return info.param.name;
                         });

// The table itself: every registered op has at least one case, and the reference accepts every
// case (a case the reference rejects is a mistake in the table, not in the kernels).
TEST(OpCaseTable, CoversEveryRegisteredOp) {
  std::set<std::string> used;
  for (const auto& c : op_cases()) used.insert(c.op);
  for (const std::string& op : registered_ops())
    EXPECT_TRUE(used.count(op)) << "no case for " << op;
}

TEST(OpCaseTable, ReferenceAcceptsEveryCase) {
  for (const auto& c : op_cases()) {
    EXPECT_NO_THROW(run_reference(c, make_host_inputs(c))) << c.name;
  }
}

}  // namespace
}  // namespace tw::optest
