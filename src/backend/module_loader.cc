// The registry's entries for the backends this build made as modules (backend/module.h):
// torch (backend/torch/, with libtorch), vulkan (backend/vulkan/, with libvulkan-dev and glslc),
// cuda (backend/cuda/, with the CUDA toolkit), and the test-only ones under tests/backends/. Each
// is registered like any backend; making a device of one loads its module, once per process and
// never unloaded (libtorch cannot be), so that a process that never uses it never pays its
// runtime's startup. CMake finds each backend's folder and lists the modules it built (the
// generated backend/modules.inc): a new backend is a folder, with no edit here or elsewhere.
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "backend/module.h"
#include "backend/registry.h"

namespace tw {
namespace {

using Entry = tw::Backend* (*)(int, char*, size_t);

struct BuiltModule {
  const char* name;  // the backend's name
  const char* path;  // where the build put libtw_backend_<name>.so
  // A test-only backend (tests/backends/): never installed, so registered only where the build
  // that made it still has it (a program of the build tree), not from an installed copy.
  bool test_only;
};
constexpr BuiltModule kBuiltModules[] = {
#include "backend/modules.inc"  // {"torch", "/.../libtw_backend_torch.so", false}, ...
    {nullptr, nullptr, false}};

// An installed copy: tensorwire/libtw_backend_<name>.so in the directory of the
// libtensorwire.so this code runs in (lib/tensorwire/ under an install prefix,
// cmake/install.cmake; the same relative place in the Python package). Empty when there is
// none, as in the build tree.
std::string installed_module(const std::string& name) {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&installed_module), &info) == 0 || !info.dli_fname) return {};
  std::string lib = info.dli_fname;
  const size_t slash = lib.rfind('/');
  if (slash == std::string::npos) return {};
  std::string path = lib.substr(0, slash) + "/tensorwire/libtw_backend_" + name + ".so";
  return access(path.c_str(), R_OK) == 0 ? path : std::string();
}

// TW_TORCH_BACKEND_MODULE, TW_VULKAN_BACKEND_MODULE: another copy of a module.
std::string env_module(const std::string& name) {
  std::string var = "TW_";
  for (char c : name) var += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  var += "_BACKEND_MODULE";
  const char* env = std::getenv(var.c_str());
  return env && *env ? std::string(env) : std::string();
}

struct Loaded {
  std::once_flag once;
  Entry entry = nullptr;
  std::string error;
};

// Loads module `name` once per process: the environment's copy, else an installed copy beside
// the library, else the build's.
Result<Entry> module_entry(const std::string& name, const std::string& built) {
  static std::mutex mu;
  static auto* loaded = new std::map<std::string, Loaded>;  // leaked: modules stay loaded
  Loaded* l;
  {
    std::lock_guard<std::mutex> lock(mu);
    l = &(*loaded)[name];
  }
  std::call_once(l->once, [&] {
    std::string path = env_module(name);
    if (path.empty()) path = installed_module(name);
    if (path.empty()) path = built;
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char* why = dlerror();
      l->error = "cannot load the " + name + " backend module " + path + ": " +
                 (why ? why : "unknown error");
      return;
    }
    l->entry = reinterpret_cast<Entry>(dlsym(handle, kBackendModuleEntry));
    if (!l->entry)
      l->error = "the " + name + " backend module " + path + " lacks " + kBackendModuleEntry;
  });
  if (!l->entry) return unavailable(l->error);
  return l->entry;
}

bool register_modules() {
  for (const BuiltModule* m = kBuiltModules; m->name; ++m) {
    const std::string name = m->name, built = m->path;
    if (m->test_only && env_module(name).empty() && access(built.c_str(), R_OK) != 0) continue;
    register_backend(
        name, [name, built](const DeviceSpec& spec) -> Result<std::unique_ptr<Backend>> {
          TW_ASSIGN_OR_RETURN(Entry entry, module_entry(name, built));
          char error[1024] = {0};
          Backend* b = entry(spec.ordinal, error, sizeof error);
          if (!b) {
            return unavailable("cannot make device " + spec.str() + ": " +
                               (error[0] ? std::string(error) : std::string("no reason given")));
          }
          return std::unique_ptr<Backend>(b);
        });
  }
  return true;
}

[[maybe_unused]] const bool kModulesRegistered = register_modules();

}  // namespace
}  // namespace tw
