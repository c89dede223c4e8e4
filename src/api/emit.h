// Inside the API layer: how a call becomes an op on a device. The Tensor methods, autograd's
// backward rules and the nn/optim code all go through emit, so validation (ir::infer), id
// assignment and autograd recording happen in one place.
#pragma once
#include <initializer_list>
#include <memory>
#include <span>

#include "api/sink.h"
#include "ir/ops.h"
#include "tensorwire/export.h"
#include "tensorwire/tensor.h"

TW_INTERNAL_BEGIN

namespace tw::detail {

// Validates `op` against its inputs' metadata (throwing tw::Error with inference's message),
// gives its output a fresh id, submits it to `sink` and returns the output. `inputs` are the
// op's tensor arguments (an undefined tensor is an absent optional input). When grad mode is on
// and an input requires grad, autograd records the op (api/autograd.h).
Tensor emit(const std::shared_ptr<Sink>& sink, ir::Op op, std::span<const Tensor* const> inputs);
Tensor emit(const std::shared_ptr<Sink>& sink, ir::Op op,
            std::initializer_list<const Tensor*> inputs);

// emit() of an op with several outputs, returned in op_outputs order. Such ops are not
// differentiable: with grad mode on and an input that requires grad, it throws and submits
// nothing.
std::vector<Tensor> emit_all(const std::shared_ptr<Sink>& sink, ir::Op op,
                             std::initializer_list<const Tensor*> inputs);

// The op input naming `t` (id 0, "absent", for an undefined tensor).
inline ir::In in(const Tensor& t) { return ir::In{t.defined() ? t.impl()->id : 0}; }

}  // namespace tw::detail
TW_INTERNAL_END
