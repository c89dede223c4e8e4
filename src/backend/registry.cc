#include "backend/registry.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

#include "backend/torch/torch_backend.h"

namespace tw {
namespace {

#ifdef TW_TORCH_MODULE
constexpr const char* kTorchModule = TW_TORCH_MODULE;  // where the build put it
#else
constexpr const char* kTorchModule = nullptr;  // built without libtorch
#endif

// Loads the torch backend module once per process (never unloaded: libtorch cannot be). The
// environment variable TW_TORCH_BACKEND_MODULE names another copy of it.
Result<tw::Backend* (*)()> torch_entry() {
  static std::once_flag once;
  static tw::Backend* (*entry)() = nullptr;
  static std::string error;
  std::call_once(once, [] {
    const char* path = std::getenv("TW_TORCH_BACKEND_MODULE");
    if (!path || !*path) path = kTorchModule;
    void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char* why = dlerror();
      error = std::string("cannot load the torch backend module ") + path + ": " +
              (why ? why : "unknown error");
      return;
    }
    entry = reinterpret_cast<tw::Backend* (*)()>(dlsym(handle, kTorchBackendEntry));
    if (!entry)
      error = std::string("the torch backend module ") + path + " lacks " + kTorchBackendEntry;
  });
  if (!entry) return unavailable(error);
  return entry;
}

}  // namespace

std::vector<std::string> backend_names() {
  if (kTorchModule) return {"cpu", "torch"};
  return {"cpu"};
}

bool has_backend(const std::string& name) {
  for (const std::string& n : backend_names()) {
    if (n == name) return true;
  }
  return false;
}

Result<std::unique_ptr<Backend>> make_backend(const std::string& name) {
  if (name == "cpu") return make_cpu_backend();
  if (name == "torch") {
    if (!kTorchModule) {
      return unimplemented(
          "this build has no torch backend: it was configured without libtorch (install "
          "Debian's libtorch-dev and reconfigure with -DTW_WITH_TORCH=ON)");
    }
    TW_ASSIGN_OR_RETURN(auto entry, torch_entry());
    Backend* b = entry();
    if (!b) return internal_error("the torch backend could not be created");
    return std::unique_ptr<Backend>(b);
  }
  std::string have;
  for (const std::string& n : backend_names()) have += (have.empty() ? "" : ", ") + n;
  return invalid_argument("unknown backend '" + name + "' (this build has: " + have + ")");
}

}  // namespace tw
