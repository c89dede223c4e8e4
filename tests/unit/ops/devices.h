// The devices the op suite runs on. Every op case runs on each of them and must match the
// reference; devices of one backend must also agree with each other bit for bit
// (op_cases_test.cc), while devices of different backends agree within the case's tolerance
// (tests/unit/torch checks that directly).
//
// "remote", "remote_unix" and "remote_tls" are device 0 of a real tensorwire-server process
// (tests/support/remote_device.h) reached over tcp://127.0.0.1, a Unix socket (large payloads
// through shared memory) and tls://127.0.0.1: the whole suite is the contract every transport
// meets, and each must give the cpu device's bytes. The server starts on first use and stops
// when the test binary exits; each transport's cases share one session. Every other backend the
// registry has (support/local_backends.h: torch, vulkan) joins the list as its local device 0
// ("vulkan") and that device hosted by the same server ("remote_vulkan", over tcp: --backend
// cpu,torch,vulkan:0), which must give the local device's bytes. A backend whose device this
// machine lacks is listed once, with the reason its tests skip.
#pragma once
#include <functional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/local_backends.h"
#include "support/remote_device.h"
#include "tensorwire/device.h"

namespace tw::optest {

struct DeviceFactory {
  std::string name;  // used in test names: letters, digits, underscores
  std::function<tw::Device()> make;
  // The device this one must match bit for bit (same backend); empty for a backend's first.
  std::string same_bytes_as;
  // Why the device cannot be made here ("": it can): its tests skip with this reason, or fail
  // under CI=true (support/local_backends.h).
  std::string unavailable;
  // Whether its backend runs every op (a backend may declare ops unsupported: the op table
  // checks its refusals; suites that call ops freely run on the complete devices only).
  bool complete = true;
};

// Test names and failure messages show the device by name.
inline void PrintTo(const DeviceFactory& f, std::ostream* os) { *os << f.name; }

using tw::testing::available_local_backends;
using tw::testing::test_server;  // cpu (device 0) and device 0 of every available backend

inline std::vector<DeviceFactory> test_devices() {
  std::vector<DeviceFactory> v = {
      {"cpu", [] { return tw::Device::cpu(); }, "", ""},
  };
  for (tw::testing::Transport t : tw::testing::kTransports) {
    v.push_back(
        {tw::testing::remote_name(t), [t] { return test_server().device(t, 0); }, "cpu", ""});
  }
  int index = 1;
  for (const tw::testing::LocalBackend& b : tw::testing::local_backends()) {
    if (!b.unavailable.empty()) {
      v.push_back({b.name, [] { return tw::Device::cpu(); }, "", b.unavailable, false});
      continue;
    }
    const std::string spec = b.spec;
    v.push_back({b.name, [spec] { return tw::Device::local(spec); }, "", "", b.complete});
    v.push_back({"remote_" + b.name,
                 [index] { return test_server().device(tw::testing::Transport::kTcp, index); },
                 b.name, "", b.complete});
    ++index;
  }
  return v;
}

// The devices whose backends run every op: for suites that are not about refusals (random ops,
// error messages, half-precision bits).
inline std::vector<DeviceFactory> complete_test_devices() {
  std::vector<DeviceFactory> v;
  for (DeviceFactory& f : test_devices()) {
    if (f.complete) v.push_back(std::move(f));
  }
  return v;
}

inline DeviceFactory test_device_named(const std::string& name) {
  for (DeviceFactory& f : test_devices()) {
    if (f.name == name) return f;
  }
  throw std::invalid_argument("no test device named " + name);
}

}  // namespace tw::optest
