// TEMPORARY during development: kernels not yet written. Delete an entry when its kernel
// lands; delete this file when empty.
#include "backend/cpu/kernels.h"

namespace tw::cpu {
Status run(const ir::Full&, KernelContext&) { return unimplemented("cpu kernel Full not written yet"); }
Status run(const ir::Arange&, KernelContext&) { return unimplemented("cpu kernel Arange not written yet"); }
Status run(const ir::Eye&, KernelContext&) { return unimplemented("cpu kernel Eye not written yet"); }
Status run(const ir::FromHost&, KernelContext&) { return unimplemented("cpu kernel FromHost not written yet"); }
Status run(const ir::RandUniform&, KernelContext&) { return unimplemented("cpu kernel RandUniform not written yet"); }
Status run(const ir::RandNormal&, KernelContext&) { return unimplemented("cpu kernel RandNormal not written yet"); }
Status run(const ir::Bernoulli&, KernelContext&) { return unimplemented("cpu kernel Bernoulli not written yet"); }
Status run(const ir::Unary&, KernelContext&) { return unimplemented("cpu kernel Unary not written yet"); }
Status run(const ir::Binary&, KernelContext&) { return unimplemented("cpu kernel Binary not written yet"); }
Status run(const ir::BinaryScalar&, KernelContext&) { return unimplemented("cpu kernel BinaryScalar not written yet"); }
Status run(const ir::Where&, KernelContext&) { return unimplemented("cpu kernel Where not written yet"); }
Status run(const ir::Clamp&, KernelContext&) { return unimplemented("cpu kernel Clamp not written yet"); }
Status run(const ir::MaskedFill&, KernelContext&) { return unimplemented("cpu kernel MaskedFill not written yet"); }
Status run(const ir::Cast&, KernelContext&) { return unimplemented("cpu kernel Cast not written yet"); }
Status run(const ir::Reduce&, KernelContext&) { return unimplemented("cpu kernel Reduce not written yet"); }
Status run(const ir::Cumsum&, KernelContext&) { return unimplemented("cpu kernel Cumsum not written yet"); }
}  // namespace tw::cpu
