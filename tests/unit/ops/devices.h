// The devices the op suite runs on. Every op case runs on each of them and must match the
// reference; devices must also agree with each other bit for bit (op_cases_test.cc).
//
// "remote" is device 0 of a real tensorwire-server process on 127.0.0.1 (port 0), started on
// first use and stopped when the test binary exits; all cases share one session.
#pragma once
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "support/server_process.h"
#include "tensorwire/device.h"

namespace tw::optest {

struct DeviceFactory {
  std::string name;  // used in test names: letters, digits, underscores
  std::function<tw::Device()> make;
};

// Test names and failure messages show the device by name.
inline void PrintTo(const DeviceFactory& f, std::ostream* os) { *os << f.name; }

inline tw::Device remote_test_device() {
  static tw::testing::ServerProcess server;
  static tw::Device device = tw::Device::remote(server.url(), 0);
  return device;
}

inline std::vector<DeviceFactory> test_devices() {
  return {
      {"cpu", [] { return tw::Device::cpu(); }},
      {"remote", [] { return remote_test_device(); }},
  };
}

}  // namespace tw::optest
