#include "backend/registry.h"

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
