// Runs the op case table (op_cases.cc) on every test device: each case against the reference
// (one test per case and device), every case twice on the same device (bit for bit), and every
// further device of a backend against that backend's first (bit for bit).
#include <set>

#include "unit/ops/devices.h"
#include "unit/ops/op_cases.h"

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

TEST_P(OpTable, MatchesReference) { EXPECT_TRUE(matches_reference(test_case(), device())); }

INSTANTIATE_TEST_SUITE_P(Table, OpTable,
                         ::testing::Combine(::testing::ValuesIn(test_devices()),
                                            ::testing::Range(size_t{0}, op_cases().size())),
                         case_param_name);

// Whole-table checks, one test per device (one process under ctest rather than thousands).
class WholeTable : public ::testing::TestWithParam<DeviceFactory> {};

// Every case, run twice on the same device, gives the same bytes (no uninitialised memory, no
// races, no dependence on allocation).
TEST_P(WholeTable, EveryCaseTwiceSameBytes) {
  const Device d = GetParam().make();
  for (const OpCase& c : op_cases()) EXPECT_TRUE(same_bytes_on(c, d, d)) << c.name;
}

// Every device agrees bit for bit, on every case, with the first device of its backend (remote
// with cpu, remote_torch with torch).
TEST_P(WholeTable, EveryCaseSameBytesAsItsBackendsFirstDevice) {
  if (GetParam().same_bytes_as.empty()) GTEST_SKIP() << "the first device of its backend";
  const Device a = test_device_named(GetParam().same_bytes_as).make(), b = GetParam().make();
  for (const OpCase& c : op_cases()) EXPECT_TRUE(same_bytes_on(c, a, b)) << c.name;
}

INSTANTIATE_TEST_SUITE_P(Devices, WholeTable, ::testing::ValuesIn(test_devices()),
                         [](const ::testing::TestParamInfo<DeviceFactory>& info) { return info.param.name; });

// The table itself: every registered op has at least one case, and the reference accepts every
// case (a case the reference rejects is a mistake in the table, not in the kernels).
TEST(OpCaseTable, CoversEveryRegisteredOp) {
  std::set<std::string> used;
  for (const auto& c : op_cases()) used.insert(c.op);
  for (const std::string& op : registered_ops()) EXPECT_TRUE(used.count(op)) << "no case for " << op;
}

TEST(OpCaseTable, ReferenceAcceptsEveryCase) {
  for (const auto& c : op_cases()) {
    EXPECT_NO_THROW(run_reference(c, make_host_inputs(c))) << c.name;
  }
}

}  // namespace
}  // namespace tw::optest
