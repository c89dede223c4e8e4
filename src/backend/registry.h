// The backends this build has, by name, and the devices they make, by spec ("cpu", "torch",
// "vulkan:0"): what the server hosts (ServerOptions::backend) and what local devices
// (tw::Device::cpu(), tw::Device::local("vulkan", 0)) run on. Backends register themselves:
// "cpu" from cpu/cpu_backend.cc; each optional backend built as a module (torch, vulkan) from
// module_loader.cc, as an entry that loads its module (backend/module.h) on first use, so that
// libtensorwire.so never links a vendor runtime.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw {

// A device of a backend: "vulkan:1" is the vulkan backend's device 1 (ordinals count the
// devices that backend can see, in its own order). "cpu" is "cpu:0".
struct DeviceSpec {
  std::string backend;
  int ordinal = 0;
  // "cpu", "torch" (ordinal 0 of a backend with one device is written without it), "vulkan:0".
  std::string str() const;
  bool operator==(const DeviceSpec&) const = default;
};
// "name" or "name:ordinal" (ordinal a decimal in [0, 2^16)); an error naming the text otherwise.
Result<DeviceSpec> parse_device_spec(const std::string& text);
// Backends that always name their ordinal ("vulkan:0"): those with several devices. Spelled by
// DeviceSpec::str(); cpu and torch have one device each and are written bare.
bool backend_has_ordinals(const std::string& backend);

using BackendFactory = std::function<Result<std::unique_ptr<Backend>>(const DeviceSpec&)>;

// Adds (or replaces) the backend `name`; returns true so that a file can register from the
// initialiser of a namespace-scope constant. That runs when the library loads: tensorwire is
// one shared library, which the linker never thins of object files nothing refers to, as it
// would members of a static archive.
bool register_backend(const std::string& name, BackendFactory factory);
// The same for a backend with one device, whose factory ignores the spec (it refuses ordinals
// other than 0, naming the spec).
bool register_backend(const std::string& name,
                      std::function<Result<std::unique_ptr<Backend>>()> factory);

std::vector<std::string> backend_names();   // registered names, sorted: {"cpu", "torch", ...}
bool has_backend(const std::string& name);  // a name, or a spec ("vulkan:0"): its backend's
// A new backend (its own empty tensor table) for the device `spec` ("cpu", "vulkan:0"), or an
// error naming the backends this build has, or saying why the device cannot be made (a Vulkan
// build on a machine without a Vulkan device: kUnavailable).
Result<std::unique_ptr<Backend>> make_backend(const std::string& spec);
Result<std::unique_ptr<Backend>> make_backend(const DeviceSpec& spec);
// make_backend("cpu") without the look-up: every build has the cpu backend (cpu/cpu_backend.cc
// defines this and registers it under that name).
std::unique_ptr<Backend> make_cpu_backend();

}  // namespace tw
TW_INTERNAL_END
