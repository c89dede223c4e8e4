// The LibTorch backend's one entry point. It lives in a module (libtw_backend_torch.so) that
// backend/torch_loader.cc loads on first use; no torch header is included here: only the backend's
// own .cc files see ATen.
#pragma once
#include "backend/backend.h"

// A new torch backend, owned by the caller, or null when it cannot be made. It executes every
// op of the IR through ATen (PyTorch's kernels) with the semantics of docs/ops.md. The first
// call sets ATen's CPU allocator to tensorwire's buffer pool; ATen's intra-op thread count
// follows tw::get_num_threads().
extern "C" tw::Backend* tw_torch_backend_create();
inline constexpr const char* kTorchBackendEntry = "tw_torch_backend_create";
