// The kinds of the elementwise, reduction and pooling ops, declared once: the op IR (ir/ops.h)
// makes its enums and traits from these lists, and the Tensor API (tensorwire/tensor.h) and the
// Python module its methods. Kinds are serialised by their position: append only.
#pragma once
#include "tensorwire/export.h"

TW_API_BEGIN

// Each kind is declared once here, with its traits; everything that lists kinds (the Tensor
// methods of tensorwire/tensor.h and their Python bindings, kind_name, inference, the kernels'
// dispatch, autograd, the op suite's registry) expands these lists rather than typing them again.
// Columns:
//   X(Name, ir_name, api_name, grad, math)
//   ir_name   what op_name and the printer call it (the kind's name in docs/ops.md)
//   api_name  the Tensor method (differs from ir_name for recip: Tensor::reciprocal)
//   grad      kGrad: autograd differentiates it (rule in api/grad_rules.cc); kNoGrad: not
//   math      unary only: kFloatMath computes a real function (integral and bool inputs give
//             f32); kSameDType keeps the dtype; kToBool gives bool
// Binary kinds add a column after grad: kScalarApi when the Tensor API has the tensor-scalar
// method (x.add(2)), kNoScalarApi otherwise; reductions have (Name, ir_name, api_name, grad, dims):
// dims kDimList when the method also takes a list of dims (x.sum({0, 1})), kOneDim otherwise; pool
// kinds (Name, ir_name, api_name) (Pool2d's rule covers both).
// clang-format off
#define TW_UNARY_KINDS(X)                                   \
  X(Neg, neg, neg, kGrad, kSameDType)                       \
  X(Abs, abs, abs, kGrad, kSameDType)                       \
  X(Exp, exp, exp, kGrad, kFloatMath)                       \
  X(Log, log, log, kGrad, kFloatMath)                       \
  X(Log1p, log1p, log1p, kGrad, kFloatMath)                 \
  X(Sqrt, sqrt, sqrt, kGrad, kFloatMath)                    \
  X(Rsqrt, rsqrt, rsqrt, kGrad, kFloatMath)                 \
  X(Sin, sin, sin, kGrad, kFloatMath)                       \
  X(Cos, cos, cos, kGrad, kFloatMath)                       \
  X(Tanh, tanh, tanh, kGrad, kFloatMath)                    \
  X(Sigmoid, sigmoid, sigmoid, kGrad, kFloatMath)           \
  X(Relu, relu, relu, kGrad, kSameDType)                    \
  X(Gelu, gelu, gelu, kGrad, kFloatMath)                    \
  X(Erf, erf, erf, kGrad, kFloatMath)                       \
  X(Recip, recip, reciprocal, kGrad, kFloatMath)            \
  X(Floor, floor, floor, kGrad, kSameDType)                 \
  X(Ceil, ceil, ceil, kGrad, kSameDType)                    \
  X(Round, round, round, kGrad, kSameDType)                 \
  X(Sign, sign, sign, kGrad, kSameDType)                    \
  X(Square, square, square, kGrad, kSameDType)              \
  X(LogicalNot, logical_not, logical_not, kNoGrad, kToBool)
#define TW_BINARY_KINDS(X)                                       \
  X(Add, add, add, kGrad, kScalarApi)                            \
  X(Sub, sub, sub, kGrad, kScalarApi)                            \
  X(Mul, mul, mul, kGrad, kScalarApi)                            \
  X(Div, div, div, kGrad, kScalarApi)                            \
  X(Pow, pow, pow, kGrad, kScalarApi)                            \
  X(Maximum, maximum, maximum, kGrad, kNoScalarApi)              \
  X(Minimum, minimum, minimum, kGrad, kNoScalarApi)              \
  X(Remainder, remainder, remainder, kGrad, kScalarApi)          \
  X(Eq, eq, eq, kNoGrad, kScalarApi)                             \
  X(Ne, ne, ne, kNoGrad, kScalarApi)                             \
  X(Lt, lt, lt, kNoGrad, kScalarApi)                             \
  X(Le, le, le, kNoGrad, kScalarApi)                             \
  X(Gt, gt, gt, kNoGrad, kScalarApi)                             \
  X(Ge, ge, ge, kNoGrad, kScalarApi)                             \
  X(LogicalAnd, logical_and, logical_and, kNoGrad, kNoScalarApi) \
  X(LogicalOr, logical_or, logical_or, kNoGrad, kNoScalarApi)    \
  X(LogicalXor, logical_xor, logical_xor, kNoGrad, kNoScalarApi)
#define TW_REDUCE_KINDS(X)                    \
  X(Sum, sum, sum, kGrad, kDimList)           \
  X(Mean, mean, mean, kGrad, kDimList)        \
  X(Prod, prod, prod, kGrad, kOneDim)         \
  X(Max, max, max, kGrad, kOneDim)            \
  X(Min, min, min, kGrad, kOneDim)            \
  X(Argmax, argmax, argmax, kNoGrad, kOneDim) \
  X(Argmin, argmin, argmin, kNoGrad, kOneDim)
#define TW_POOL_KINDS(X) X(Max, max_pool2d, max_pool2d) X(Avg, avg_pool2d, avg_pool2d)
// clang-format on
TW_API_END
