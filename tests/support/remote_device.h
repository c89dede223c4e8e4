// A remote device for tests that run a check on the local CPU device and on a remote one: a
// compute server hosted in this process (tw::serve) on an ephemeral loopback port, started on
// first use and stopped at exit, and one session on it shared by the process's tests.
#pragma once
#include <memory>
#include <string>

#include "tensorwire/server.h"
#include "tensorwire/tensorwire.h"

namespace tw::testing {

inline const std::string& in_process_server_url() {
  static const std::unique_ptr<Server> server = serve(Device::cpu());
  static const std::string url = server->url();
  return url;
}

inline Device remote_test_device() {
  static const Device device = Device::remote(in_process_server_url());
  return device;
}

// "cpu" or "remote": what parameterised tests are instantiated over.
inline Device test_device(const std::string& name) {
  return name == "remote" ? remote_test_device() : Device::cpu();
}

}  // namespace tw::testing
