// The backends this build has, by name: what the server hosts (ServerOptions::backend) and what
// local devices (tw::Device::cpu(), tw::Device::torch()) run on. Backends register themselves:
// "cpu" from cpu/cpu_backend.cc; "torch", when CMake found libtorch (TW_WITH_TORCH), from
// torch_loader.cc as an entry that loads its module on first use.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw {

using BackendFactory = std::function<Result<std::unique_ptr<Backend>>()>;

// Adds (or replaces) the backend `name`; returns true so that a file can register from the
// initialiser of a namespace-scope constant. That runs when the library loads: tensorwire is
// one shared library, which the linker never thins of object files nothing refers to, as it
// would members of a static archive.
bool register_backend(const std::string& name, BackendFactory factory);

std::vector<std::string> backend_names();  // registered names, sorted: {"cpu", "torch"}
bool has_backend(const std::string& name);
// A new backend (its own empty tensor table), or an error naming the backends this build has.
Result<std::unique_ptr<Backend>> make_backend(const std::string& name);
// make_backend("cpu") without the look-up: every build has the cpu backend (cpu/cpu_backend.cc
// defines this and registers it under that name).
std::unique_ptr<Backend> make_cpu_backend();

}  // namespace tw
TW_INTERNAL_END
