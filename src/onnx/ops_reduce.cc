// ONNX reductions (ReduceX, ArgMax/ArgMin) onto Reduce. The result keeps the input's dtype, as
// ONNX's do (Reduce gives i64 sums and f32 means of integers: cast back).
#include "onnx/importer.h"

namespace tw::onnx_import {

namespace {

using RK = ir::ReduceKind;
using UK = ir::UnaryKind;
using BK = ir::BinaryKind;

enum class Pre { kNone, kSquare, kAbs, kExp };
enum class Post { kNone, kSqrt, kLog };

void reduce_op(const char* name, RK kind, Pre pre, Post post) {
  op_table()[name] = [kind, pre, post](Node& n) {
    // Axes: an attribute, or (ReduceSum from opset 13) an optional input.
    const bool axes_input = std::string(n.proto.op_type()) == "ReduceSum" && n.opset >= 13;
    if (axes_input)
      n.check_attrs({"keepdims", "noop_with_empty_axes"});
    else
      n.check_attrs({"axes", "keepdims"});
    const bool keep = n.attr_int("keepdims", 1) != 0;
    std::vector<int64_t> axes =
        axes_input ? (n.has_input(1) ? n.ints_input(1, "axes") : std::vector<int64_t>{})
                   : n.attr_ints("axes");
    Builder& b = n.b;
    TensorId x = n.input(0);
    const DType d = b.meta(x).dtype;
    if (axes.empty() && axes_input && n.attr_int("noop_with_empty_axes", 0) != 0) {
      n.set_output(0, b.copy(x));
      return;
    }
    const int64_t rank = static_cast<int64_t>(b.meta(x).shape.size());
    for (int64_t& a : axes) a = n.axis(a, rank, "axes entry");
    if (axes.empty()) {  // all dims (Reduce's empty dims means the same, but keepdim wants them)
      for (int64_t a = 0; a < rank; ++a) axes.push_back(a);
    }
    if (storage_only(d)) x = b.cast(x, kF32);
    if (pre == Pre::kSquare) x = b.binary(BK::kMul, x, x);
    if (pre == Pre::kAbs) x = b.unary(UK::kAbs, x);
    if (pre == Pre::kExp) x = b.unary(UK::kExp, x);
    TensorId out = rank == 0 ? b.copy(x) : b.reduce(kind, x, axes, keep);
    if (post == Post::kSqrt) out = b.unary(UK::kSqrt, out);
    if (post == Post::kLog) out = b.unary(UK::kLog, out);
    n.set_output(0, b.cast(out, d));
  };
}

void arg_op(const char* name, RK kind) {
  op_table()[name] = [kind](Node& n) {
    n.check_attrs({"axis", "keepdims", "select_last_index"});
    Builder& b = n.b;
    TensorId x = n.input(0);
    const Shape s = b.meta(x).shape;
    const int64_t axis = n.axis(n.attr_int("axis", 0), static_cast<int64_t>(s.size()));
    const bool keep = n.attr_int("keepdims", 1) != 0;
    const bool last = n.attr_int("select_last_index", 0) != 0;
    if (storage_only(b.meta(x).dtype)) x = b.cast(x, kF32);
    if (last) x = b.flip(x, {axis});  // the last occurrence is the first of the flipped dim
    TensorId out = b.reduce(kind, x, {axis}, keep);
    if (last) out = b.scalar(BK::kSub, out, s[axis] - 1, /*reverse=*/true);
    n.set_output(0, out);
  };
}

}  // namespace

void register_reduce_ops() {
  reduce_op("ReduceSum", RK::kSum, Pre::kNone, Post::kNone);
  reduce_op("ReduceMean", RK::kMean, Pre::kNone, Post::kNone);
  reduce_op("ReduceMax", RK::kMax, Pre::kNone, Post::kNone);
  reduce_op("ReduceMin", RK::kMin, Pre::kNone, Post::kNone);
  reduce_op("ReduceProd", RK::kProd, Pre::kNone, Post::kNone);
  reduce_op("ReduceSumSquare", RK::kSum, Pre::kSquare, Post::kNone);
  reduce_op("ReduceL1", RK::kSum, Pre::kAbs, Post::kNone);
  reduce_op("ReduceL2", RK::kSum, Pre::kSquare, Post::kSqrt);
  reduce_op("ReduceLogSum", RK::kSum, Pre::kNone, Post::kLog);
  reduce_op("ReduceLogSumExp", RK::kSum, Pre::kExp, Post::kLog);
  arg_op("ArgMax", RK::kArgmax);
  arg_op("ArgMin", RK::kArgmin);
}

}  // namespace tw::onnx_import
