// The backends this build has, by name: what the server hosts (ServerOptions::backend) and what
// local devices (tw::Device::cpu(), tw::Device::torch()) run on. "cpu" is always built; "torch"
// only when CMake found libtorch (TW_WITH_TORCH).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace tw {

std::vector<std::string> backend_names();  // {"cpu"} or {"cpu", "torch"}
bool has_backend(const std::string& name);
// A new backend (its own empty tensor table), or an error naming the backends this build has.
Result<std::unique_ptr<Backend>> make_backend(const std::string& name);

}  // namespace tw
