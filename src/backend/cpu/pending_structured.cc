// TEMPORARY during development: kernels not yet written. Delete an entry when its kernel
// lands; delete this file when empty.
#include "backend/cpu/kernels.h"

namespace tw::cpu {
Status run(const ir::MatMul&, KernelContext&) { return unimplemented("cpu kernel MatMul not written yet"); }
Status run(const ir::Reshape&, KernelContext&) { return unimplemented("cpu kernel Reshape not written yet"); }
Status run(const ir::Permute&, KernelContext&) { return unimplemented("cpu kernel Permute not written yet"); }
Status run(const ir::Expand&, KernelContext&) { return unimplemented("cpu kernel Expand not written yet"); }
Status run(const ir::Slice&, KernelContext&) { return unimplemented("cpu kernel Slice not written yet"); }
Status run(const ir::SliceAssign&, KernelContext&) { return unimplemented("cpu kernel SliceAssign not written yet"); }
Status run(const ir::Cat&, KernelContext&) { return unimplemented("cpu kernel Cat not written yet"); }
Status run(const ir::Flip&, KernelContext&) { return unimplemented("cpu kernel Flip not written yet"); }
Status run(const ir::Repeat&, KernelContext&) { return unimplemented("cpu kernel Repeat not written yet"); }
Status run(const ir::Gather&, KernelContext&) { return unimplemented("cpu kernel Gather not written yet"); }
Status run(const ir::ScatterAdd&, KernelContext&) { return unimplemented("cpu kernel ScatterAdd not written yet"); }
Status run(const ir::IndexSelect&, KernelContext&) { return unimplemented("cpu kernel IndexSelect not written yet"); }
Status run(const ir::OneHot&, KernelContext&) { return unimplemented("cpu kernel OneHot not written yet"); }
Status run(const ir::Softmax&, KernelContext&) { return unimplemented("cpu kernel Softmax not written yet"); }
Status run(const ir::Conv2d&, KernelContext&) { return unimplemented("cpu kernel Conv2d not written yet"); }
Status run(const ir::Pool2d&, KernelContext&) { return unimplemented("cpu kernel Pool2d not written yet"); }
Status run(const ir::AdaptiveAvgPool2d&, KernelContext&) { return unimplemented("cpu kernel AdaptiveAvgPool2d not written yet"); }
Status run(const ir::LayerNorm&, KernelContext&) { return unimplemented("cpu kernel LayerNorm not written yet"); }
}  // namespace tw::cpu
