// The devices the op suite runs on. Every op case runs on each of them and must match the
// reference; devices of one backend must also agree with each other bit for bit
// (op_cases_test.cc), while devices of different backends agree within the case's tolerance
// (tests/unit/torch checks that directly).
//
// "remote", "remote_unix" and "remote_tls" are device 0 of a real tensorwire-server process
// (tests/support/remote_device.h) reached over tcp://127.0.0.1, a Unix socket (large payloads
// through shared memory) and tls://127.0.0.1: the whole suite is the contract every transport
// meets, and each must give the cpu device's bytes. The server starts on first use and stops
// when the test binary exits; each transport's cases share one session. When this build has the
// torch backend, the same server hosts cpu and torch devices (--backend cpu,torch), and "torch"
// (local) and "remote_torch" (that server's device 1, over tcp) join the list.
#pragma once
#include <functional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/remote_device.h"
#include "tensorwire/device.h"

namespace tw::optest {

struct DeviceFactory {
  std::string name;  // used in test names: letters, digits, underscores
  std::function<tw::Device()> make;
  // The device this one must match bit for bit (same backend); empty for a backend's first.
  std::string same_bytes_as;
};

// Test names and failure messages show the device by name.
inline void PrintTo(const DeviceFactory& f, std::ostream* os) { *os << f.name; }

inline tw::testing::TransportServer& test_server() {
  static tw::testing::TransportServer server(
      tw::Device::torch_available() ? std::vector<std::string>{"--backend", "cpu,torch"}
                                    : std::vector<std::string>{});
  return server;
}

inline std::vector<DeviceFactory> test_devices() {
  std::vector<DeviceFactory> v = {
      {"cpu", [] { return tw::Device::cpu(); }, ""},
  };
  for (tw::testing::Transport t : tw::testing::kTransports) {
    v.push_back({tw::testing::remote_name(t), [t] { return test_server().device(t, 0); }, "cpu"});
  }
  if (tw::Device::torch_available()) {
    v.push_back({"torch", [] { return tw::Device::torch(); }, ""});
    v.push_back({"remote_torch",
                 [] { return test_server().device(tw::testing::Transport::kTcp, 1); }, "torch"});
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
