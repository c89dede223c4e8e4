// The registry's "torch" entry (registry.h), in builds with libtorch: the torch backend is a
// module (backend/torch/, libtw_backend_torch.so) that this file loads on first use, so that a
// process that never makes a torch backend never pays libtorch's second of startup. Without
// libtorch (no TW_TORCH_MODULE) this file is empty and make_backend("torch") says why.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>
#include <string>

#include "backend/registry.h"
#include "backend/torch/torch_backend.h"

namespace tw {
namespace {

#ifdef TW_TORCH_MODULE
constexpr const char* kTorchModule = TW_TORCH_MODULE;  // where the build put it

// An installed copy: tensorwire/libtw_backend_torch.so in the directory of the libtensorwire.so
// this code runs in (lib/tensorwire/ under an install prefix, cmake/install.cmake; the same
// relative place in the Python package). Empty when there is none, as in the build tree.
std::string installed_module() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&installed_module), &info) == 0 || !info.dli_fname) return {};
  std::string lib = info.dli_fname;
  const size_t slash = lib.rfind('/');
  if (slash == std::string::npos) return {};
  std::string path = lib.substr(0, slash) + "/tensorwire/libtw_backend_torch.so";
  return access(path.c_str(), R_OK) == 0 ? path : std::string();
}

// Loads the torch backend module once per process (never unloaded: libtorch cannot be). The
// environment variable TW_TORCH_BACKEND_MODULE names another copy of it; otherwise an installed
// copy beside the library comes before the build's.
Result<tw::Backend* (*)()> torch_entry() {
  static std::once_flag once;
  static tw::Backend* (*entry)() = nullptr;
  static std::string error;
  std::call_once(once, [] {
    const char* env = std::getenv("TW_TORCH_BACKEND_MODULE");
    std::string path = env && *env ? std::string(env) : installed_module();
    if (path.empty()) path = kTorchModule;
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
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
