// The one entry point of a backend built as a module (libtw_backend_<name>.so: torch/, vulkan/),
// which module_loader.cc loads on first use. A module links libtensorwire.so, which the loading
// process already holds, so there is one buffer pool, thread pool and registry per process; the
// library never links the module's vendor runtime (libtorch, libvulkan).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>

#include "backend/backend.h"

// A new backend for device `ordinal` of the module's kind, owned by the caller; or null with a
// message (what is missing and what to do) written, NUL-terminated, into error[0, error_size).
// Defined by each module (extern "C": the loader finds it by this name with dlsym).
extern "C" tw::Backend* tw_backend_create(int ordinal, char* error, size_t error_size);
inline constexpr const char* kBackendModuleEntry = "tw_backend_create";

namespace tw {
// What a module's tw_backend_create returns on failure: `why` written, cut to fit and
// NUL-terminated, into error[0, error_size), and null.
inline Backend* module_failure(const std::string& why, char* error, size_t error_size) {
  if (error_size > 0) {
    const size_t n = std::min(why.size(), error_size - 1);
    std::memcpy(error, why.data(), n);
    error[n] = '\0';
  }
  return nullptr;
}
}  // namespace tw
