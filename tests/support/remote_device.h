// A remote device for tests that run a check on the local CPU device and on a remote one: device
// 0 of a real tensorwire-server process on 127.0.0.1 (port 0, read back from its output),
// started on first use and stopped when the test binary exits; one session on it is shared by
// the binary's tests.
#pragma once
#include <string>

#include "support/server_process.h"
#include "tensorwire/tensorwire.h"

namespace tw::testing {

inline const std::string& test_server_url() {
  static ServerProcess server;
  return server.url();
}

inline Device remote_test_device() {
  static const Device device = Device::remote(test_server_url());
  return device;
}

// "cpu", "remote" or "torch": what parameterised tests are instantiated over.
inline Device test_device(const std::string& name) {
  if (name == "remote") return remote_test_device();
  if (name == "torch") return Device::torch();
  return Device::cpu();
}

}  // namespace tw::testing
