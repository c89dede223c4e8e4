// The registry's "torch" entry (registry.h), in builds with libtorch: the torch backend is a
// module (backend/torch/, libtw_backend_torch.so) that this file loads on first use, so that a
// process that never makes a torch backend never pays libtorch's second of startup. Without
// libtorch (no TW_TORCH_MODULE) this file is empty and make_backend("torch") says why.
#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <string>

#include "backend/registry.h"
#include "backend/torch/torch_backend.h"

namespace tw {
namespace {

#ifdef TW_TORCH_MODULE
constexpr const char* kTorchModule = TW_TORCH_MODULE;  // where the build put it

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

// The torch entry is registered like any backend; only making one loads libtorch.
[[maybe_unused]] const bool kTorchRegistered =
    register_backend("torch", []() -> Result<std::unique_ptr<Backend>> {
      TW_ASSIGN_OR_RETURN(auto entry, torch_entry());
      Backend* b = entry();
      if (!b) return internal_error("the torch backend could not be created");
      return std::unique_ptr<Backend>(b);
    });
#endif

}  // namespace
}  // namespace tw
