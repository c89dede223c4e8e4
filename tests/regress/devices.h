// The devices a regression test runs on: the local CPU, the torch device where this build has
// one, and a remote device of an in-process server (port 0) on the CPU backend. The server
// lives as long as the object; the devices (sessions) go first.
#pragma once
#include <memory>
#include <vector>

#include "tensorwire/server.h"
#include "tensorwire/tensorwire.h"

namespace tw::testing {

struct RegressDevices {
  std::unique_ptr<Server> server = serve(Device::cpu());
  std::vector<Device> all = make(*server);

  static std::vector<Device> make(const Server& s) {
    std::vector<Device> d = {Device::cpu(), Device::remote(s.url())};
    if (Device::torch_available()) d.push_back(Device::torch());
    return d;
  }
};

}  // namespace tw::testing
