#include "backend/registry.h"

#ifdef TW_WITH_TORCH_BACKEND
#include "backend/torch/torch_backend.h"
#endif

namespace tw {

std::vector<std::string> backend_names() {
#ifdef TW_WITH_TORCH_BACKEND
  return {"cpu", "torch"};
#else
  return {"cpu"};
#endif
}

bool has_backend(const std::string& name) {
  for (const std::string& n : backend_names()) {
    if (n == name) return true;
  }
  return false;
}

Result<std::unique_ptr<Backend>> make_backend(const std::string& name) {
  if (name == "cpu") return make_cpu_backend();
#ifdef TW_WITH_TORCH_BACKEND
  if (name == "torch") return make_torch_backend();
#else
  if (name == "torch") {
    return unimplemented(
        "this build has no torch backend: it was configured without libtorch (install Debian's "
        "libtorch-dev and reconfigure with -DTW_WITH_TORCH=ON)");
  }
#endif
  std::string have;
  for (const std::string& n : backend_names()) have += (have.empty() ? "" : ", ") + n;
  return invalid_argument("unknown backend '" + name + "' (this build has: " + have + ")");
}

}  // namespace tw
