// An independent reference implementation of every op, written from docs/ops.md alone (it
// includes nothing from src/): naive loops over a plain host tensor, in double precision for
// floats and in wrapping 64-bit arithmetic for integers. It is meant to be obviously correct,
// not fast; the op tests compare every kernel against it.
//
// Values are held exactly: float dtypes in `f` (a double holds every f32/f16/bf16 value, and the
// reference rounds each result to the output dtype), integral and bool dtypes in `i` (an i64
// does not fit a double beyond 2^53, so wrapping tests need the integer vector).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tensorwire/tensor.h"

namespace tw::ref {

struct HostTensor {
  Shape shape;
  DType dtype = kF32;
  std::vector<double> f;   // float dtypes (f32, f64, f16, bf16)
  std::vector<int64_t> i;  // i32, i64, u8, bool (0 or 1)

  int64_t numel() const;
  bool is_float_dtype() const { return is_float(dtype); }
  double as_double(int64_t k) const { return is_float_dtype() ? f[k] : static_cast<double>(i[k]); }
};

// One value with its source kind, for conversions (a Scalar or an element of some dtype).
struct Num {
  bool is_float = false;
  double f = 0.0;
  int64_t i = 0;
};

int64_t numel(const Shape& s);
std::string shape_str(const Shape& s);              // "[2, 3]"
HostTensor alloc(const Shape& shape, DType dtype);  // zero-filled
Num get(const HostTensor& t, int64_t k);
void set(HostTensor& t, int64_t k, Num v);  // v must already be of t's dtype (see convert)

// ---- conversions (the Cast rules of docs/ops.md) ----
// Rounds a double to the nearest value of a float dtype (f64 -> f16/bf16 goes through f32).
double round_to_float(double v, DType d);
// Wraps a 64-bit two's complement integer to an integral dtype (u8 modulo 256).
int64_t wrap_int(int64_t v, DType d);
Num convert(Num v, DType to);
Num scalar_num(const Scalar& s);
HostTensor cast(const HostTensor& x, DType to);
DType promote_types(DType a, DType b);  // bool < u8 < i32 < i64 < f32 < f64

// f16/bf16 bit conversions written here from the IEEE definitions (round to nearest even), so
// the reference does not borrow the code under test.
uint16_t encode_f16(float v);
uint16_t encode_bf16(float v);
double decode_f16(uint16_t bits);
double decode_bf16(uint16_t bits);

// Host <-> raw little-endian bytes in the tensor's dtype.
std::vector<uint8_t> to_bytes(const HostTensor& t);
HostTensor from_bytes(const std::vector<uint8_t>& bytes, const Shape& shape, DType dtype);

// ---- broadcasting and index helpers ----
Shape broadcast_shapes(const Shape& a, const Shape& b);  // throws std::invalid_argument
int64_t norm_dim(int64_t dim, int64_t rank);             // rank 0 accepts 0 and -1
std::vector<int64_t> unravel(int64_t flat, const Shape& shape);
int64_t ravel(const std::vector<int64_t>& idx, const Shape& shape);
// Flat index into `in` (right-aligned, size-1 dims stretched) of an index into `out`.
int64_t broadcast_index(const std::vector<int64_t>& out_idx, const Shape& in);

// ---- creation ----
HostTensor full(const Shape& shape, const Scalar& value, DType dtype);
HostTensor arange(const Scalar& start, const Scalar& end, const Scalar& step, DType dtype);
HostTensor eye(int64_t n, int64_t m, DType dtype);

// ---- elementwise ----
// kind: the op's user name ("exp", "add", "logical_xor", ...).
HostTensor unary(const std::string& kind, const HostTensor& x);
HostTensor binary(const std::string& kind, const HostTensor& a, const HostTensor& b);
HostTensor binary_scalar(const std::string& kind, const HostTensor& a, const Scalar& s,
                         bool reverse);
HostTensor where(const HostTensor& cond, const HostTensor& a, const HostTensor& b);
HostTensor clamp(const HostTensor& x, const std::optional<Scalar>& lo,
                 const std::optional<Scalar>& hi);
HostTensor masked_fill(const HostTensor& x, const HostTensor& mask, const Scalar& value);

// ---- reductions ----
// kind: sum, mean, prod, max, min, argmax, argmin. dims empty: all dims.
HostTensor reduce(const std::string& kind, const HostTensor& x, std::vector<int64_t> dims,
                  bool keepdim);
HostTensor cumsum(const HostTensor& x, int64_t dim);

// ---- linear algebra: torch.matmul semantics (1-D operands promoted and squeezed) ----
HostTensor matmul(const HostTensor& a, const HostTensor& b);

// ---- movement ----
HostTensor reshape(const HostTensor& x, Shape shape);
HostTensor flatten(const HostTensor& x, int64_t start_dim, int64_t end_dim);
HostTensor permute(const HostTensor& x, std::vector<int64_t> dims);
HostTensor transpose(const HostTensor& x, int64_t d0, int64_t d1);
HostTensor expand(const HostTensor& x, const Shape& shape);
HostTensor squeeze(const HostTensor& x);
HostTensor squeeze(const HostTensor& x, int64_t dim);
HostTensor unsqueeze(const HostTensor& x, int64_t dim);
HostTensor slice(const HostTensor& x, int64_t dim, int64_t start, int64_t end, int64_t step);
HostTensor narrow(const HostTensor& x, int64_t dim, int64_t start, int64_t length);
HostTensor slice_assign(const HostTensor& x, int64_t dim, int64_t start, int64_t end, int64_t step,
                        const HostTensor& src);
HostTensor cat(const std::vector<HostTensor>& xs, int64_t dim);
HostTensor stack(const std::vector<HostTensor>& xs, int64_t dim);
HostTensor flip(const HostTensor& x, std::vector<int64_t> dims);
HostTensor repeat(const HostTensor& x, const std::vector<int64_t>& repeats);

// ---- indexing ----
HostTensor gather(const HostTensor& x, int64_t dim, const HostTensor& index);
HostTensor scatter_add(const HostTensor& x, int64_t dim, const HostTensor& index,
                       const HostTensor& src);
HostTensor index_select(const HostTensor& x, int64_t dim, const HostTensor& index);
// d loss / d x of index_select: zeros of x_shape, grad's slices added at their index.
HostTensor index_select_backward(const HostTensor& grad, int64_t dim, const HostTensor& index,
                                 const Shape& x_shape);
HostTensor one_hot(const HostTensor& x, int64_t num_classes);
HostTensor embedding(const HostTensor& weight, const HostTensor& indices);

// ---- neural ----
HostTensor softmax(const HostTensor& x, int64_t dim, bool log);
HostTensor conv2d(const HostTensor& x, const HostTensor& w, const std::optional<HostTensor>& bias,
                  std::vector<int64_t> stride, std::vector<int64_t> padding,
                  std::vector<int64_t> dilation, int64_t groups);
// kind: "max" or "avg"; an empty stride means stride = kernel.
HostTensor pool2d(const std::string& kind, const HostTensor& x, std::vector<int64_t> kernel,
                  std::vector<int64_t> stride, std::vector<int64_t> padding);
HostTensor adaptive_avg_pool2d(const HostTensor& x, std::vector<int64_t> output_size);
HostTensor layer_norm(const HostTensor& x, const Shape& normalized_shape,
                      const std::optional<HostTensor>& weight,
                      const std::optional<HostTensor>& bias, double eps);
// d loss / d x, weight, bias of layer_norm for upstream gradient `grad`: x's gradient, then the
// weight's (when given) and the bias's (when has_bias), flattened and concatenated.
HostTensor layer_norm_backward(const HostTensor& grad, const HostTensor& x,
                               const Shape& normalized_shape,
                               const std::optional<HostTensor>& weight, bool has_bias, double eps);
// d loss / d x of gelu (the erf form) for upstream gradient `grad`.
HostTensor gelu_backward(const HostTensor& grad, const HostTensor& x);
// scale defaults to 1 / sqrt(D) when absent (the API's default).
HostTensor scaled_dot_product_attention(const HostTensor& q, const HostTensor& k,
                                        const HostTensor& v, const std::optional<HostTensor>& mask,
                                        bool causal, std::optional<double> scale);
// The gradients of query, key and value for the upstream `grad`, flattened and concatenated.
HostTensor scaled_dot_product_attention_backward(const HostTensor& grad, const HostTensor& q,
                                                 const HostTensor& k, const HostTensor& v,
                                                 const std::optional<HostTensor>& mask, bool causal,
                                                 std::optional<double> scale);

// ---- quantization (docs/ops.md, "Quantization") ----
// axis/block: per tensor (scale 0-d or [1], block 0), per channel (block 0), per block.
HostTensor quantize(const HostTensor& x, const HostTensor& scale,
                    const std::optional<HostTensor>& zero_point, DType dtype, int64_t axis,
                    int64_t block);
HostTensor dequantize(const HostTensor& x, const HostTensor& scale,
                      const std::optional<HostTensor>& zero_point, int64_t axis, int64_t block);
// format 0: Q8_0, 1: Q4_0 (the byte layouts of docs/ops.md).
HostTensor pack_blocks(const HostTensor& x, int format);
HostTensor unpack_blocks(const HostTensor& packed, int format);
HostTensor linear_blocks(const HostTensor& x, const HostTensor& w, int format,
                         const std::optional<HostTensor>& bias);
HostTensor linear_int8(const HostTensor& x, const HostTensor& w, const HostTensor& w_scale,
                       const std::optional<HostTensor>& bias);

}  // namespace tw::ref
