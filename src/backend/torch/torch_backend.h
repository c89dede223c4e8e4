// The LibTorch backend's one public entry point. No torch header is included here: only the
// backend's own .cc files see ATen.
#pragma once
#include <memory>

#include "backend/backend.h"

namespace tw {

// A backend that executes every op of the IR through ATen (PyTorch's kernels), with the
// semantics of docs/ops.md. The first call sets ATen's CPU allocator to tensorwire's buffer pool
// and its intra-op thread count to tensorwire's (tw::get_num_threads()).
std::unique_ptr<Backend> make_torch_backend();

}  // namespace tw
