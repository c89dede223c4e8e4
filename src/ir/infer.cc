// Shape and dtype inference: one infer_op overload per op struct, dispatched with std::visit so
// that an op added to TW_OP_LIST without inference does not compile. The rules are those of
// docs/ops.md. Everything here may come from a malicious peer: every attribute is range-checked
// before any arithmetic that could overflow, and every output shape is validated at the end.
#include "ir/infer.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <utility>

namespace tw::ir {
namespace {

using Metas = std::vector<TensorMeta>;

// One output (built in place: a braced Metas{...} would copy its element, shape and all).
Metas one(TensorMeta m) {
  Metas v;
  v.push_back(std::move(m));
  return v;
}
Metas one(Shape shape, DType dtype) { return one(TensorMeta{std::move(shape), dtype}); }

std::string dt(DType d) { return std::string(dtype_name(d)); }
std::string num(int64_t v) { return std::to_string(v); }

// Shortest form that reads back exactly ("0.1", "1", "1e+300"), so messages show what was sent.
std::string num(double v) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, res.ptr);
}
std::string num(const Scalar& s) { return s.is_float ? num(s.f) : num(s.i); }

bool dtype_known(DType d) { return dtype_valid(static_cast<uint8_t>(d)); }

// What every per-op function needs: the lookup, and the op's user-facing name, which starts
// every message so that a user sees which call failed.
class Ctx {
 public:
  Ctx(const MetaLookup& lookup, const Op& op) : lookup_(lookup), op_(op) {}

  // The op's name, for messages: made on first use (an error), not for every op inferred.
  const std::string& name() const {
    if (name_.empty()) name_ = op_name(op_);
    return name_;
  }
  Status error(const std::string& message) const {
    return invalid_argument(name() + ": " + message);
  }
  // broadcast_shapes, naming the op only when the shapes do not broadcast.
  Result<Shape> broadcast(const Shape& a, const Shape& b) const {
    Result<Shape> r = broadcast_shapes(a, b, "");
    return r.ok() ? r : broadcast_shapes(a, b, name().c_str());
  }

  // A required input. Id 0 means "no tensor", which only optional inputs may be.
  Result<TensorMeta> input(const In& in, const std::string& role) const {
    if (in.id == 0) return error("input " + role + " is missing (id 0)");
    Result<TensorMeta> m = lookup_(in.id);
    if (!m.ok()) return m.status().with_context(name() + ": input " + role);
    return m;
  }
  Result<std::optional<TensorMeta>> optional_input(const In& in, const std::string& role) const {
    if (in.id == 0) return std::optional<TensorMeta>();
    TW_ASSIGN_OR_RETURN(TensorMeta m, input(in, role));
    return std::optional<TensorMeta>(std::move(m));
  }

  Result<int64_t> dim(int64_t d, int64_t rank) const {
    Result<int64_t> r = normalize_dim(d, rank, "");
    return r.ok() ? r : normalize_dim(d, rank, name().c_str());
  }
  // Normalised dims, each named at most once.
  Result<std::vector<int64_t>> distinct_dims(const std::vector<int64_t>& dims, int64_t rank) const {
    std::vector<bool> seen(static_cast<size_t>(std::max<int64_t>(rank, 1)), false);
    std::vector<int64_t> out;
    for (int64_t d : dims) {
      TW_ASSIGN_OR_RETURN(int64_t n, dim(d, rank));
      if (seen[static_cast<size_t>(n)]) {
        return error("dims " + shape_str(dims) + " name dim " + num(n) + " more than once");
      }
      seen[static_cast<size_t>(n)] = true;
      out.push_back(n);
    }
    return out;
  }

  Status shape_attr(const Shape& shape) const {
    Status st = validate_shape(shape);
    return st.ok() ? st : st.with_context(name());
  }
  Status dtype_attr(DType d) const {
    if (!dtype_known(d)) {
      return error("unknown dtype code " + num(int64_t{static_cast<uint8_t>(d)}));
    }
    return Status::OK();
  }

  // Storage-only dtypes (f16, bf16) are rejected by every op that computes (docs/ops.md).
  Status computable(DType d) const {
    if (is_storage_only(d)) return error("dtype " + dt(d) + " is storage-only; cast to f32 first");
    return Status::OK();
  }
  // For creation ops, where there is nothing to cast yet.
  Status creatable(DType d) const {
    if (is_storage_only(d)) {
      return error("dtype " + dt(d) + " is storage-only; create f32 and cast it");
    }
    return Status::OK();
  }
  Status numeric(DType d) const {
    TW_RETURN_NOT_OK(computable(d));
    if (d == kBool) return error("dtype bool is not supported (expected a numeric dtype)");
    return Status::OK();
  }
  Status floating(DType d) const {
    TW_RETURN_NOT_OK(computable(d));
    if (d != kF32 && d != kF64) {
      return error("dtype " + dt(d) + " is not supported (expected f32 or f64)");
    }
    return Status::OK();
  }
  Status index_dtype(DType d, const std::string& role) const {
    if (d != kI32 && d != kI64) {
      return error(role + " dtype " + dt(d) + " is not supported (expected i32 or i64)");
    }
    return Status::OK();
  }
  // Exactly `n` entries in an attribute vector; a peer may send any length.
  Status entries(const std::vector<int64_t>& v, size_t n, const std::string& what) const {
    if (v.size() != n) {
      return error(what + " must have " + num(static_cast<int64_t>(n)) + " entries, got " +
                   shape_str(v));
    }
    return Status::OK();
  }
  Status at_least(const std::vector<int64_t>& v, int64_t lo, const std::string& what) const {
    for (int64_t x : v) {
      if (x < lo) return error(what + " " + shape_str(v) + " must be >= " + num(lo));
    }
    return Status::OK();
  }

 private:
  const MetaLookup& lookup_;
  const Op& op_;
  mutable std::string name_;
};

// Shapes are at most kMaxRank long, so converting sizes to int64_t cannot lose anything.
int64_t rank_of(const Shape& s) { return static_cast<int64_t>(s.size()); }

// Shape of `x` once a slice (one start/end/step per dim) has been applied.
Result<Shape> sliced_shape(const Ctx& c, const Shape& x, const std::vector<int64_t>& starts,
                           const std::vector<int64_t>& ends, const std::vector<int64_t>& steps) {
  if (starts.size() != x.size() || ends.size() != x.size() || steps.size() != x.size()) {
    return c.error("expects one start, end and step per dim of " + shape_str(x) + ", got " +
                   shape_str(starts) + ", " + shape_str(ends) + ", " + shape_str(steps));
  }
  Shape out(x.size());
  for (size_t d = 0; d < x.size(); ++d) {
    Result<SliceDim> s = normalize_slice(starts[d], ends[d], steps[d], x[d]);
    if (!s.ok()) {
      return c.error("dim " + num(static_cast<int64_t>(d)) + ": " + s.status().message());
    }
    out[d] = s->size;
  }
  return out;
}

// ================================ creation ================================

Result<Metas> infer_op(const Full& op, const Ctx& c) {
  TW_RETURN_NOT_OK(c.dtype_attr(op.dtype));
  TW_RETURN_NOT_OK(c.shape_attr(op.shape));
  return one(op.shape, op.dtype);
}

Result<Metas> infer_op(const Arange& op, const Ctx& c) {
  TW_RETURN_NOT_OK(c.dtype_attr(op.dtype));
  TW_RETURN_NOT_OK(c.creatable(op.dtype));
  if (op.dtype == kBool) {
    return c.error("dtype bool is not supported (expected f32, f64, i32, i64 or u8)");
  }
  const std::pair<const char*, const Scalar*> args[] = {
      {"start", &op.start}, {"end", &op.end}, {"step", &op.step}};
  for (const auto& [what, s] : args) {
    if (!std::isfinite(s->as_double())) {
      return c.error(std::string(what) + " " + num(*s) + " is not finite");
    }
  }
  const double start = op.start.as_double(), end = op.end.as_double(), step = op.step.as_double();
  if (step == 0) return c.error("step must not be 0");
  const double span = end - start;
  if (span != 0 && (span > 0) != (step > 0)) {
    return c.error("step " + num(op.step) + " does not move from " + num(op.start) + " towards " +
                   num(op.end));
  }
  // Length in double as docs/ops.md says; span / step may overflow to inf, which fails here too.
  const double len = std::ceil(span / step);
  if (!(len <= static_cast<double>(kMaxNumel))) {
    return c.error("[" + num(op.start) + ", " + num(op.end) + ") by " + num(op.step) + " has " +
                   num(len) + " elements, more than 2^48");
  }
  return one({static_cast<int64_t>(std::max(0.0, len))}, op.dtype);
}

Result<Metas> infer_op(const Eye& op, const Ctx& c) {
  TW_RETURN_NOT_OK(c.dtype_attr(op.dtype));
  if (op.n < 0 || op.m < 0) {
    return c.error("n " + num(op.n) + " and m " + num(op.m) + " must be >= 0");
  }
  return one({op.n, op.m}, op.dtype);  // the product is checked with every output shape
}

Result<Metas> infer_op(const FromHost& op, const Ctx& c) {
  TW_RETURN_NOT_OK(c.dtype_attr(op.dtype));
  TW_RETURN_NOT_OK(c.shape_attr(op.shape));
  // numel <= 2^48 and dtype_size <= 8, so the product fits.
  const uint64_t want = static_cast<uint64_t>(numel(op.shape)) * dtype_size(op.dtype);
  if (op.data.data.size() != want) {
    return c.error("data has " + std::to_string(op.data.data.size()) + " bytes but " +
                   meta_str({op.shape, op.dtype}) + " needs " + std::to_string(want));
  }
  return one(op.shape, op.dtype);
}

Result<Metas> infer_op(const RandUniform& op, const Ctx& c) {
  TW_RETURN_NOT_OK(c.dtype_attr(op.dtype));
  TW_RETURN_NOT_OK(c.creatable(op.dtype));
  TW_RETURN_NOT_OK(c.floating(op.dtype));
  TW_RETURN_NOT_OK(c.shape_attr(op.shape));
  if (!std::isfinite(op.low) || !std::isfinite(op.high) || op.low > op.high) {
    return c.error("low " + num(op.low) + " and high " + num(op.high) +
                   " must be finite with low <= high");
  }
  return one(op.shape, op.dtype);
}

Result<Metas> infer_op(const RandNormal& op, const Ctx& c) {
  TW_RETURN_NOT_OK(c.dtype_attr(op.dtype));
  TW_RETURN_NOT_OK(c.creatable(op.dtype));
  TW_RETURN_NOT_OK(c.floating(op.dtype));
  TW_RETURN_NOT_OK(c.shape_attr(op.shape));
  if (!std::isfinite(op.mean) || !std::isfinite(op.std) || op.std < 0) {
    return c.error("mean " + num(op.mean) + " and std " + num(op.std) +
                   " must be finite with std >= 0");
  }
  return one(op.shape, op.dtype);
}

Result<Metas> infer_op(const Bernoulli& op, const Ctx& c) {
  TW_ASSIGN_OR_RETURN(TensorMeta p, c.input(op.p, "p"));
  TW_RETURN_NOT_OK(c.floating(p.dtype));
  return one(std::move(p));
}

// ================================ elementwise ================================

Result<Metas> infer_op(const Unary& op, const Ctx& c) {
  if (op.kind >= UnaryKind::kCount) {
    return invalid_argument("unary: unknown kind code " +
                            num(int64_t{static_cast<uint8_t>(op.kind)}));
  }
  TW_ASSIGN_OR_RETURN(TensorMeta x, c.input(op.x, "x"));
  TW_RETURN_NOT_OK(c.computable(x.dtype));
  if (is_float_math(op.kind)) return one(std::move(x.shape), is_float(x.dtype) ? x.dtype : kF32);
  if (op.kind == UnaryKind::kLogicalNot) return one(std::move(x.shape), kBool);
  TW_RETURN_NOT_OK(c.numeric(x.dtype));
  return one(std::move(x));
}

// Arithmetic kinds: those that are neither comparisons nor logical.
bool is_arithmetic(BinaryKind k) { return !is_comparison(k); }

Status check_binary_kind(BinaryKind k, const char* op) {
  if (k >= BinaryKind::kCount) {
    return invalid_argument(std::string(op) + ": unknown kind code " +
                            num(int64_t{static_cast<uint8_t>(k)}));
  }
  return Status::OK();
}

Result<Metas> infer_op(const Binary& op, const Ctx& c) {
  TW_RETURN_NOT_OK(check_binary_kind(op.kind, "binary"));
  TW_ASSIGN_OR_RETURN(TensorMeta a, c.input(op.a, "a"));
  TW_ASSIGN_OR_RETURN(TensorMeta b, c.input(op.b, "b"));
  TW_RETURN_NOT_OK(c.computable(a.dtype));
  TW_RETURN_NOT_OK(c.computable(b.dtype));
  TW_ASSIGN_OR_RETURN(Shape shape, c.broadcast(a.shape, b.shape));
  if (!is_arithmetic(op.kind)) return one(std::move(shape), kBool);
  if (op.kind != BinaryKind::kDiv && a.dtype == kBool && b.dtype == kBool) {
    return c.error("both operands are bool; cast one to an integer or float dtype");
  }
  return one(std::move(shape), binary_compute_dtype(op.kind, a.dtype, b.dtype));
}

Result<Metas> infer_op(const BinaryScalar& op, const Ctx& c) {
  TW_RETURN_NOT_OK(check_binary_kind(op.kind, "binary_scalar"));
  TW_ASSIGN_OR_RETURN(TensorMeta a, c.input(op.a, "a"));
  TW_RETURN_NOT_OK(c.computable(a.dtype));
  if (!is_arithmetic(op.kind)) return one(std::move(a.shape), kBool);
  return one(std::move(a.shape), binary_scalar_compute_dtype(op.kind, a.dtype, op.s.is_float));
}

Result<Metas> infer_op(const Where& op, const Ctx& c) {
  TW_ASSIGN_OR_RETURN(TensorMeta cond, c.input(op.cond, "cond"));
  TW_ASSIGN_OR_RETURN(TensorMeta a, c.input(op.a, "a"));
  TW_ASSIGN_OR_RETURN(TensorMeta b, c.input(op.b, "b"));
  if (cond.dtype != kBool) return c.error("cond dtype " + dt(cond.dtype) + " must be bool");
  TW_RETURN_NOT_OK(c.computable(a.dtype));
  TW_RETURN_NOT_OK(c.computable(b.dtype));
  TW_ASSIGN_OR_RETURN(Shape ab, c.broadcast(a.shape, b.shape));
  TW_ASSIGN_OR_RETURN(Shape shape, c.broadcast(cond.shape, ab));
  return one(std::move(shape), promote(a.dtype, b.dtype));
}

Result<Metas> infer_op(const Clamp& op, const Ctx& c) {
  TW_ASSIGN_OR_RETURN(TensorMeta x, c.input(op.x, "x"));
  TW_RETURN_NOT_OK(c.numeric(x.dtype));
  return one(std::move(x));
}

Result<Metas> infer_op(const MaskedFill& op, const Ctx& c) {
  TW_ASSIGN_OR_RETURN(TensorMeta x, c.input(op.x, "x"));
  TW_ASSIGN_OR_RETURN(TensorMeta mask, c.input(op.mask, "mask"));
  TW_RETURN_NOT_OK(c.computable(x.dtype));
  if (mask.dtype != kBool) return c.error("mask dtype " + dt(mask.dtype) + " must be bool");
  Result<Shape> b = c.broadcast(x.shape, mask.shape);
  if (!b.ok() || *b != x.shape) {
    return c.error("mask shape " + shape_str(mask.shape) + " cannot be broadcast to x shape " +
                   shape_str(x.shape));
  }
  return one(std::move(x));
}

Result<Metas> infer_op(const Cast& op, const Ctx& c) {
  TW_RETURN_NOT_OK(c.dtype_attr(op.dtype));
  TW_ASSIGN_OR_RETURN(TensorMeta x, c.input(op.x, "x"));
  return one(std::move(x.shape), op.dtype);
}

// ================================ reductions ================================

Result<Metas> infer_op(const Reduce& op, const Ctx& c) {
  if (op.kind >= ReduceKind::kCount) {
    return invalid_argument("reduce: unknown kind code " +
                            num(int64_t{static_cast<uint8_t>(op.kind)}));
  }
  TW_ASSIGN_OR_RETURN(TensorMeta x, c.input(op.x, "x"));
  TW_RETURN_NOT_OK(c.computable(x.dtype));
  DType out_dtype = x.dtype;
  bool empty_is_error = false;
  switch (op.kind) {
    case ReduceKind::kSum:
    case ReduceKind::kProd: out_dtype = is_float(x.dtype) ? x.dtype : kI64; break;
    case ReduceKind::kMean: out_dtype = is_float(x.dtype) ? x.dtype : kF32; break;
    case ReduceKind::kMax:
    case ReduceKind::kMin: empty_is_error = true; break;
    case ReduceKind::kArgmax:
    case ReduceKind::kArgmin:
      if (op.dims.size() > 1) return c.error("expects at most one dim, got " + shape_str(op.dims));
      out_dtype = kI64;
      empty_is_error = true;
      break;
    case ReduceKind::kCount: return internal_error("reduce kind without a rule");
  }
  const int64_t rank = rank_of(x.shape);
  TW_ASSIGN_OR_RETURN(std::vector<int64_t> dims, c.distinct_dims(op.dims, rank));
  std::vector<bool> reduced(x.shape.size(), op.dims.empty());
  if (rank > 0) {
    for (int64_t d : dims) reduced[static_cast<size_t>(d)] = true;
  }
  Shape out;
  for (size_t d = 0; d < x.shape.size(); ++d) {
    if (reduced[d] && empty_is_error && x.shape[d] == 0) {
      return c.error("cannot reduce over dim " + num(static_cast<int64_t>(d)) + " of size 0 in " +
                     shape_str(x.shape));
    }
    if (!reduced[d]) {
      out.push_back(x.shape[d]);
    } else if (op.keepdim) {
      out.push_back(1);
    }
  }
  return one(std::move(out), out_dtype);
}

Result<Metas> infer_op(const Cumsum& op, const Ctx& c) {
  TW_ASSIGN_OR_RETURN(TensorMeta x, c.input(op.x, "x"));
  TW_RETURN_NOT_OK(c.computable(x.dtype));
  TW_RETURN_NOT_OK(c.dim(op.dim, rank_of(x.shape)).status());
  return one(std::move(x.shape), is_float(x.dtype) ? x.dtype : kI64);
}

// ================================ linear algebra ================================

Result<Metas> infer_op(const MatMul& op, const Ctx& c) {
  TW_ASSIGN_OR_RETURN(TensorMeta a, c.input(op.a, "a"));
  TW_ASSIGN_OR_RETURN(TensorMeta b, c.input(op.b, "b"));
  const std::string shapes = shape_str(a.shape) + " x " + shape_str(b.shape);
  if (a.shape.size() < 2 || b.shape.size() < 2) {
    return c.error("expects tensors of rank >= 2, got " + shapes);
  }
  if (a.dtype != b.dtype) return c.error("dtypes differ: " + dt(a.dtype) + " x " + dt(b.dtype));
  // bf16 x bf16 computes: products of bf16 values summed in f32, an f32 result (docs/ops.md).
  const bool bf16 = a.dtype == kBF16;
  if (!bf16) TW_RETURN_NOT_OK(c.computable(a.dtype));
  if (!bf16 && a.dtype != kF32 && a.dtype != kF64 && a.dtype != kI32 && a.dtype != kI64) {
    return c.error("dtype " + dt(a.dtype) +
                   " is not supported (expected f32, f64, i32, i64, or bf16 with an f32 result)");
  }
  const size_t ra = a.shape.size(), rb = b.shape.size();
  if (a.shape[ra - 1] != b.shape[rb - 2]) return c.error("inner dimensions differ: " + shapes);
  const Shape batch_a(a.shape.begin(), a.shape.end() - 2);
  const Shape batch_b(b.shape.begin(), b.shape.end() - 2);
  Result<Shape> batch = c.broadcast(batch_a, batch_b);
  if (!batch.ok()) {
    return c.error("batch dimensions " + shape_str(batch_a) + " and " + shape_str(batch_b) +
                   " of " + shapes + " cannot be broadcast");
  }
  Shape out = std::move(batch).value();
  out.push_back(a.shape[ra - 2]);
  out.push_back(b.shape[rb - 1]);
  return one(std::move(out), bf16 ? kF32 : a.dtype);
}

// ================================ movement ================================

Result<Metas> infer_op(const Reshape& op, const Ctx& c) {
  TW_ASSIGN_OR_RETURN(TensorMeta x, c.input(op.x, "x"));
  std::optional<size_t> inferred;
  Shape known = op.shape;  // the -1 replaced by 1, so that it can be validated and multiplied
  for (size_t i = 0; i < known.size(); ++i) {
    if (known[i] == -1) {
      if (inferred) return c.error("at most one -1 is allowed in " + shape_str(op.shape));
      inferred = i;
      known[i] = 1;
    } else if (known[i] < 0) {
      return c.error("invalid size " + num(known[i]) + " in " + shape_str(op.shape));
    }
  }
  TW_RETURN_NOT_OK(c.shape_attr(known));
  const int64_t have = numel(x.shape), want = numel(known);
  const std::string from =
      "cannot reshape " + shape_str(x.shape) + " (" + num(have) + " elements) into ";
  if (!inferred) {
    if (have != want) return c.error(from + shape_str(op.shape) + " (" + num(want) + " elements)");
    return one(op.shape, x.dtype);
  }
  if (want == 0) return c.error(from + shape_str(op.shape) + ": the -1 could be any size");
  if (have % want != 0) return c.error(from + shape_str(op.shape));
  known[*inferred] = have / want;
  return one(std::move(known), x.dtype);
}

Result<Metas> infer_op(const Permute& op, const Ctx& c) {
  TW_ASSIGN_OR_RETURN(TensorMeta x, c.input(op.x, "x"));
  if (op.dims.size() != x.shape.size()) {
    return c.error("dims " + shape_str(op.dims) + " must name each of the " +
                   num(rank_of(x.shape)) + " dims of " + shape_str(x.shape) + " once");
  }
  TW_ASSIGN_OR_RETURN(std::vector<int64_t> dims, c.distinct_dims(op.dims, rank_of(x.shape)));
  Shape out(x.shape.size());
  for (size_t i = 0; i < dims.size(); ++i) out[i] = x.shape[static_cast<size_t>(dims[i])];
  return one(std::move(out), x.dtype);
}

Result<Metas> infer_op(const Expand& op, const Ctx& c) {
  TW_ASSIGN_OR_RETURN(TensorMeta x, c.input(op.x, "x"));
  if (op.shape.size() < x.shape.size()) {
    return c.error("cannot expand " + shape_str(x.shape) + " to fewer dims " + shape_str(op.shape));
  }
  const size_t lead = op.shape.size() - x.shape.size();
  Shape out(op.shape.size());
  for (size_t i = 0; i < op.shape.size(); ++i) {
    const int64_t s = op.shape[i];
    if (s < -1 || (s == -1 && i < lead)) {
      return c.error("invalid size " + num(s) + " at dim " + num(static_cast<int64_t>(i)) + " of " +
                     shape_str(op.shape) + (s == -1 ? " (a new leading dim)" : ""));
    }
    if (i < lead) {
      out[i] = s;
      continue;
    }
    const int64_t have = x.shape[i - lead];
    if (s == -1 || s == have) {
      out[i] = have;
    } else if (have == 1) {
      out[i] = s;
    } else {
      return c.error("cannot expand " + shape_str(x.shape) + " to " + shape_str(op.shape) +
                     ": dim " + num(static_cast<int64_t>(i - lead)) + " has size " + num(have) +
                     ", and only a size-1 dim can change");
    }
  }
  return one(std::move(out), x.dtype);
}

Result<Metas> infer_op(const Slice& op, const Ctx& c) {
  TW_ASSIGN_OR_RETURN(TensorMeta x, c.input(op.x, "x"));
  TW_ASSIGN_OR_RETURN(Shape out, sliced_shape(c, x.shape, op.starts, op.ends, op.steps));
  return one(std::move(out), x.dtype);
}

Result<Metas> infer_op(const SliceAssign& op, const Ctx& c) {
  TW_ASSIGN_OR_RETURN(TensorMeta x, c.input(op.x, "x"));
  TW_ASSIGN_OR_RETURN(TensorMeta src, c.input(op.src, "src"));
  if (src.dtype != x.dtype) {
    return c.error("src dtype " + dt(src.dtype) + " differs from x dtype " + dt(x.dtype));
  }
  TW_ASSIGN_OR_RETURN(Shape region, sliced_shape(c, x.shape, op.starts, op.ends, op.steps));
  Result<Shape> b = c.broadcast(region, src.shape);
  if (!b.ok() || *b != region) {
    return c.error("src shape " + shape_str(src.shape) + " cannot be broadcast to the slice " +
                   shape_str(region) + " of " + shape_str(x.shape));
  }
  return one(std::move(x));
}

Result<Metas> infer_op(const Cat& op, const Ctx& c) {
  if (op.xs.empty()) return c.error("expects at least one tensor");
  std::vector<TensorMeta> xs;
  xs.reserve(op.xs.size());
  for (size_t i = 0; i < op.xs.size(); ++i) {
    TW_ASSIGN_OR_RETURN(TensorMeta m, c.input(op.xs[i], "xs[" + std::to_string(i) + "]"));
    xs.push_back(std::move(m));
  }
  const TensorMeta& first = xs[0];
  if (first.shape.empty()) return c.error("cannot concatenate 0-d tensors");
  TW_ASSIGN_OR_RETURN(int64_t dim, c.dim(op.dim, rank_of(first.shape)));
  Shape out = first.shape;
  out[static_cast<size_t>(dim)] = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const TensorMeta& m = xs[i];
    const std::string which = "xs[" + std::to_string(i) + "] ";
    if (m.dtype != first.dtype) {
      return c.error(which + "has dtype " + dt(m.dtype) + " but xs[0] has " + dt(first.dtype));
    }
    bool match = m.shape.size() == first.shape.size();
    for (size_t d = 0; match && d < m.shape.size(); ++d) {
      match = d == static_cast<size_t>(dim) || m.shape[d] == first.shape[d];
    }
    if (!match) {
      return c.error(which + "has shape " + shape_str(m.shape) + " but xs[0] has " +
                     shape_str(first.shape) + " (sizes must match except in dim " + num(dim) + ")");
    }
    // Each size is <= 2^48 but there may be very many inputs: stop before the sum can overflow.
    int64_t& total = out[static_cast<size_t>(dim)];
    total += m.shape[static_cast<size_t>(dim)];
    if (total > kMaxNumel) {
      return c.error("concatenated size along dim " + num(dim) + " exceeds 2^48");
    }
  }
  return one(std::move(out), first.dtype);
}

Result<Metas> infer_op(const Flip& op, const Ctx& c) {
  TW_ASSIGN_OR_RETURN(TensorMeta x, c.input(op.x, "x"));
  TW_RETURN_NOT_OK(c.distinct_dims(op.dims, rank_of(x.shape)).status());
  return one(std::move(x));
}

Result<Metas> infer_op(const Repeat& op, const Ctx& c) {
  TW_ASSIGN_OR_RETURN(TensorMeta x, c.input(op.x, "x"));
  if (op.repeats.size() < x.shape.size()) {
    return c.error("repeats " + shape_str(op.repeats) +
                   " must have at least one entry per dim of " + shape_str(x.shape));
  }
  TW_RETURN_NOT_OK(c.at_least(op.repeats, 0, "repeats"));
  if (rank_of(op.repeats) > kMaxRank) {
    return c.error("repeats " + shape_str(op.repeats) + " exceed the maximum rank of " +
                   num(kMaxRank));
  }
  const size_t lead = op.repeats.size() - x.shape.size();
  Shape out(op.repeats.size());
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t size = i < lead ? 1 : x.shape[i - lead];
    if (__builtin_mul_overflow(size, op.repeats[i], &out[i]) || out[i] > kMaxNumel) {
      return c.error("repeating " + shape_str(x.shape) + " by " + shape_str(op.repeats) +
                     " gives more than 2^48 elements");
    }
  }
  return one(std::move(out), x.dtype);
}

// ================================ indexing ================================

Result<Metas> infer_op(const Gather& op, const Ctx& c) {
  TW_ASSIGN_OR_RETURN(TensorMeta x, c.input(op.x, "x"));
  TW_ASSIGN_OR_RETURN(TensorMeta index, c.input(op.index, "index"));
  TW_RETURN_NOT_OK(c.index_dtype(index.dtype, "index"));
  if (index.shape.size() != x.shape.size()) {
    return c.error("index " + shape_str(index.shape) + " must have the rank of x " +
                   shape_str(x.shape));
  }
  TW_ASSIGN_OR_RETURN(int64_t dim, c.dim(op.dim, rank_of(x.shape)));
  for (size_t d = 0; d < x.shape.size(); ++d) {
    if (d != static_cast<size_t>(dim) && index.shape[d] > x.shape[d]) {
      return c.error("index " + shape_str(index.shape) + " is larger than x " + shape_str(x.shape) +
                     " in dim " + num(static_cast<int64_t>(d)));
    }
  }
  return one(std::move(index.shape), x.dtype);
}

Result<Metas> infer_op(const ScatterAdd& op, const Ctx& c) {
  TW_ASSIGN_OR_RETURN(TensorMeta x, c.input(op.x, "x"));
  TW_ASSIGN_OR_RETURN(TensorMeta index, c.input(op.index, "index"));
  TW_ASSIGN_OR_RETURN(TensorMeta src, c.input(op.src, "src"));
  TW_RETURN_NOT_OK(c.numeric(x.dtype));
  if (src.dtype != x.dtype) {
    return c.error("src dtype " + dt(src.dtype) + " differs from x dtype " + dt(x.dtype));
  }
  TW_RETURN_NOT_OK(c.index_dtype(index.dtype, "index"));
  if (index.shape.size() != x.shape.size() || src.shape.size() != x.shape.size()) {
    return c.error("x " + shape_str(x.shape) + ", index " + shape_str(index.shape) + " and src " +
                   shape_str(src.shape) + " must have the same rank");
  }
  TW_ASSIGN_OR_RETURN(int64_t dim, c.dim(op.dim, rank_of(x.shape)));
  for (size_t d = 0; d < x.shape.size(); ++d) {
    if (index.shape[d] > src.shape[d] ||
        (d != static_cast<size_t>(dim) && index.shape[d] > x.shape[d])) {
      return c.error("index " + shape_str(index.shape) + " is larger than src " +
                     shape_str(src.shape) + " or x " + shape_str(x.shape) + " in dim " +
                     num(static_cast<int64_t>(d)));
    }
  }
  return one(std::move(x));
}

Result<Metas> infer_op(const IndexSelect& op, const Ctx& c) {
  TW_ASSIGN_OR_RETURN(TensorMeta x, c.input(op.x, "x"));
  TW_ASSIGN_OR_RETURN(TensorMeta index, c.input(op.index, "index"));
  TW_RETURN_NOT_OK(c.index_dtype(index.dtype, "index"));
  if (index.shape.size() != 1) return c.error("index must be 1-D, got " + shape_str(index.shape));
  TW_ASSIGN_OR_RETURN(int64_t dim, c.dim(op.dim, rank_of(x.shape)));
  if (x.shape.empty()) {
    // As in PyTorch: a 0-d x is selected from with exactly one index and stays 0-d.
    if (index.shape[0] != 1) {
      return c.error("a 0-d x takes an index of exactly one element, got " +
                     shape_str(index.shape));
    }
    return one(std::move(x));
  }
  Shape out = x.shape;
  out[static_cast<size_t>(dim)] = index.shape[0];
  return one(std::move(out), x.dtype);
}

Result<Metas> infer_op(const OneHot& op, const Ctx& c) {
  TW_ASSIGN_OR_RETURN(TensorMeta x, c.input(op.x, "x"));
  if (x.dtype != kI32 && x.dtype != kI64 && x.dtype != kU8) {
    return c.error("dtype " + dt(x.dtype) + " is not supported (expected i32, i64 or u8)");
  }
  if (op.num_classes < 1) return c.error("num_classes " + num(op.num_classes) + " must be >= 1");
  Shape out = x.shape;
  out.push_back(op.num_classes);  // rank and size are checked with every output shape
  return one(std::move(out), kI64);
}

// ================================ neural ================================

Result<Metas> infer_op(const Softmax& op, const Ctx& c) {
  TW_ASSIGN_OR_RETURN(TensorMeta x, c.input(op.x, "x"));
  TW_RETURN_NOT_OK(c.floating(x.dtype));
  TW_RETURN_NOT_OK(c.dim(op.dim, rank_of(x.shape)).status());
  return one(std::move(x));
}

Result<Metas> infer_op(const Conv2d& op, const Ctx& c) {
  TW_ASSIGN_OR_RETURN(TensorMeta x, c.input(op.x, "x"));
  TW_ASSIGN_OR_RETURN(TensorMeta w, c.input(op.w, "w"));
  TW_ASSIGN_OR_RETURN(std::optional<TensorMeta> bias, c.optional_input(op.bias, "bias"));
  if (x.shape.size() != 4) return c.error("x must be 4-D [N, C, H, W], got " + shape_str(x.shape));
  if (w.shape.size() != 4) {
    return c.error("w must be 4-D [O, C/groups, kH, kW], got " + shape_str(w.shape));
  }
  TW_RETURN_NOT_OK(c.floating(x.dtype));
  if (w.dtype != x.dtype) {
    return c.error("w dtype " + dt(w.dtype) + " differs from x dtype " + dt(x.dtype));
  }
  TW_RETURN_NOT_OK(c.entries(op.stride, 2, "stride"));
  TW_RETURN_NOT_OK(c.entries(op.padding, 2, "padding"));
  TW_RETURN_NOT_OK(c.entries(op.dilation, 2, "dilation"));
  TW_RETURN_NOT_OK(c.at_least(op.stride, 1, "stride"));
  TW_RETURN_NOT_OK(c.at_least(op.padding, 0, "padding"));
  TW_RETURN_NOT_OK(c.at_least(op.dilation, 1, "dilation"));
  const int64_t n = x.shape[0], ch = x.shape[1], o = w.shape[0];
  if (op.groups < 1) return c.error("groups " + num(op.groups) + " must be >= 1");
  if (ch % op.groups != 0 || o % op.groups != 0) {
    return c.error("groups " + num(op.groups) + " must divide the input channels " + num(ch) +
                   " and the output channels " + num(o));
  }
  if (w.shape[1] != ch / op.groups) {
    return c.error("w " + shape_str(w.shape) + " must have " + num(ch / op.groups) +
                   " input channels per group for x " + shape_str(x.shape) + " and groups " +
                   num(op.groups));
  }
  if (w.shape[2] < 1 || w.shape[3] < 1) {
    return c.error("kernel size of w " + shape_str(w.shape) + " must be >= 1");
  }
  if (bias) {
    if (bias->shape != Shape{o}) {
      return c.error("bias must have shape [" + num(o) + "], got " + shape_str(bias->shape));
    }
    if (bias->dtype != x.dtype) {
      return c.error("bias dtype " + dt(bias->dtype) + " differs from x dtype " + dt(x.dtype));
    }
  }
  Shape out{n, o, 0, 0};
  for (size_t i = 0; i < 2; ++i) {
    out[2 + i] = window_out_size(x.shape[2 + i], w.shape[2 + i], op.stride[i], op.padding[i],
                                 op.dilation[i]);
  }
  if (out[2] < 1 || out[3] < 1) {
    return c.error("output size [" + num(out[2]) + ", " + num(out[3]) + "] must be >= 1 (x " +
                   shape_str(x.shape) + ", w " + shape_str(w.shape) + ", stride " +
                   shape_str(op.stride) + ", padding " + shape_str(op.padding) + ", dilation " +
                   shape_str(op.dilation) + ")");
  }
  return one(std::move(out), x.dtype);
}

Result<Metas> infer_op(const Pool2d& op, const Ctx& c) {
  if (op.kind >= PoolKind::kCount) {
    return invalid_argument("pool2d: unknown kind code " +
                            num(int64_t{static_cast<uint8_t>(op.kind)}));
  }
  TW_ASSIGN_OR_RETURN(TensorMeta x, c.input(op.x, "x"));
  if (x.shape.size() != 4) return c.error("x must be 4-D [N, C, H, W], got " + shape_str(x.shape));
  TW_RETURN_NOT_OK(c.floating(x.dtype));
  TW_RETURN_NOT_OK(c.entries(op.kernel, 2, "kernel"));
  TW_RETURN_NOT_OK(c.entries(op.stride, 2, "stride"));
  TW_RETURN_NOT_OK(c.entries(op.padding, 2, "padding"));
  TW_RETURN_NOT_OK(c.at_least(op.kernel, 1, "kernel"));
  TW_RETURN_NOT_OK(c.at_least(op.stride, 1, "stride"));
  TW_RETURN_NOT_OK(c.at_least(op.padding, 0, "padding"));
  for (size_t i = 0; i < 2; ++i) {
    if (op.padding[i] > op.kernel[i] / 2) {
      return c.error("padding " + shape_str(op.padding) + " must be at most half the kernel " +
                     shape_str(op.kernel));
    }
  }
  Shape out{x.shape[0], x.shape[1], 0, 0};
  for (size_t i = 0; i < 2; ++i) {
    out[2 + i] = window_out_size(x.shape[2 + i], op.kernel[i], op.stride[i], op.padding[i], 1);
  }
  if (out[2] < 1 || out[3] < 1) {
    return c.error("output size [" + num(out[2]) + ", " + num(out[3]) + "] must be >= 1 (x " +
                   shape_str(x.shape) + ", kernel " + shape_str(op.kernel) + ", stride " +
                   shape_str(op.stride) + ", padding " + shape_str(op.padding) + ")");
  }
  return one(std::move(out), x.dtype);
}

Result<Metas> infer_op(const AdaptiveAvgPool2d& op, const Ctx& c) {
  TW_ASSIGN_OR_RETURN(TensorMeta x, c.input(op.x, "x"));
  if (x.shape.size() != 4) return c.error("x must be 4-D [N, C, H, W], got " + shape_str(x.shape));
  TW_RETURN_NOT_OK(c.floating(x.dtype));
  TW_RETURN_NOT_OK(c.entries(op.output_size, 2, "output_size"));
  TW_RETURN_NOT_OK(c.at_least(op.output_size, 1, "output_size"));
  // An empty bin would average nothing; PyTorch rejects empty spatial input too.
  if (x.shape[2] < 1 || x.shape[3] < 1) {
    return c.error("x " + shape_str(x.shape) + " must have H and W >= 1");
  }
  return one({x.shape[0], x.shape[1], op.output_size[0], op.output_size[1]}, x.dtype);
}

// LayerNorm's rules, shared with its gradient: x float, normalized_dims in 1..rank, eps finite
// and >= 0, weight and bias (when given) of the normalized shape and x's dtype.
Status check_layer_norm(const Ctx& c, const TensorMeta& x, const std::optional<TensorMeta>& weight,
                        const std::optional<TensorMeta>& bias, int64_t normalized_dims,
                        double eps) {
  TW_RETURN_NOT_OK(c.floating(x.dtype));
  const int64_t rank = rank_of(x.shape);
  if (normalized_dims < 1 || normalized_dims > rank) {
    return c.error("normalized_dims " + num(normalized_dims) + " out of range for x " +
                   shape_str(x.shape) + " (expected 1.." + num(rank) + ")");
  }
  if (!(eps >= 0) || !std::isfinite(eps)) {
    return c.error("eps " + num(eps) + " must be finite and >= 0");
  }
  const Shape normalized(x.shape.end() - normalized_dims, x.shape.end());
  const std::pair<const char*, const std::optional<TensorMeta>*> params[] = {{"weight", &weight},
                                                                             {"bias", &bias}};
  for (const auto& [what, m] : params) {
    if (!*m) continue;
    if ((*m)->shape != normalized) {
      return c.error(std::string(what) + " shape " + shape_str((*m)->shape) +
                     " must equal the normalized shape " + shape_str(normalized) + " of x " +
                     shape_str(x.shape));
    }
    if ((*m)->dtype != x.dtype) {
      return c.error(std::string(what) + " dtype " + dt((*m)->dtype) + " differs from x dtype " +
                     dt(x.dtype));
    }
  }
  return Status::OK();
}

Result<Metas> infer_op(const LayerNorm& op, const Ctx& c) {
  TW_ASSIGN_OR_RETURN(TensorMeta x, c.input(op.x, "x"));
  TW_ASSIGN_OR_RETURN(std::optional<TensorMeta> weight, c.optional_input(op.weight, "weight"));
  TW_ASSIGN_OR_RETURN(std::optional<TensorMeta> bias, c.optional_input(op.bias, "bias"));
  TW_RETURN_NOT_OK(check_layer_norm(c, x, weight, bias, op.normalized_dims, op.eps));
  return one(std::move(x));
}

// Gradient ops: defined in their own block at the end of this file.
// ================================ quantization ================================

// The scale (and zero point) of Quantize/Dequantize against x: per tensor (0-d or [1]), per
// channel along axis (block 0: [x.shape[axis]]) or per block along axis (block > 0: x's shape
// with dim axis ceil(size / block)); a zero point has the scale's shape and `zp_dtype`.
Status check_quant_params(const Ctx& c, const TensorMeta& x, const TensorMeta& scale,
                          const std::optional<TensorMeta>& zp, int64_t axis, int64_t block,
                          DType zp_dtype) {
  if (scale.dtype != kF32) return c.error("scale " + meta_str(scale) + " must be f32");
  if (zp && (zp->shape != scale.shape || zp->dtype != zp_dtype)) {
    return c.error("zero_point " + meta_str(*zp) + " must have the scale's shape " +
                   shape_str(scale.shape) + " and dtype " + dt(zp_dtype));
  }
  if (block < 0) return c.error("block " + num(block) + " must be >= 0");
  const bool per_tensor = numel(scale.shape) == 1 && scale.shape.size() <= 1 && block == 0;
  if (per_tensor) return Status::OK();
  if (x.shape.empty()) {
    return c.error("a 0-d x takes one scale (0-d or [1], block 0), got scale " +
                   shape_str(scale.shape) + " and block " + num(block));
  }
  TW_ASSIGN_OR_RETURN(int64_t a, c.dim(axis, rank_of(x.shape)));
  if (block == 0) {
    if (scale.shape != Shape{x.shape[a]}) {
      return c.error("per-channel scale " + shape_str(scale.shape) + " must be [" +
                     num(x.shape[a]) + "] (dim " + num(a) + " of x " + shape_str(x.shape) +
                     "), or 0-d for one scale");
    }
    return Status::OK();
  }
  Shape want = x.shape;
  want[a] = x.shape[a] == 0 ? 0 : (x.shape[a] - 1) / block + 1;  // ceil, without overflow
  if (scale.shape != want) {
    return c.error("per-block scale " + shape_str(scale.shape) + " must be " + shape_str(want) +
                   " (x " + shape_str(x.shape) + " in blocks of " + num(block) + " along dim " +
                   num(a) + ")");
  }
  return Status::OK();
}

Result<Metas> infer_op(const Quantize& op, const Ctx& c) {
  TW_RETURN_NOT_OK(c.dtype_attr(op.dtype));
  TW_ASSIGN_OR_RETURN(TensorMeta x, c.input(op.x, "x"));
  TW_ASSIGN_OR_RETURN(TensorMeta scale, c.input(op.scale, "scale"));
  TW_ASSIGN_OR_RETURN(std::optional<TensorMeta> zp, c.optional_input(op.zero_point, "zero_point"));
  if (x.dtype != kF32) return c.error("x " + meta_str(x) + " must be f32");
  if (op.dtype != kI8 && op.dtype != kU8) {
    return c.error("dtype " + dt(op.dtype) + " is not supported (expected i8 or u8)");
  }
  TW_RETURN_NOT_OK(check_quant_params(c, x, scale, zp, op.axis, op.block, op.dtype));
  return one(x.shape, op.dtype);
}

Result<Metas> infer_op(const Dequantize& op, const Ctx& c) {
  TW_ASSIGN_OR_RETURN(TensorMeta x, c.input(op.x, "x"));
  TW_ASSIGN_OR_RETURN(TensorMeta scale, c.input(op.scale, "scale"));
  TW_ASSIGN_OR_RETURN(std::optional<TensorMeta> zp, c.optional_input(op.zero_point, "zero_point"));
  if (x.dtype != kI8 && x.dtype != kU8 && x.dtype != kI32) {
    return c.error("x " + meta_str(x) + " must be i8, u8 or i32");
  }
  TW_RETURN_NOT_OK(check_quant_params(c, x, scale, zp, op.axis, op.block, x.dtype));
  return one(x.shape, kF32);
}

Status check_block_format(const Ctx& c, BlockFormat f) {
  if (f >= BlockFormat::kCount) {
    return c.error("unknown block format " + num(int64_t{static_cast<uint8_t>(f)}));
  }
  return Status::OK();
}

// The packed width of rows of k values, or an error when k is not whole blocks.
Result<int64_t> packed_width(const Ctx& c, const std::string& what, const Shape& shape,
                             BlockFormat f) {
  if (shape.empty()) return c.error(what + " must have at least one dim, got 0-d");
  const int64_t k = shape.back();
  if (k % kQuantBlock != 0) {
    return c.error(what + " " + shape_str(shape) + ": the last dim " + num(k) +
                   " must be a multiple of " + num(kQuantBlock) + " (whole " +
                   std::string(block_format_name(f)) + " blocks)");
  }
  return k / kQuantBlock * block_bytes(f);
}

// The logical width of packed rows of `bytes` bytes, or an error when not whole blocks.
Result<int64_t> unpacked_width(const Ctx& c, const std::string& what, const TensorMeta& w,
                               BlockFormat f) {
  if (w.dtype != kU8) return c.error(what + " " + meta_str(w) + " must be u8 (packed blocks)");
  if (w.shape.empty()) return c.error(what + " must have at least one dim, got 0-d");
  const int64_t bytes = w.shape.back(), bb = block_bytes(f);
  if (bytes % bb != 0) {
    return c.error(what + " " + shape_str(w.shape) + ": the last dim " + num(bytes) +
                   " is not whole " + std::string(block_format_name(f)) + " blocks of " + num(bb) +
                   " bytes");
  }
  return bytes / bb * kQuantBlock;
}

Result<Metas> infer_op(const PackBlocks& op, const Ctx& c) {
  TW_RETURN_NOT_OK(check_block_format(c, op.format));
  TW_ASSIGN_OR_RETURN(TensorMeta x, c.input(op.x, "x"));
  if (x.dtype != kF32) return c.error("x " + meta_str(x) + " must be f32");
  TW_ASSIGN_OR_RETURN(int64_t width, packed_width(c, "x", x.shape, op.format));
  Shape out = x.shape;
  out.back() = width;
  return one(out, kU8);
}

Result<Metas> infer_op(const UnpackBlocks& op, const Ctx& c) {
  TW_RETURN_NOT_OK(check_block_format(c, op.format));
  TW_ASSIGN_OR_RETURN(TensorMeta x, c.input(op.x, "x"));
  TW_ASSIGN_OR_RETURN(int64_t width, unpacked_width(c, "x", x, op.format));
  Shape out = x.shape;
  out.back() = width;
  return one(out, kF32);
}

// x [N, K] f32 against rows of M outputs taking k features; bias [M] f32 or absent.
Result<Metas> check_linear_rows(const Ctx& c, const TensorMeta& x, const Shape& w, int64_t k,
                                const std::optional<TensorMeta>& bias) {
  if (x.dtype != kF32) return c.error("x " + meta_str(x) + " must be f32");
  if (x.shape.size() != 2 || w.size() != 2) {
    return c.error("x must be [N, in] and w 2-d, got " + shape_str(x.shape) + " and " +
                   shape_str(w));
  }
  if (x.shape[1] != k) {
    return c.error("x " + shape_str(x.shape) + " has " + num(x.shape[1]) + " features but w " +
                   shape_str(w) + " takes " + num(k));
  }
  if (bias && (bias->dtype != kF32 || bias->shape != Shape{w[0]})) {
    return c.error("bias " + meta_str(*bias) + " must be f32[" + num(w[0]) + "]");
  }
  return one({x.shape[0], w[0]}, kF32);
}

Result<Metas> infer_op(const LinearBlocks& op, const Ctx& c) {
  TW_RETURN_NOT_OK(check_block_format(c, op.format));
  TW_ASSIGN_OR_RETURN(TensorMeta x, c.input(op.x, "x"));
  TW_ASSIGN_OR_RETURN(TensorMeta w, c.input(op.w, "w"));
  TW_ASSIGN_OR_RETURN(std::optional<TensorMeta> bias, c.optional_input(op.bias, "bias"));
  TW_ASSIGN_OR_RETURN(int64_t k, unpacked_width(c, "w", w, op.format));
  return check_linear_rows(c, x, w.shape, k, bias);
}

Result<Metas> infer_op(const LinearInt8& op, const Ctx& c) {
  TW_ASSIGN_OR_RETURN(TensorMeta x, c.input(op.x, "x"));
  TW_ASSIGN_OR_RETURN(TensorMeta w, c.input(op.w, "w"));
  TW_ASSIGN_OR_RETURN(TensorMeta ws, c.input(op.w_scale, "w_scale"));
  TW_ASSIGN_OR_RETURN(std::optional<TensorMeta> bias, c.optional_input(op.bias, "bias"));
  if (w.dtype != kI8 || w.shape.size() != 2) {
    return c.error("w " + meta_str(w) + " must be i8 [out, in]");
  }
  if (ws.dtype != kF32 || ws.shape != Shape{w.shape[0]}) {
    return c.error("w_scale " + meta_str(ws) + " must be f32[" + num(w.shape[0]) + "]");
  }
  return check_linear_rows(c, x, w.shape, w.shape[1], bias);
}

Result<Metas> infer_op(const Conv2dBackwardInput& op, const Ctx& c);
Result<Metas> infer_op(const Conv2dBackwardWeight& op, const Ctx& c);
Result<Metas> infer_op(const Pool2dBackward& op, const Ctx& c);
Result<Metas> infer_op(const AdaptiveAvgPool2dBackward& op, const Ctx& c);
Result<Metas> infer_op(const AdamStep& op, const Ctx& c);
Result<Metas> infer_op(const Linear& op, const Ctx& c);
Result<Metas> infer_op(const ScaledDotProductAttention& op, const Ctx& c);
Result<Metas> infer_op(const ScaledDotProductAttentionBackward& op, const Ctx& c);
Result<Metas> infer_op(const IndexSelectBackward& op, const Ctx& c);
Result<Metas> infer_op(const LayerNormBackward& op, const Ctx& c);
Result<Metas> infer_op(const GeluBackward& op, const Ctx& c);

}  // namespace

Result<std::vector<TensorMeta>> infer(const Op& op, const MetaLookup& lookup) {
  if (std::holds_alternative<std::monostate>(op)) return invalid_argument("empty op");
  const Ctx c(lookup, op);
  Result<Metas> metas = std::visit(
      [&](const auto& o) -> Result<Metas> {
        if constexpr (std::is_same_v<std::decay_t<decltype(o)>, std::monostate>) {
          return invalid_argument("empty op");
        } else {
          return infer_op(o, c);  // no overload for a new op: a compile error, by design
        }
      },
      op);
  if (!metas.ok()) return metas.status();
  // Per-op rules bound their arithmetic; this catches every output that is too large or deep.
  for (const TensorMeta& m : *metas) {
    Status st = validate_shape(m.shape);
    if (!st.ok()) return invalid_argument(c.name() + ": output " + st.message());
  }
  return metas;
}

Result<SliceDim> normalize_slice(int64_t start, int64_t end, int64_t step, int64_t dim_size) {
  if (step < 1) return invalid_argument("step " + num(step) + " must be >= 1");
  if (dim_size < 0) return invalid_argument("negative dim size " + num(dim_size));
  // Python: a negative bound counts from the end, then both clamp to [0, size]. dim_size is at
  // most 2^48, so adding it to any int64 below 0 cannot overflow.
  auto clamp = [dim_size](int64_t v) {
    if (v < 0) v += dim_size;
    return std::clamp<int64_t>(v, 0, dim_size);
  };
  const int64_t s = clamp(start), e = clamp(end);
  // ceil((e - s) / step) written so that a huge step cannot overflow.
  const int64_t size = e > s ? (e - s - 1) / step + 1 : 0;
  return SliceDim{s, size, step};
}

DType binary_compute_dtype(BinaryKind kind, DType a, DType b) {
  const DType p = promote(a, b);
  return kind == BinaryKind::kDiv && !is_float(p) ? kF32 : p;
}

DType binary_scalar_compute_dtype(BinaryKind kind, DType tensor, bool scalar_is_float) {
  const bool logical = kind == BinaryKind::kLogicalAnd || kind == BinaryKind::kLogicalOr ||
                       kind == BinaryKind::kLogicalXor;
  DType d = tensor;
  if (scalar_is_float && !is_float(tensor)) {
    d = kF32;
  } else if (!scalar_is_float && tensor == kBool && !logical) {
    d = kI64;
  }
  return kind == BinaryKind::kDiv && !is_float(d) ? kF32 : d;
}

int64_t window_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding,
                        int64_t dilation) {
  // Attributes come from peers: compute in 128 bits (each term is below 2^127) and saturate,
  // so callers can simply require >= 1 and let validate_shape reject huge results.
  if (stride < 1) return 0;  // callers reject such strides; never divide by zero
  using Wide = __int128;
  const Wide span = Wide{in} + 2 * Wide{padding} - Wide{dilation} * (Wide{kernel} - 1) - 1;
  Wide q = span / stride;
  if (span % stride != 0 && span < 0) --q;  // floor, not truncation toward zero
  const Wide out = q + 1;
  constexpr int64_t kLo = std::numeric_limits<int64_t>::min();
  constexpr int64_t kHi = std::numeric_limits<int64_t>::max();
  if (out < kLo) return kLo;
  if (out > kHi) return kHi;
  return static_cast<int64_t>(out);
}

}  // namespace tw::ir

// ================================ gradients ================================
// The backward kernels autograd (src/api/autograd.cc) emits where composing other ops would be
// slow. Each checks that its shapes are those of a forward op autograd could have recorded.

namespace tw::ir {
namespace {

// The geometry shared by Conv2d and its two gradients: x [N, C, H, W], w [O, C/groups, kH, kW]
// and grad [N, O, Ho, Wo] with Ho, Wo what Conv2d would produce.
Status check_conv_grad(const Ctx& c, const Shape& x, const Shape& w, const TensorMeta& grad,
                       const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                       const std::vector<int64_t>& dilation, int64_t groups) {
  if (x.size() != 4) return c.error("x shape must be 4-D [N, C, H, W], got " + shape_str(x));
  if (w.size() != 4)
    return c.error("w shape must be 4-D [O, C/groups, kH, kW], got " + shape_str(w));
  TW_RETURN_NOT_OK(c.shape_attr(x));
  TW_RETURN_NOT_OK(c.shape_attr(w));
  TW_RETURN_NOT_OK(c.floating(grad.dtype));
  TW_RETURN_NOT_OK(c.entries(stride, 2, "stride"));
  TW_RETURN_NOT_OK(c.entries(padding, 2, "padding"));
  TW_RETURN_NOT_OK(c.entries(dilation, 2, "dilation"));
  TW_RETURN_NOT_OK(c.at_least(stride, 1, "stride"));
  TW_RETURN_NOT_OK(c.at_least(padding, 0, "padding"));
  TW_RETURN_NOT_OK(c.at_least(dilation, 1, "dilation"));
  if (groups < 1 || x[1] % groups != 0 || w[0] % groups != 0 || w[1] != x[1] / groups) {
    return c.error("groups " + num(groups) + " does not fit x " + shape_str(x) + " and w " +
                   shape_str(w));
  }
  if (w[2] < 1 || w[3] < 1) return c.error("kernel size of w " + shape_str(w) + " must be >= 1");
  Shape expect{x[0], w[0], 0, 0};
  for (size_t i = 0; i < 2; ++i) {
    expect[2 + i] = window_out_size(x[2 + i], w[2 + i], stride[i], padding[i], dilation[i]);
  }
  if (grad.shape != expect) {
    return c.error("grad " + shape_str(grad.shape) + " is not the conv2d output " +
                   shape_str(expect) + " of x " + shape_str(x) + " and w " + shape_str(w));
  }
  return Status::OK();
}

Result<Metas> infer_op(const Conv2dBackwardInput& op, const Ctx& c) {
  TW_ASSIGN_OR_RETURN(TensorMeta grad, c.input(op.grad, "grad"));
  TW_ASSIGN_OR_RETURN(TensorMeta w, c.input(op.w, "w"));
  if (w.dtype != grad.dtype) {
    return c.error("w dtype " + dt(w.dtype) + " differs from grad dtype " + dt(grad.dtype));
  }
  TW_RETURN_NOT_OK(
      check_conv_grad(c, op.x_shape, w.shape, grad, op.stride, op.padding, op.dilation, op.groups));
  return one(op.x_shape, grad.dtype);
}

Result<Metas> infer_op(const Conv2dBackwardWeight& op, const Ctx& c) {
  TW_ASSIGN_OR_RETURN(TensorMeta grad, c.input(op.grad, "grad"));
  TW_ASSIGN_OR_RETURN(TensorMeta x, c.input(op.x, "x"));
  if (x.dtype != grad.dtype) {
    return c.error("x dtype " + dt(x.dtype) + " differs from grad dtype " + dt(grad.dtype));
  }
  TW_RETURN_NOT_OK(
      check_conv_grad(c, x.shape, op.w_shape, grad, op.stride, op.padding, op.dilation, op.groups));
  return one(op.w_shape, grad.dtype);
}

Result<Metas> infer_op(const Pool2dBackward& op, const Ctx& c) {
  // The forward op's rules, then grad must have its output's shape and dtype.
  TW_ASSIGN_OR_RETURN(Metas fwd,
                      infer_op(Pool2d{op.kind, op.x, op.kernel, op.stride, op.padding, {}}, c));
  TW_ASSIGN_OR_RETURN(TensorMeta grad, c.input(op.grad, "grad"));
  if (grad.shape != fwd[0].shape || grad.dtype != fwd[0].dtype) {
    return c.error("grad " + meta_str(grad) + " is not the pool's output " + meta_str(fwd[0]));
  }
  TW_ASSIGN_OR_RETURN(TensorMeta x, c.input(op.x, "x"));
  return one(std::move(x));
}

Result<Metas> infer_op(const AdaptiveAvgPool2dBackward& op, const Ctx& c) {
  TW_ASSIGN_OR_RETURN(TensorMeta grad, c.input(op.grad, "grad"));
  if (grad.shape.size() != 4) {
    return c.error("grad must be 4-D [N, C, Ho, Wo], got " + shape_str(grad.shape));
  }
  TW_RETURN_NOT_OK(c.floating(grad.dtype));
  TW_RETURN_NOT_OK(c.entries(op.input_size, 2, "input_size"));
  TW_RETURN_NOT_OK(c.at_least(op.input_size, 1, "input_size"));
  if (grad.shape[2] < 1 || grad.shape[3] < 1) {
    return c.error("grad " + shape_str(grad.shape) + " must have Ho and Wo >= 1");
  }
  return one({grad.shape[0], grad.shape[1], op.input_size[0], op.input_size[1]}, grad.dtype);
}

Result<Metas> infer_op(const AdamStep& op, const Ctx& c) {
  TW_ASSIGN_OR_RETURN(TensorMeta p, c.input(op.param, "param"));
  TW_RETURN_NOT_OK(c.floating(p.dtype));
  const std::pair<const char*, In> same[] = {
      {"grad", op.grad}, {"exp_avg", op.exp_avg}, {"exp_avg_sq", op.exp_avg_sq}};
  for (const auto& [role, in] : same) {
    TW_ASSIGN_OR_RETURN(TensorMeta t, c.input(in, role));
    if (t.shape != p.shape || t.dtype != p.dtype) {
      return c.error(std::string(role) + " " + meta_str(t) + " must match param " + meta_str(p));
    }
  }
  const std::pair<const char*, In> scalars[] = {{"step_size", op.step_size},
                                                {"bias2_sqrt", op.bias2_sqrt}};
  for (const auto& [role, in] : scalars) {
    TW_ASSIGN_OR_RETURN(TensorMeta t, c.input(in, role));
    if (!t.shape.empty() || t.dtype != p.dtype) {
      return c.error(std::string(role) + " must be a 0-d " + dt(p.dtype) + " tensor, got " +
                     meta_str(t));
    }
  }
  if (!(op.beta1 >= 0 && op.beta1 < 1 && op.beta2 >= 0 && op.beta2 < 1)) {
    return c.error("betas must lie in [0, 1), got " + num(op.beta1) + " and " + num(op.beta2));
  }
  const std::pair<const char*, double> finite[] = {
      {"eps", op.eps}, {"weight_decay", op.weight_decay}, {"lr", op.lr}};
  for (const auto& [what, v] : finite) {
    if (!std::isfinite(v)) return c.error(std::string(what) + " " + num(v) + " must be finite");
  }
  Metas out;
  for (int i = 0; i < 3; ++i) out.push_back(p);
  return out;
}

Result<Metas> infer_op(const Linear& op, const Ctx& c) {
  TW_ASSIGN_OR_RETURN(TensorMeta x, c.input(op.x, "x"));
  TW_ASSIGN_OR_RETURN(TensorMeta w, c.input(op.w, "w"));
  TW_ASSIGN_OR_RETURN(std::optional<TensorMeta> bias, c.optional_input(op.bias, "bias"));
  if (x.dtype != kF32 || w.dtype != kF32 || (bias && bias->dtype != kF32)) {
    return c.error("x " + meta_str(x) + ", w " + meta_str(w) +
                   (bias ? ", bias " + meta_str(*bias) : std::string()) + ": all must be f32");
  }
  if (x.shape.size() != 2 || w.shape.size() != 2) {
    return c.error("x must be [N, in] and w [out, in], got " + shape_str(x.shape) + " and " +
                   shape_str(w.shape));
  }
  if (x.shape[1] != w.shape[1]) {
    return c.error("x " + shape_str(x.shape) + " has " + num(x.shape[1]) + " features but w " +
                   shape_str(w.shape) + " takes " + num(w.shape[1]));
  }
  if (bias && bias->shape != Shape{w.shape[0]}) {
    return c.error("bias " + shape_str(bias->shape) + " must be [" + num(w.shape[0]) + "]");
  }
  return one({x.shape[0], w.shape[0]}, kF32);
}

// q [..., Tq, D], k [..., Tk, D], v [..., Tk, Dv] with equal batch dims, one float dtype, and a
// bool mask broadcastable to the scores [..., Tq, Tk]; the output meta [..., Tq, Dv].
Result<TensorMeta> check_attention(const Ctx& c, const TensorMeta& q, const TensorMeta& k,
                                   const TensorMeta& v, const std::optional<TensorMeta>& mask,
                                   double scale) {
  TW_RETURN_NOT_OK(c.floating(q.dtype));
  if (k.dtype != q.dtype || v.dtype != q.dtype) {
    return c.error("q " + meta_str(q) + ", k " + meta_str(k) + " and v " + meta_str(v) +
                   " must have one dtype");
  }
  const size_t r = q.shape.size();
  if (r < 2 || k.shape.size() != r || v.shape.size() != r) {
    return c.error(
        "q [..., Tq, D], k [..., Tk, D] and v [..., Tk, Dv] must have one rank >= 2, "
        "got " +
        shape_str(q.shape) + ", " + shape_str(k.shape) + " and " + shape_str(v.shape));
  }
  const bool batch_equal = std::equal(q.shape.begin(), q.shape.end() - 2, k.shape.begin()) &&
                           std::equal(q.shape.begin(), q.shape.end() - 2, v.shape.begin());
  if (!batch_equal || k.shape[r - 1] != q.shape[r - 1] || v.shape[r - 2] != k.shape[r - 2]) {
    return c.error("q " + shape_str(q.shape) + ", k " + shape_str(k.shape) + " and v " +
                   shape_str(v.shape) +
                   " do not fit [..., Tq, D], [..., Tk, D], [..., Tk, Dv] (equal batch dims)");
  }
  if (!std::isfinite(scale)) return c.error("scale " + num(scale) + " must be finite");
  if (mask) {
    Shape scores(q.shape.begin(), q.shape.end() - 1);
    scores.push_back(k.shape[r - 2]);
    if (mask->dtype != kBool) {
      return c.error("mask dtype " + dt(mask->dtype) + " is not supported (expected bool)");
    }
    Result<Shape> b = broadcast_shapes(mask->shape, scores, "");
    if (!b.ok() || *b != scores) {
      return c.error("mask " + shape_str(mask->shape) + " does not broadcast to the scores " +
                     shape_str(scores));
    }
  }
  Shape out = q.shape;
  out[r - 1] = v.shape[r - 1];
  return TensorMeta{std::move(out), q.dtype};
}

Result<Metas> infer_op(const ScaledDotProductAttention& op, const Ctx& c) {
  TW_ASSIGN_OR_RETURN(TensorMeta q, c.input(op.query, "query"));
  TW_ASSIGN_OR_RETURN(TensorMeta k, c.input(op.key, "key"));
  TW_ASSIGN_OR_RETURN(TensorMeta v, c.input(op.value, "value"));
  TW_ASSIGN_OR_RETURN(std::optional<TensorMeta> mask, c.optional_input(op.mask, "mask"));
  TW_ASSIGN_OR_RETURN(TensorMeta out, check_attention(c, q, k, v, mask, op.scale));
  return one(std::move(out));
}

Result<Metas> infer_op(const ScaledDotProductAttentionBackward& op, const Ctx& c) {
  TW_ASSIGN_OR_RETURN(TensorMeta grad, c.input(op.grad, "grad"));
  TW_ASSIGN_OR_RETURN(TensorMeta q, c.input(op.query, "query"));
  TW_ASSIGN_OR_RETURN(TensorMeta k, c.input(op.key, "key"));
  TW_ASSIGN_OR_RETURN(TensorMeta v, c.input(op.value, "value"));
  TW_ASSIGN_OR_RETURN(std::optional<TensorMeta> mask, c.optional_input(op.mask, "mask"));
  TW_ASSIGN_OR_RETURN(TensorMeta out, check_attention(c, q, k, v, mask, op.scale));
  if (grad.shape != out.shape || grad.dtype != out.dtype) {
    return c.error("grad " + meta_str(grad) + " must match the attention output " + meta_str(out));
  }
  return Metas{std::move(q), std::move(k), std::move(v)};
}

Result<Metas> infer_op(const IndexSelectBackward& op, const Ctx& c) {
  TW_ASSIGN_OR_RETURN(TensorMeta grad, c.input(op.grad, "grad"));
  TW_ASSIGN_OR_RETURN(TensorMeta index, c.input(op.index, "index"));
  TW_RETURN_NOT_OK(c.floating(grad.dtype));
  TW_RETURN_NOT_OK(c.index_dtype(index.dtype, "index"));
  if (index.shape.size() != 1) return c.error("index must be 1-D, got " + shape_str(index.shape));
  TW_RETURN_NOT_OK(c.shape_attr(op.x_shape));
  TW_ASSIGN_OR_RETURN(int64_t dim, c.dim(op.dim, rank_of(op.x_shape)));
  // The shape IndexSelect gives for x_shape and this index (a 0-d x: 0-d, with one index).
  Shape want = op.x_shape;
  if (want.empty()) {
    if (index.shape[0] != 1) {
      return c.error("a 0-d x takes an index of exactly one element, got " +
                     shape_str(index.shape));
    }
  } else {
    want[static_cast<size_t>(dim)] = index.shape[0];
  }
  if (grad.shape != want) {
    return c.error("grad " + shape_str(grad.shape) + " is not the index_select output " +
                   shape_str(want) + " of x " + shape_str(op.x_shape) + " and index " +
                   shape_str(index.shape));
  }
  return one(op.x_shape, grad.dtype);
}

Result<Metas> infer_op(const LayerNormBackward& op, const Ctx& c) {
  TW_ASSIGN_OR_RETURN(TensorMeta grad, c.input(op.grad, "grad"));
  TW_ASSIGN_OR_RETURN(TensorMeta x, c.input(op.x, "x"));
  TW_ASSIGN_OR_RETURN(std::optional<TensorMeta> weight, c.optional_input(op.weight, "weight"));
  TW_RETURN_NOT_OK(check_layer_norm(c, x, weight, std::nullopt, op.normalized_dims, op.eps));
  if (grad.shape != x.shape || grad.dtype != x.dtype) {
    return c.error("grad " + meta_str(grad) + " must match x " + meta_str(x));
  }
  Shape normalized(x.shape.end() - op.normalized_dims, x.shape.end());
  return Metas{std::move(x), TensorMeta{normalized, grad.dtype},
               TensorMeta{normalized, grad.dtype}};
}

Result<Metas> infer_op(const GeluBackward& op, const Ctx& c) {
  TW_ASSIGN_OR_RETURN(TensorMeta grad, c.input(op.grad, "grad"));
  TW_ASSIGN_OR_RETURN(TensorMeta x, c.input(op.x, "x"));
  TW_RETURN_NOT_OK(c.floating(x.dtype));
  if (grad.shape != x.shape || grad.dtype != x.dtype) {
    return c.error("grad " + meta_str(grad) + " must match x " + meta_str(x));
  }
  return one(std::move(x));
}

}  // namespace
}  // namespace tw::ir
