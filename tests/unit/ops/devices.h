// The devices the op suite runs on. Every op case runs on each of them and must match the
// reference; devices of one backend must also agree with each other bit for bit
// (op_cases_test.cc), while devices of different backends agree within the case's tolerance
// (tests/unit/torch checks that directly).
//
// "remote" is device 0 of a real tensorwire-server process on 127.0.0.1 (port 0), started on
// first use and stopped when the test binary exits; all cases share one session. When this build
// has the torch backend, the same server hosts cpu and torch devices (--backend cpu,torch), and
// "torch" (local) and "remote_torch" (that server's device 1) join the list.
#pragma once
#include <functional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/server_process.h"
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

inline tw::testing::ServerProcess& test_server() {
  static tw::testing::ServerProcess server(tw::Device::torch_available()
                                               ? std::vector<std::string>{"--backend", "cpu,torch"}
                                               : std::vector<std::string>{});
  return server;
}

inline tw::Device remote_test_device(int index = 0) {
  static tw::Device cpu = tw::Device::remote(test_server().url(), 0);
  static tw::Device torch = tw::Device::remote(test_server().url(), 1);
  return index == 0 ? cpu : torch;
}

inline std::vector<DeviceFactory> test_devices() {
  std::vector<DeviceFactory> v = {
      {"cpu", [] { return tw::Device::cpu(); }, ""},
      {"remote", [] { return remote_test_device(0); }, "cpu"},
  };
  if (tw::Device::torch_available()) {
    v.push_back({"torch", [] { return tw::Device::torch(); }, ""});
    v.push_back({"remote_torch", [] { return remote_test_device(1); }, "torch"});
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
