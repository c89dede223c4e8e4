#include "backend/registry.h"

#include <charconv>
#include <map>
#include <mutex>

namespace tw {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, BackendFactory> factories;  // sorted, so backend_names() is
};

// Built on first use, so a registration from any file's static initialiser finds it ready.
Registry& registry() {
  static auto* r = new Registry;  // leaked: backends may be made during exit
  return *r;
}

// Why a known optional backend is missing from this build, and how to get it.
std::string missing_backend_reason(const std::string& name) {
  if (name == "torch") {
    return "this build has no torch backend: it was configured without libtorch (install "
           "Debian's libtorch-dev and reconfigure with -DTW_WITH_TORCH=ON)";
  }
  if (name == "vulkan") {
    return "this build has no vulkan backend: it was configured without the Vulkan headers or "
           "glslc (scripts/bootstrap.sh installs libvulkan-dev and glslc; reconfigure with "
           "-DTW_WITH_VULKAN=ON)";
  }
  if (name == "cuda") {
    return "this build has no cuda backend: it was configured without nvcc and the CUDA toolkit "
           "(put nvcc on PATH, or set CMAKE_CUDA_COMPILER, and reconfigure with -DTW_WITH_CUDA=ON; "
           "docs/cuda.md)";
  }
  return {};
}

}  // namespace

std::string DeviceSpec::str() const {
  if (ordinal == 0 && !backend_has_ordinals(backend)) return backend;
  return backend + ":" + std::to_string(ordinal);
}

bool backend_has_ordinals(const std::string& backend) {
  return backend != "cpu" && backend != "torch" && backend.rfind("test-", 0) != 0;
}

Result<DeviceSpec> parse_device_spec(const std::string& text) {
  DeviceSpec spec;
  const size_t colon = text.find(':');
  spec.backend = text.substr(0, colon);
  if (spec.backend.empty()) {
    return invalid_argument("device '" + text +
                            "' has no backend name (write it as cpu, torch or "
                            "vulkan:0)");
  }
  if (colon != std::string::npos) {
    const char* first = text.data() + colon + 1;
    const char* last = text.data() + text.size();
    auto [end, ec] = std::from_chars(first, last, spec.ordinal);
    if (ec != std::errc() || end != last || first == last || spec.ordinal < 0 ||
        spec.ordinal >= 65536) {
      return invalid_argument("device '" + text +
                              "': the ordinal after ':' must be a number in "
                              "[0, 65535] (as in vulkan:0)");
    }
  }
  return spec;
}

bool register_backend(const std::string& name, BackendFactory factory) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.factories[name] = std::move(factory);
  return true;
}

bool register_backend(const std::string& name,
                      std::function<Result<std::unique_ptr<Backend>>()> factory) {
  return register_backend(
      name, BackendFactory([name, factory = std::move(factory)](
                               const DeviceSpec& spec) -> Result<std::unique_ptr<Backend>> {
        if (spec.ordinal != 0) {
          return invalid_argument("the " + name + " backend has one device, " + name + "; " +
                                  spec.backend + ":" + std::to_string(spec.ordinal) +
                                  " does not exist");
        }
        return factory();
      }));
}

std::vector<std::string> backend_names() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> names;
  for (const auto& [name, factory] : r.factories) names.push_back(name);
  return names;
}

bool has_backend(const std::string& name) {
  Result<DeviceSpec> spec = parse_device_spec(name);
  if (!spec.ok()) return false;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.factories.count(spec->backend) != 0;
}

Result<std::unique_ptr<Backend>> make_backend(const std::string& text) {
  TW_ASSIGN_OR_RETURN(DeviceSpec spec, parse_device_spec(text));
  return make_backend(spec);
}

Result<std::unique_ptr<Backend>> make_backend(const DeviceSpec& spec) {
  BackendFactory factory;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.factories.find(spec.backend);
    if (it != r.factories.end()) factory = it->second;
  }
  if (factory) return factory(spec);  // outside the lock: loading a module takes a while
  const std::string missing = missing_backend_reason(spec.backend);
  if (!missing.empty()) return unimplemented(missing);
  std::string have;
  for (const std::string& n : backend_names()) have += (have.empty() ? "" : ", ") + n;
  return invalid_argument("unknown backend '" + spec.backend + "' (this build has: " + have + ")");
}

}  // namespace tw
