// One kernel per op of the IR. The executor (cpu_backend.cc) dispatches with std::visit, so an
// op without a kernel here fails to compile; an op declared here but not defined fails to link.
// Kernels may assume ir::infer accepted the op (shapes, dtypes, attributes are valid); they
// still return an error for data-dependent problems (an index out of range, say).
#pragma once
#include "backend/cpu/cpu_tensor.h"
#include "ir/ops.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw::cpu {

#define TW_DECLARE_KERNEL(Name, code, since) Status run(const ir::Name& op, KernelContext& ctx);
TW_OP_LIST(TW_DECLARE_KERNEL)
#undef TW_DECLARE_KERNEL

}  // namespace tw::cpu
TW_INTERNAL_END
