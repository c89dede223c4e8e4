// tw::Tensor: a handle to a tensor on some device, with an API modelled on libtorch's C++ API.
// Every call validates shapes and dtypes immediately (throwing tw::Error at the call site with a
// message naming the shapes) and then submits one op to the tensor's device; the values are
// computed eagerly on the CPU device and asynchronously on remote devices. Reading values
// (to_vector, item, printing) waits for them.
#pragma once
#include <cstdint>
#include <cstring>
#include <functional>
#include <future>
#include <initializer_list>
#include <memory>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tensorwire/device.h"
#include "tensorwire/dtype.h"
#include "tensorwire/error.h"
#include "tensorwire/export.h"
#include "tensorwire/op_kinds.h"

TW_API_BEGIN

namespace tw {

using Shape = std::vector<int64_t>;

namespace detail {
struct TensorImpl;
// A host copy of a tensor's values: contiguous, row-major, little-endian.
struct HostValues {
  Shape shape;
  DType dtype = DType::kF32;
  std::shared_ptr<const void> owner;  // keeps `data` alive
  const void* data = nullptr;
  int64_t numel = 0;
};
// A read in flight (Tensor::host_values_pending): ready() says, without waiting, whether its
// reply is in; get() waits for it if need be and returns the values (or throws tw::Error).
struct PendingValues {
  std::function<bool()> ready;
  std::function<HostValues()> get;
};
template <class T>
constexpr DType dtype_of_v = DType::kF32;
template <>
inline constexpr DType dtype_of_v<double> = DType::kF64;
template <>
inline constexpr DType dtype_of_v<int32_t> = DType::kI32;
template <>
inline constexpr DType dtype_of_v<int64_t> = DType::kI64;
template <>
inline constexpr DType dtype_of_v<uint8_t> = DType::kU8;
template <>
inline constexpr DType dtype_of_v<int8_t> = DType::kI8;
template <>
inline constexpr DType dtype_of_v<bool> = DType::kBool;
[[noreturn]] void throw_dtype_mismatch(const char* what, DType have, DType want);
}  // namespace detail

// A number given to a tensor-scalar op: exact for integers, double for floats.
struct Scalar {
  bool is_float = true;
  double f = 0.0;
  int64_t i = 0;
  Scalar(double v) : is_float(true), f(v), i(static_cast<int64_t>(v)) {}   // NOLINT
  Scalar(float v) : Scalar(static_cast<double>(v)) {}                      // NOLINT
  Scalar(int64_t v) : is_float(false), f(static_cast<double>(v)), i(v) {}  // NOLINT
  Scalar(int v) : Scalar(static_cast<int64_t>(v)) {}                       // NOLINT
  Scalar(bool v) : Scalar(static_cast<int64_t>(v)) {}                      // NOLINT
};

class Tensor {
 public:
  Tensor() = default;  // undefined: most calls on it throw
  bool defined() const { return impl_ != nullptr; }

  // ---- metadata (no round trip) ----
  const Shape& shape() const;
  Shape sizes() const { return shape(); }
  int64_t dim() const;
  int64_t size(int64_t dim) const;
  int64_t numel() const;
  DType dtype() const;
  Device device() const;
  uint64_t id() const;  // the tensor's id on its device

  // ---- values (wait for the device) ----
  template <class T>
  std::vector<T> to_vector() const {
    detail::HostValues v = host_values();
    if (v.dtype != detail::dtype_of_v<T>)
      detail::throw_dtype_mismatch("to_vector", v.dtype, detail::dtype_of_v<T>);
    const T* p = static_cast<const T*>(v.data);
    return std::vector<T>(p, p + v.numel);
  }
  // Sends the read now and returns at once: many reads may be in flight, and their replies
  // arrive in any order. get() waits for this one (and throws tw::Error as to_vector would).
  // The future is deferred: get()/wait() finish the read on the calling thread, so
  // wait_for() reports std::future_status::deferred rather than a timeout.
  template <class T>
  std::future<std::vector<T>> to_vector_async() const {
    std::function<detail::HostValues()> finish = host_values_async();
    return std::async(std::launch::deferred, [finish = std::move(finish)] {
      detail::HostValues v = finish();
      if (v.dtype != detail::dtype_of_v<T>)
        detail::throw_dtype_mismatch("to_vector_async", v.dtype, detail::dtype_of_v<T>);
      const T* p = static_cast<const T*>(v.data);
      return std::vector<T>(p, p + v.numel);
    });
  }
  template <class T>
  T item() const {
    detail::HostValues v = host_values();  // (no vector made for the one value)
    if (v.dtype != detail::dtype_of_v<T>)
      detail::throw_dtype_mismatch("item", v.dtype, detail::dtype_of_v<T>);
    if (v.numel != 1)
      throw Error("item: tensor has " + std::to_string(v.numel) + " elements, not 1");
    T out;
    std::memcpy(&out, v.data, sizeof(T));
    return out;
  }
  // Raw little-endian bytes of any dtype (f16/bf16 included).
  std::vector<uint8_t> to_bytes() const;
  detail::HostValues host_values() const;
  // Sends the read request now; the function waits for the reply and returns the values.
  std::function<detail::HostValues()> host_values_async() const;
  // The same read, with a way to ask whether its reply has arrived (nothing waits for it).
  detail::PendingValues host_values_pending() const;
  std::string to_string() const;  // values and dtype, abbreviated past 1000 elements

  // ---- conversion and movement between devices ----
  Tensor to(DType dtype) const;           // cast (a copy even when dtype is unchanged)
  Tensor to(const Device& device) const;  // copies the values to another device

  // ---- elementwise ----
  // One method per kind of the lists in tensorwire/op_kinds.h, named by their api_name column:
  // x.exp(), x.add(y), and x.add(2) for the binary kinds whose scalar column is kScalarApi.
#define TW_UNARY_DECL(Kind, ir_name, api_name, ...) Tensor api_name() const;
  TW_UNARY_KINDS(TW_UNARY_DECL)
#undef TW_UNARY_DECL
#define TW_BINARY_DECL(Kind, ir_name, api_name, grad, scalar) \
  Tensor api_name(const Tensor& o) const;                     \
  TW_BINARY_SCALAR_DECL_##scalar(api_name)
#define TW_BINARY_SCALAR_DECL_kScalarApi(api_name) Tensor api_name(Scalar s) const;
#define TW_BINARY_SCALAR_DECL_kNoScalarApi(api_name)
  TW_BINARY_KINDS(TW_BINARY_DECL)
#undef TW_BINARY_DECL
#undef TW_BINARY_SCALAR_DECL_kScalarApi
#undef TW_BINARY_SCALAR_DECL_kNoScalarApi
  Tensor clamp(std::optional<Scalar> lo, std::optional<Scalar> hi) const;
  Tensor masked_fill(const Tensor& mask, Scalar value) const;

  // ---- reductions ----
  // Per kind (tensorwire/op_kinds.h): over every element, over one dim, and for the kinds whose
  // dims column is kDimList over a list of dims (an empty list reduces every dim, as in
  // PyTorch). max and min give the values. The std::optional form is Python's `dim=None`:
  // no dim reduces every element, and keepdim then keeps all of x's dims as size 1
  // (`x.argmax(std::nullopt, true)`).
#define TW_REDUCE_DECL(Kind, ir_name, api_name, grad, dims)        \
  Tensor api_name() const;                                         \
  Tensor api_name(int64_t dim, bool keepdim = false) const;        \
  Tensor api_name(std::optional<int64_t> dim, bool keepdim) const; \
  TW_REDUCE_DIMS_DECL_##dims(api_name)
#define TW_REDUCE_DIMS_DECL_kDimList(api_name) \
  Tensor api_name(const std::vector<int64_t>& dims, bool keepdim = false) const;
#define TW_REDUCE_DIMS_DECL_kOneDim(api_name)
  TW_REDUCE_KINDS(TW_REDUCE_DECL)
#undef TW_REDUCE_DECL
#undef TW_REDUCE_DIMS_DECL_kDimList
#undef TW_REDUCE_DIMS_DECL_kOneDim
  Tensor cumsum(int64_t dim) const;

  // ---- linear algebra ----
  Tensor matmul(const Tensor& o) const;  // 1-D operands are treated as in torch.matmul

  // ---- movement (views where the device can make them) ----
  Tensor reshape(const Shape& shape) const;
  Tensor view(const Shape& shape) const { return reshape(shape); }
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;  // transpose of a 2-D tensor
  Tensor expand(const Shape& shape) const;
  Tensor expand_as(const Tensor& o) const { return expand(o.shape()); }
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  // Elements start, start+step, ... < end along dim (Python slice semantics, negative allowed).
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  // A copy of this tensor with this[slice(dim, start, end, step)] = src.
  Tensor slice_assign(int64_t dim, int64_t start, int64_t end, int64_t step,
                      const Tensor& src) const;
  Tensor flip(const std::vector<int64_t>& dims) const;
  Tensor repeat(const std::vector<int64_t>& repeats) const;

  // ---- indexing ----
  Tensor gather(int64_t dim, const Tensor& index) const;
  Tensor scatter_add(int64_t dim, const Tensor& index, const Tensor& src) const;
  Tensor index_select(int64_t dim, const Tensor& index) const;

  // ---- neural ----
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;

  // ---- autograd (tensorwire/autograd.h) ----
  // Makes this floating-point leaf a tensor whose gradient backward() accumulates (every handle
  // of it sees the flag). Returns *this. A tensor computed from one that requires grad requires
  // grad itself.
  Tensor& set_requires_grad(bool requires_grad = true);
  bool requires_grad() const;
  // False for a tensor computed by a recorded op (it has a node in the graph).
  bool is_leaf() const;
  // What backward() accumulated into this leaf; undefined before that and after zero_grad().
  Tensor grad() const;
  void set_grad(const Tensor& grad);
  // Forgets the accumulated gradient: the next backward() starts this leaf's from nothing.
  void zero_grad();
  // Backpropagates from this tensor. `grad` is d loss / d this (default: ones, allowed for a
  // one-element tensor). The graph's saved tensors are freed unless retain_graph.
  void backward(const Tensor& grad = {}, bool retain_graph = false) const;
  // The same values (no op, no copy) cut from the graph: a leaf that does not require grad.
  Tensor detach() const;

  // For the API's implementation.
  explicit Tensor(std::shared_ptr<detail::TensorImpl> impl) : impl_(std::move(impl)) {}
  const std::shared_ptr<detail::TensorImpl>& impl() const { return impl_; }

 private:
  std::shared_ptr<detail::TensorImpl> impl_;
};

// ---- operators ----
Tensor operator-(const Tensor& a);
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, Scalar b);
Tensor operator-(const Tensor& a, Scalar b);
Tensor operator*(const Tensor& a, Scalar b);
Tensor operator/(const Tensor& a, Scalar b);
Tensor operator+(Scalar a, const Tensor& b);
Tensor operator-(Scalar a, const Tensor& b);
Tensor operator*(Scalar a, const Tensor& b);
Tensor operator/(Scalar a, const Tensor& b);
Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator==(const Tensor& a, Scalar b);
Tensor operator!=(const Tensor& a, Scalar b);
Tensor operator<(const Tensor& a, Scalar b);
Tensor operator<=(const Tensor& a, Scalar b);
Tensor operator>(const Tensor& a, Scalar b);
Tensor operator>=(const Tensor& a, Scalar b);
Tensor operator&&(const Tensor& a, const Tensor& b);
Tensor operator||(const Tensor& a, const Tensor& b);
Tensor operator!(const Tensor& a);
std::ostream& operator<<(std::ostream& os, const Tensor& t);

// ---- factories (device defaults to the CPU device) ----
Tensor zeros(const Shape& shape, DType dtype = kF32, const Device& device = Device::cpu());
Tensor ones(const Shape& shape, DType dtype = kF32, const Device& device = Device::cpu());
Tensor full(const Shape& shape, Scalar value, DType dtype = kF32,
            const Device& device = Device::cpu());
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, Scalar value);
// [start, end) by step; dtype defaults to i64 when all three are integers, else f32.
Tensor arange(Scalar end, const Device& device = Device::cpu());
Tensor arange(Scalar start, Scalar end, Scalar step = 1, std::optional<DType> dtype = std::nullopt,
              const Device& device = Device::cpu());
Tensor eye(int64_t n, std::optional<int64_t> m = std::nullopt, DType dtype = kF32,
           const Device& device = Device::cpu());
// Copies host values (row-major) into a new tensor of the given shape.
template <class T>
Tensor from_vector(std::span<const T> values, const Shape& shape,
                   const Device& device = Device::cpu());
template <class T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape,
                   const Device& device = Device::cpu()) {
  return from_vector<T>(std::span<const T>(values), shape, device);
}
// Takes the values over instead of copying them: on the CPU device they become the tensor's
// storage; on a remote device the upload keeps them until they are sent, so a large upload the
// server holds already (deduplicated, docs/remote.md) returns without waiting for its answer.
template <class T>
Tensor from_vector(std::vector<T>&& values, const Shape& shape,
                   const Device& device = Device::cpu());
// 1-D tensor of the given values.
template <class T>
Tensor tensor(std::initializer_list<T> values, const Device& device = Device::cpu()) {
  std::vector<T> v(values);
  return from_vector<T>(std::span<const T>(v), Shape{static_cast<int64_t>(v.size())}, device);
}
// Raw little-endian bytes of any dtype.
Tensor from_bytes(std::span<const uint8_t> bytes, const Shape& shape, DType dtype,
                  const Device& device = Device::cpu());
// A tensor over existing host memory (row-major, little-endian, numel * dtype_size bytes at
// `data`). On the CPU device the memory becomes the tensor's storage without a copy: writes to it
// are seen by the tensor and by every tensor sharing its storage (ops never write into it), and
// `keep_alive` is held until the last of them is gone. On any other device the bytes are copied
// now (an upload), and keep_alive is released at once. Memory not aligned for the dtype is copied.
Tensor from_blob(void* data, const Shape& shape, DType dtype,
                 std::shared_ptr<const void> keep_alive, const Device& device = Device::cpu());

// Random tensors draw from a counter-based generator: each call takes the next seed of a global
// sequence started by manual_seed, so a program gives the same tensors on every device and for
// any thread count.
void manual_seed(uint64_t seed);
uint64_t next_seed();
// The generator's whole state (the seed and how many seeds were drawn since), for checkpoints:
// set_rng_state(rng_state()) later makes the same tensors as going on now would.
struct RngState {
  uint64_t seed = 0;
  uint64_t counter = 0;
};
RngState rng_state();
void set_rng_state(const RngState& state);
Tensor rand(const Shape& shape, DType dtype = kF32, const Device& device = Device::cpu());
Tensor randn(const Shape& shape, DType dtype = kF32, const Device& device = Device::cpu());
Tensor uniform(const Shape& shape, double low, double high, DType dtype = kF32,
               const Device& device = Device::cpu());
Tensor normal(const Shape& shape, double mean, double std, DType dtype = kF32,
              const Device& device = Device::cpu());
Tensor bernoulli(const Tensor& p);

// ---- free functions ----
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor cat(const std::vector<Tensor>& xs, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& xs, int64_t dim = 0);
Tensor one_hot(const Tensor& x, int64_t num_classes);
// weight [num_embeddings, dim], indices of any shape -> indices.shape + [dim]
Tensor embedding(const Tensor& weight, const Tensor& indices);
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {},
              std::vector<int64_t> stride = {1, 1}, std::vector<int64_t> padding = {0, 0},
              std::vector<int64_t> dilation = {1, 1}, int64_t groups = 1);
Tensor max_pool2d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride = {},
                  std::vector<int64_t> padding = {0, 0});
Tensor avg_pool2d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride = {},
                  std::vector<int64_t> padding = {0, 0});
Tensor adaptive_avg_pool2d(const Tensor& x, std::vector<int64_t> output_size);
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = {},
                  const Tensor& bias = {}, double eps = 1e-5);
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
// Attention: softmax(scale q k^T) v over the keys each query attends, without materialising the
// [..., Tq, Tk] scores. q [..., Tq, D], k [..., Tk, D], v [..., Tk, Dv] (equal batch dims, f32
// or f64) -> [..., Tq, Dv]. `mask` (bool, broadcast to [..., Tq, Tk]; true attends) and
// `causal` (query i attends keys j <= i) restrict the keys; a query attending none gives zeros.
// `scale` defaults to 1 / sqrt(D).
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& mask = {}, bool causal = false,
                                    std::optional<double> scale = std::nullopt);

// ---- quantization (docs/ops.md, "Quantization") ----
// Affine quantization as ONNX's QuantizeLinear/DequantizeLinear: q = saturate(round_half_even(x /
// scale) + zero_point) in i8 or u8, x = (q - zero_point) * scale. One scale (0-d or [1]), one per
// channel along `axis` (block 0), or one per block of `block` along axis; zero_point undefined
// (0) or the scale's shape in the quantized dtype.
Tensor quantize(const Tensor& x, const Tensor& scale, const Tensor& zero_point = {},
                DType dtype = kI8, int64_t axis = 1, int64_t block = 0);
Tensor dequantize(const Tensor& q, const Tensor& scale, const Tensor& zero_point = {},
                  int64_t axis = 1, int64_t block = 0);
// Rows of f32 (last dim a multiple of 32) packed into ggml's Q8_0 / Q4_0 blocks (u8 bytes; the
// layout is in docs/ops.md), and back.
Tensor pack_blocks(const Tensor& x, BlockFormat format);
Tensor unpack_blocks(const Tensor& packed, BlockFormat format);
// x [N, in] f32 times packed rows w [out, in / 32 * block bytes] transposed, plus bias: the
// weights are dequantized inside the kernel (weight-only quantization).
Tensor linear_blocks(const Tensor& x, const Tensor& w_packed, BlockFormat format,
                     const Tensor& bias = {});
// x [N, in] f32 quantized per call to u8 (per tensor, 7 bits) times w [out, in] i8 with one scale
// per output row, plus bias; f32 out. w and w_scale come from quantize_weight_int8.
Tensor linear_int8(const Tensor& x, const Tensor& w, const Tensor& w_scale,
                   const Tensor& bias = {});
// w [out, in] f32 -> (w_q i8, w_scale f32 [out]): symmetric per-row scales max|w| / 127.
std::pair<Tensor, Tensor> quantize_weight_int8(const Tensor& w);

// Intra-op threads used by the local CPU kernels (default: TW_NUM_THREADS or all cores).
void set_num_threads(int n);
int get_num_threads();

}  // namespace tw
TW_API_END
