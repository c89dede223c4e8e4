// Runs the op case table (op_cases.cc) on every test device: each case against the reference,
// each case twice on the same device (bit for bit), and every further device against the first
// one (bit for bit).
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

// The same op on the same inputs gives the same bytes (no uninitialised memory, no races).
TEST_P(OpTable, Deterministic) { EXPECT_TRUE(same_bytes_on(test_case(), device(), device())); }

INSTANTIATE_TEST_SUITE_P(Table, OpTable,
                         ::testing::Combine(::testing::ValuesIn(test_devices()),
                                            ::testing::Range(size_t{0}, op_cases().size())),
                         case_param_name);

// Every device after the first must agree with the first bit for bit.
std::vector<DeviceFactory> other_devices() {
  std::vector<DeviceFactory> d = test_devices();
  d.erase(d.begin());
  return d;
}

class CrossDevice : public ::testing::TestWithParam<CaseParam> {};

TEST_P(CrossDevice, SameBytesAsFirstDevice) {
  const auto& [other, index] = GetParam();
  EXPECT_TRUE(same_bytes_on(op_cases()[index], test_devices().front().make(), other.make()));
}

INSTANTIATE_TEST_SUITE_P(Table, CrossDevice,
                         ::testing::Combine(::testing::ValuesIn(other_devices()),
                                            ::testing::Range(size_t{0}, op_cases().size())),
                         case_param_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CrossDevice);

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
