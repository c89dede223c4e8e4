// The local backends every device-parameterised suite runs on, taken from the registry
// (backend/registry.h): a backend that registers itself (cpu, torch, vulkan, a later cuda) is
// tested by the op table, the autograd gradchecks and the graph suite with no test edit.
//
// Each backend's device 0 is probed once per binary. A device that cannot be made (a Vulkan
// build on a machine without a Vulkan driver) is listed with the reason, and the suites skip its
// cases with that reason; under CI=true they fail instead, so that CI cannot pass by skipping
// (CI installs lavapipe, a Vulkan device on the CPU), except for a missing CUDA device, which
// no CI machine has.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "backend/registry.h"
#include "tensorwire/device.h"

namespace tw::testing {

struct LocalBackend {
  std::string name;         // "torch", "vulkan": test names use it
  std::string spec;         // "torch", "vulkan:0"
  std::string unavailable;  // why device 0 cannot be made ("": it can)
  bool complete = false;    // it runs every op of the IR (it declares none unsupported)
};

// Every registered backend but cpu (every suite's first device) and test-only ones.
inline const std::vector<LocalBackend>& local_backends() {
  static const std::vector<LocalBackend> v = [] {
    std::vector<LocalBackend> out;
    for (const std::string& name : backend_names()) {
      if (name == "cpu" || name.rfind("test-", 0) == 0) continue;
      LocalBackend b{name, DeviceSpec{name, 0}.str(), ""};
      Result<std::unique_ptr<Backend>> made = make_backend(b.spec);
      if (!made.ok()) {
        b.unavailable = made.status().message();
      } else {
        b.complete = true;
        for (int code = 1; code <= ir::kNumOps; ++code)
          b.complete &= (*made)->supports(static_cast<ir::OpCode>(code));
      }
      out.push_back(std::move(b));
    }
    return out;
  }();
  return v;
}

// Those whose device 0 this machine has, in registry order.
inline std::vector<const LocalBackend*> available_local_backends() {
  std::vector<const LocalBackend*> v;
  for (const LocalBackend& b : local_backends()) {
    if (b.unavailable.empty()) v.push_back(&b);
  }
  return v;
}

// The names a device-parameterised suite runs on besides cpu and the cpu's remote transports:
// every registered backend's local device, and that device behind the test server
// ("remote_<name>", support/remote_device.h) for those this machine has.
inline std::vector<std::string> backend_test_names() {
  std::vector<std::string> v;
  for (const LocalBackend& b : local_backends()) v.push_back(b.name);
  for (const LocalBackend* b : available_local_backends()) v.push_back("remote_" + b->name);
  return v;
}

inline const LocalBackend* local_backend_named(const std::string& name) {
  for (const LocalBackend& b : local_backends()) {
    if (b.name == name) return &b;
  }
  return nullptr;
}

// The backend a suite's test name runs on: "vulkan" and "remote_vulkan" both name vulkan's; null
// for cpu and its transports.
inline const LocalBackend* local_backend_of(const std::string& test_name) {
  if (const LocalBackend* b = local_backend_named(test_name)) return b;
  if (test_name.rfind("remote_", 0) == 0) return local_backend_named(test_name.substr(7));
  return nullptr;
}

inline bool in_ci() {
  const char* ci = std::getenv("CI");
  return ci && std::string(ci) == "true";
}

// Whether a device's absence is one CI cannot remedy: CI machines have no GPU, and the cuda
// backend has no device on the CPU as Vulkan has lavapipe, so its "no CUDA device: <reason>"
// skips even under CI=true (the module is still built there, and its host-side logic tested).
inline bool ci_has_no_such_device(const std::string& reason) {
  return reason.find("no CUDA device") != std::string::npos;
}

// Skips the test (fails it under CI=true, unless CI cannot have the device) when `reason` is not
// empty.
#define TW_SKIP_IF_UNAVAILABLE(reason)                                                 \
  do {                                                                                 \
    const std::string tw_reason_ = (reason);                                           \
    if (!tw_reason_.empty()) {                                                         \
      if (::tw::testing::in_ci() && !::tw::testing::ci_has_no_such_device(tw_reason_)) \
        FAIL() << "CI=true and the device is missing: " << tw_reason_;                 \
      GTEST_SKIP() << tw_reason_;                                                      \
    }                                                                                  \
  } while (0)

// Whether an error is a device's declared refusal of an op or dtype (table_backend.h's
// unsupported_op, unsupported_dtype): it names the op and says "not supported by the".
inline bool is_refusal(const std::string& message) {
  return message.find("not supported by the ") != std::string::npos;
}

}  // namespace tw::testing
