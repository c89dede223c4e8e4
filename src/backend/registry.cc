#include "backend/registry.h"

#include <dlfcn.h>

#include <cstdlib>
#include <map>
#include <mutex>

#include "backend/torch/torch_backend.h"

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

bool register_backend(const std::string& name, BackendFactory factory) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.factories[name] = std::move(factory);
  return true;
}

std::vector<std::string> backend_names() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> names;
  for (const auto& [name, factory] : r.factories) names.push_back(name);
  return names;
}

bool has_backend(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.factories.count(name) != 0;
}

Result<std::unique_ptr<Backend>> make_backend(const std::string& name) {
  BackendFactory factory;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.factories.find(name);
    if (it != r.factories.end()) factory = it->second;
  }
  if (factory) return factory();  // outside the lock: loading the torch module takes a second
  if (name == "torch") {
    return unimplemented(
        "this build has no torch backend: it was configured without libtorch (install "
        "Debian's libtorch-dev and reconfigure with -DTW_WITH_TORCH=ON)");
  }
  std::string have;
  for (const std::string& n : backend_names()) have += (have.empty() ? "" : ", ") + n;
  return invalid_argument("unknown backend '" + name + "' (this build has: " + have + ")");
}

}  // namespace tw
