// The devices the op suite runs on. Every op case runs on each of them and must match the
// reference; devices must also agree with each other bit for bit (op_cases_test.cc).
//
// To run the suite on another device, append one entry, e.g. for the remote device:
//   {"remote", [] { return tw::Device::remote(test_server_url(), 0); }},
#pragma once
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "tensorwire/device.h"

namespace tw::optest {

struct DeviceFactory {
  std::string name;  // used in test names: letters, digits, underscores
  std::function<tw::Device()> make;
};

// Test names and failure messages show the device by name.
inline void PrintTo(const DeviceFactory& f, std::ostream* os) { *os << f.name; }

inline std::vector<DeviceFactory> test_devices() {
  return {
      {"cpu", [] { return tw::Device::cpu(); }},
  };
}

}  // namespace tw::optest
