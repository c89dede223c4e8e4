// tw::serve(const Device&): picks the backend a device names and starts tw::Server with it. It
// needs both a Device (api) and the server, so it lives in a layer above both (README.md here):
// the server links no client or API code, and the API no server.
#include "tensorwire/device.h"
#include "tensorwire/error.h"
#include "tensorwire/server.h"

namespace tw {

std::unique_ptr<Server> serve(const Device& device, ServerOptions options) {
  switch (device.kind()) {
    case Device::Kind::kCpu: options.backend = "cpu"; return serve(std::move(options));
    case Device::Kind::kTorch: options.backend = "torch"; return serve(std::move(options));
    case Device::Kind::kLocal: options.backend = device.str(); return serve(std::move(options));
    case Device::Kind::kRemote:
      throw Error("cannot serve " + device.str() +
                  ": a remote device only forwards ops to another server; a server hosts devices "
                  "that execute ops itself. Host tw::Device::cpu() here, or let clients connect "
                  "to that server directly");
    case Device::Kind::kCapture:
      throw Error("cannot serve " + device.str() +
                  ": a capture device records the ops a program issues to it, for replay "
                  "elsewhere; host the device it wraps instead");
  }
  throw Error("cannot serve device " + device.str() + ": unknown device kind");
}

}  // namespace tw
