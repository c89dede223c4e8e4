// The cuda backend's index, scan, copy and random paths without a GPU: the argument blocks
// (plan.cc) and the per-element bodies the kernels run (index_math.h, the same text) are run on
// the host over column-major and offset layouts, and compared with the cpu backend's results bit
// for bit; the elementwise copies (Cat, Flip, Repeat, SliceAssign) through the copy kernel's
// offsets, including its strided output; the random ops' expression against the cpu backend.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>

#include "backend/cuda/index_math.h"
#include "backend/cuda/plan.h"
#include "backend/registry.h"
#include "backend/upload.h"
#include "core/philox.h"

namespace tw {
namespace {

// A host tensor: logical row-major values `v` stored in `buf` through `view` (column-major with
// an offset of 3 elements when `transposed`, to exercise strides).
template <class T>
struct Host {
  std::vector<T> v;
  std::vector<T> buf;
  cuda::View view;
};
template <class T>
Host<T> host(const Shape& shape, std::vector<T> v, DType dt, bool transposed) {
  Host<T> h;
  h.v = std::move(v);
  h.view.shape = shape;
  h.view.dtype = dt;
  const size_t rank = shape.size();
  std::vector<int64_t> st(rank);
  int64_t s = 1;
  for (size_t k = 0; k < rank; ++k) {
    const size_t d = transposed ? k : rank - 1 - k;
    st[d] = s;
    s *= shape[d];
  }
  h.view.strides = st;
  h.view.offset = transposed ? 3 : 0;
  h.buf.assign(static_cast<size_t>(h.view.offset + numel(shape)), T(0));
  for (int64_t i = 0; i < numel(shape); ++i) {
    int64_t off = h.view.offset, rem = i;
    for (size_t d = rank; d-- > 0;) {
      off += (rem % shape[d]) * st[d];
      rem /= shape[d];
    }
    h.buf[static_cast<size_t>(off)] = h.v[static_cast<size_t>(i)];
  }
  return h;
}
template <class T>
const T* at(const Host<T>& h) {
  return h.buf.data() + h.view.offset;
}

// A cpu backend with tensors uploaded under ids 1, 2, 3, ...
struct Cpu {
  std::unique_ptr<Backend> b = make_cpu_backend();
  template <class T>
  void put(ir::TensorId id, const Shape& shape, DType dt, const std::vector<T>& v) {
    TensorData d;
    d.meta = {shape, dt};
    d.bytes = Buffer::copy_of(v.data(), v.size() * sizeof(T));
    const Status st = b->execute(from_host_of(std::move(d), id));
    ASSERT_TRUE(st.ok()) << st.message();
  }
  template <class T>
  std::vector<T> get(const ir::Op& op, ir::TensorId out) {
    const Status st = b->execute(op);
    EXPECT_TRUE(st.ok()) << st.message();
    Result<TensorData> r = b->read(out);
    EXPECT_TRUE(r.ok());
    if (!r.ok()) return {};
    std::vector<T> v(r->bytes.size() / sizeof(T));
    std::memcpy(v.data(), r->bytes.data(), r->bytes.size());
    return v;
  }
};

std::vector<float> floats(std::mt19937& rng, int64_t n) {
  std::uniform_real_distribution<float> u(-4.f, 4.f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& f : v) f = u(rng);
  return v;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

TEST(CudaIndex, GatherIndexSelectScatterMatchCpuBits) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 40; ++trial) {
    const bool tr = trial % 2 == 1;
    const Shape xs{2 + static_cast<int64_t>(rng() % 3), 3, 1 + static_cast<int64_t>(rng() % 4)};
    const int64_t dim = static_cast<int64_t>(rng() % 3) - (trial % 3 == 0 ? 3 : 0);
    const auto d0 = static_cast<size_t>(dim < 0 ? dim + 3 : dim);
    const int64_t size = xs[d0];
    Host<float> x = host(xs, floats(rng, numel(xs)), kF32, tr);
    // Gather: an index of x's shape but 1 to 3 long along dim (negatives count from the end).
    Shape is = xs;
    is[d0] = 1 + static_cast<int64_t>(rng() % 3);
    std::vector<int64_t> iv(static_cast<size_t>(numel(is)));
    for (int64_t& v : iv) v = static_cast<int64_t>(rng() % (2 * size)) - size;
    Host<int64_t> index = host(is, iv, kI64, !tr);
    Cpu cpu;
    cpu.put(1, xs, kF32, x.v);
    cpu.put(2, is, kI64, iv);
    {
      Result<cuda::IxArgs> a = cuda::gather_args(x.view, index.view, dim, is, "gather", "cuda:0");
      ASSERT_TRUE(a.ok()) << a.status().message();
      std::vector<float> got(static_cast<size_t>(numel(is)));
      int64_t bad[2] = {0, 0};
      a->x = at(x);
      a->index = at(index);
      a->out = got.data();
      a->bad = bad;
      for (int64_t i = 0; i < a->n; ++i) cuda::ix::gather_element<uint32_t, int64_t>(*a, i);
      EXPECT_EQ(bad[1], 0);
      EXPECT_TRUE(same_bits(got, cpu.get<float>(ir::Gather{{1}, dim, {2}, {10}}, 10)))
          << "gather trial " << trial;
    }
    {
      // ScatterAdd of a src as the index, into x: every addition in index order.
      Host<float> src = host(is, floats(rng, numel(is)), kF32, tr);
      cpu.put(3, is, kF32, src.v);
      Result<cuda::IxArgs> a =
          cuda::scatter_add_args(&x.view, index.view, src.view, dim, xs, "scatter_add", "cuda:0");
      ASSERT_TRUE(a.ok()) << a.status().message();
      std::vector<float> got(static_cast<size_t>(numel(xs)));
      a->x = at(x);
      a->index = at(index);
      a->src = at(src);
      a->out = got.data();
      for (int64_t i = 0; i < a->n; ++i) cuda::ix::scatter_element<float, float, int64_t>(*a, i);
      EXPECT_TRUE(same_bits(got, cpu.get<float>(ir::ScatterAdd{{1}, dim, {2}, {3}, {11}}, 11)))
          << "scatter_add trial " << trial;
    }
    {
      // IndexSelect and its backward with a 1-d index (repeats included).
      const Shape ls{1 + static_cast<int64_t>(rng() % 5)};
      std::vector<int64_t> lv(static_cast<size_t>(ls[0]));
      for (int64_t& v : lv) v = static_cast<int64_t>(rng() % (2 * size)) - size;
      Host<int64_t> l1 = host(ls, lv, kI64, false);
      cpu.put(4, ls, kI64, lv);
      Shape os = xs;
      os[d0] = ls[0];
      Result<cuda::IxArgs> a =
          cuda::index_select_args(x.view, l1.view, dim, os, "index_select", "cuda:0");
      ASSERT_TRUE(a.ok()) << a.status().message();
      std::vector<float> got(static_cast<size_t>(numel(os)));
      a->x = at(x);
      a->index = at(l1);
      a->out = got.data();
      for (int64_t i = 0; i < a->n; ++i) cuda::ix::gather_element<uint32_t, int64_t>(*a, i);
      EXPECT_TRUE(same_bits(got, cpu.get<float>(ir::IndexSelect{{1}, dim, {4}, {12}}, 12)))
          << "index_select trial " << trial;

      Host<float> grad = host(os, floats(rng, numel(os)), kF32, tr);
      cpu.put(5, os, kF32, grad.v);
      Result<cuda::IxArgs> b = cuda::index_select_backward_args(grad.view, l1.view, dim, xs,
                                                                "index_select_backward", "cuda:0");
      ASSERT_TRUE(b.ok()) << b.status().message();
      std::vector<float> back(static_cast<size_t>(numel(xs)));
      b->index = at(l1);
      b->src = at(grad);
      b->out = back.data();
      for (int64_t i = 0; i < b->n; ++i) cuda::ix::scatter_element<float, float, int64_t>(*b, i);
      EXPECT_TRUE(
          same_bits(back, cpu.get<float>(ir::IndexSelectBackward{{5}, {4}, dim, xs, {13}}, 13)))
          << "index_select_backward trial " << trial;
    }
  }
}

TEST(CudaIndex, OneHotMatchesCpuAndBadValuesAreRecorded) {
  const Shape xs{2, 3};
  const std::vector<int32_t> xv = {0, 3, 1, 2, 2, 0};
  Host<int32_t> x = host(xs, xv, kI32, true);
  Result<cuda::IxArgs> a = cuda::one_hot_args(x.view, 4, "one_hot", "cuda:0");
  ASSERT_TRUE(a.ok());
  std::vector<int64_t> got(24);
  int64_t bad[2] = {0, 0};
  a->index = at(x);
  a->out = got.data();
  a->bad = bad;
  a->seq = 5;
  for (int64_t i = 0; i < a->n; ++i) cuda::ix::gather_element<int64_t, int32_t>(*a, i);
  Cpu cpu;
  cpu.put(1, xs, kI32, xv);
  EXPECT_EQ(got, cpu.get<int64_t>(ir::OneHot{{1}, 4, {2}}, 2));
  EXPECT_EQ(bad[1], 0);
  // A value of 4 for 4 classes, and a gather index of -6 for size 5: recorded with the launch.
  a->size = 3;
  for (int64_t i = 0; i < a->n; ++i) cuda::ix::gather_element<int64_t, int32_t>(*a, i);
  EXPECT_EQ(bad[0], 3);
  EXPECT_EQ(bad[1], 5);
  Host<float> g = host(Shape{5}, std::vector<float>(5, 1.f), kF32, false);
  Host<int64_t> gi = host(Shape{2}, std::vector<int64_t>{-6, 4}, kI64, false);
  Result<cuda::IxArgs> b = cuda::gather_args(g.view, gi.view, 0, Shape{2}, "gather", "cuda:0");
  ASSERT_TRUE(b.ok());
  float out[2] = {7, 7};
  bad[1] = 0;
  b->x = at(g);
  b->index = at(gi);
  b->out = out;
  b->bad = bad;
  b->seq = 9;
  for (int64_t i = 0; i < 2; ++i) cuda::ix::gather_element<uint32_t, int64_t>(*b, i);
  EXPECT_EQ(bad[0], -6);
  EXPECT_EQ(bad[1], 9);
  EXPECT_EQ(out[0], 0.f);  // a bad index reads nothing
  EXPECT_EQ(out[1], 1.f);
}

TEST(CudaIndex, IndexRankLimitIsAClearRefusal) {
  cuda::View x;
  x.shape = Shape(9, 1);
  x.strides = std::vector<int64_t>(9, 1);
  Result<cuda::IxArgs> a = cuda::gather_args(x, x, 0, x.shape, "gather", "cuda:0");
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("cuda:0"), std::string::npos) << a.status().message();
}

TEST(CudaIndex, CumsumMatchesCpuBitsIncludingLongLines) {
  std::mt19937 rng(3);
  // [2, 70000] along dim 1 takes the cpu backend's block scheme (>= 2 * 32768); [3, 5, 4] along
  // dim 1 its column scan.
  for (const auto& [shape, dim] : std::vector<std::pair<Shape, int64_t>>{
           {{2, 70000}, 1}, {{3, 5, 4}, 1}, {{7}, 0}, {{3, 5, 4}, -1}}) {
    const std::vector<float> xv = floats(rng, numel(shape));
    cuda::ScanArgs a = cuda::scan_args(shape, dim);
    std::vector<float> got(xv.size());
    a.x = xv.data();
    a.out = got.data();
    for (int64_t l = 0; l < a.outer * a.inner; ++l) cuda::ix::scan_line<float, double, float>(a, l);
    Cpu cpu;
    cpu.put(1, shape, kF32, xv);
    EXPECT_TRUE(same_bits(got, cpu.get<float>(ir::Cumsum{{1}, dim, {2}}, 2)))
        << "cumsum " << shape.size() << "-d dim " << dim;
    std::vector<int64_t> iv(xv.size());
    for (size_t i = 0; i < iv.size(); ++i) iv[i] = static_cast<int64_t>(rng()) - (1ll << 31);
    std::vector<int64_t> igot(iv.size());
    a.x = iv.data();
    a.out = igot.data();
    for (int64_t l = 0; l < a.outer * a.inner; ++l) {
      cuda::ix::scan_line<int64_t, uint64_t, int64_t>(a, l);
    }
    cpu.put(3, shape, kI64, iv);
    EXPECT_EQ(igot, cpu.get<int64_t>(ir::Cumsum{{3}, dim, {4}}, 4));
  }
}

// The copy kernel (elementwise family kEwUnary, kCopyKind) over its argument block: element i
// of the iteration reads operand 0 and, with out_at, writes where operand 2's strides say.
void emulate_copy(const cuda::EwArgs& a, const float* in, float* out) {
  strided::Indexing ix;
  ix.shape.assign(a.shape, a.shape + a.rank);
  for (int k = 0; k < cuda::kMaxOperands; ++k) {
    ix.strides.emplace_back(a.strides[k], a.strides[k] + a.rank);
  }
  for (int64_t i = 0; i < a.n; ++i) {
    const int64_t o = a.out_at ? strided::element_offset(ix, 2, i) : i;
    out[o] = in[strided::element_offset(ix, 0, i)];
  }
}

TEST(CudaIndex, CopiesForCatFlipRepeatSliceAssignMatchCpu) {
  std::mt19937 rng(5);
  const Shape xs{3, 4, 2};
  Host<float> x = host(xs, floats(rng, numel(xs)), kF32, true);
  Cpu cpu;
  cpu.put(1, xs, kF32, x.v);
  {
    // Flip dims 0 and 2: negative strides from each dim's last element.
    cuda::View v = cuda::flip_view(x.view, {0, -1});
    Result<cuda::EwArgs> a = cuda::elementwise_args(xs, kF32, {v}, "flip", "cuda:0");
    ASSERT_TRUE(a.ok());
    std::vector<float> got(static_cast<size_t>(numel(xs)));
    emulate_copy(*a, x.buf.data() + v.offset, got.data());
    EXPECT_EQ(got, cpu.get<float>(ir::Flip{{1}, {0, -1}, {2}}, 2));
  }
  {
    // Repeat [2, 1, 2, 3] (a new leading dim): one copy into the interleaved shape.
    const std::vector<int64_t> reps = {2, 1, 2, 3};
    cuda::View v = cuda::repeat_view(x.view, reps);
    Result<cuda::EwArgs> a = cuda::elementwise_args(v.shape, kF32, {v}, "repeat", "cuda:0");
    ASSERT_TRUE(a.ok()) << a.status().message();
    std::vector<float> got(static_cast<size_t>(numel(v.shape)));
    emulate_copy(*a, x.buf.data() + v.offset, got.data());
    EXPECT_EQ(got, cpu.get<float>(ir::Repeat{{1}, reps, {3}}, 3));
  }
  {
    // Cat along dim 1 of x and y [3, 1, 2]: each into its slice of the output.
    const Shape ys{3, 1, 2};
    Host<float> y = host(ys, floats(rng, numel(ys)), kF32, false);
    cpu.put(4, ys, kF32, y.v);
    const Shape os{3, 5, 2};
    cuda::View out;
    out.shape = os;
    out.strides = strided::contiguous_strides(os);
    std::vector<float> got(static_cast<size_t>(numel(os)));
    int64_t at_dim = 0;
    for (const Host<float>* h : {&x, &y}) {
      cuda::View dst = out;
      dst.shape[1] = h->view.shape[1];
      dst.offset = at_dim * out.strides[1];
      const cuda::View src = h->view;
      Result<cuda::EwArgs> a = cuda::elementwise_args(dst.shape, kF32, {src, src, dst}, "cat", "c");
      ASSERT_TRUE(a.ok());
      a->out_at = 1;
      emulate_copy(*a, h->buf.data() + src.offset, got.data() + dst.offset);
      at_dim += h->view.shape[1];
    }
    EXPECT_EQ(got, cpu.get<float>(ir::Cat{{{1}, {4}}, 1, {5}}, 5));
  }
  {
    // SliceAssign x[:, 1:4:2, :] = s [1, 2, 1] (broadcast).
    const Shape ss{1, 2, 1};
    Host<float> s = host(ss, floats(rng, numel(ss)), kF32, false);
    cpu.put(6, ss, kF32, s.v);
    cuda::View out;
    out.shape = xs;
    out.strides = strided::contiguous_strides(xs);
    std::vector<float> got(static_cast<size_t>(numel(xs)));
    Result<cuda::EwArgs> a0 = cuda::elementwise_args(xs, kF32, {x.view, x.view, out}, "sa", "c");
    ASSERT_TRUE(a0.ok());
    a0->out_at = 1;
    emulate_copy(*a0, at(x), got.data());
    Result<cuda::View> dst = strided::slice_view(out, {0, 1, 0}, {3, 4, 2}, {1, 2, 1});
    ASSERT_TRUE(dst.ok());
    Result<cuda::EwArgs> a1 =
        cuda::elementwise_args(dst->shape, kF32, {s.view, s.view, *dst}, "sa", "c");
    ASSERT_TRUE(a1.ok());
    a1->out_at = 1;
    emulate_copy(*a1, at(s), got.data() + dst->offset);
    EXPECT_EQ(got,
              cpu.get<float>(ir::SliceAssign{{1}, {6}, {0, 1, 0}, {3, 4, 2}, {1, 2, 1}, {7}}, 7));
  }
}

TEST(CudaIndex, AdaptiveAvgPoolAndBackwardMatchCpuBits) {
  std::mt19937 rng(9);
  // Overlapping bins (7 -> 3, 5 -> 4), shrinking and growing.
  const Shape xs{2, 3, 7, 5}, ys{2, 3, 3, 4};
  const std::vector<float> xv = floats(rng, numel(xs)), gv = floats(rng, numel(ys));
  Cpu cpu;
  cpu.put(1, xs, kF32, xv);
  cpu.put(2, ys, kF32, gv);
  cuda::AdaptArgs a;
  a.planes = 6;
  a.h = 7;
  a.w = 5;
  a.ho = 3;
  a.wo = 4;
  std::vector<float> fwd(static_cast<size_t>(numel(ys))), back(static_cast<size_t>(numel(xs)));
  a.in = xv.data();
  a.out = fwd.data();
  for (int64_t i = 0; i < numel(ys); ++i) cuda::ix::adaptive_element<float>(a, i);
  EXPECT_TRUE(same_bits(fwd, cpu.get<float>(ir::AdaptiveAvgPool2d{{1}, {3, 4}, {3}}, 3)));
  a.backward = 1;
  a.in = gv.data();
  a.out = back.data();
  for (int64_t i = 0; i < numel(xs); ++i) cuda::ix::adaptive_element<float>(a, i);
  EXPECT_TRUE(same_bits(back, cpu.get<float>(ir::AdaptiveAvgPool2dBackward{{2}, {7, 5}, {4}}, 4)));
}

// The random kernels compute low + range * u and mean + std * n as one FMA each (kernels.cu),
// which is what the cpu backend's build gives (GCC contracts them for x86-64-v3). Should the cpu
// backend round them separately one day, this fails, and the device would no longer match it.
TEST(CudaIndex, RandomExpressionsMatchCpuBits) {
  Cpu cpu;
  const Shape s{1000};
  const std::vector<float> u = cpu.get<float>(ir::RandUniform{{1}, s, kF32, 42, -2.0, 3.0}, 1);
  const std::vector<double> n = cpu.get<double>(ir::RandNormal{{2}, s, kF64, 7, 0.5, 2.0}, 2);
  ASSERT_EQ(u.size(), 1000u);
  ASSERT_EQ(n.size(), 1000u);
  const float low = -2.0f, range = 3.0f - low;
  for (uint64_t i = 0; i < 1000; ++i) {
    ASSERT_EQ(u[i], std::fma(range, philox_uniform_f32(42, i), low)) << i;
    ASSERT_EQ(n[i], std::fma(2.0, philox_normal(7, i), 0.5)) << i;
  }
}

// ---- on a GPU (skipped without one, with the reason): the new kernels against the cpu backend
// ----

// A cpu and a cuda:0 backend given the same inputs and ops.
struct OnBoth {
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  std::unique_ptr<Backend> gpu;
  std::string why;  // why there is no gpu backend
  OnBoth() {
    if (!has_backend("cuda")) {
      why = "this build has no cuda backend";
      return;
    }
    Result<std::unique_ptr<Backend>> b = make_backend("cuda:0");
    if (b.ok()) {
      gpu = std::move(*b);
    } else {
      why = b.status().message();
    }
  }
  template <class T>
  void put(ir::TensorId id, const Shape& shape, DType dt, const std::vector<T>& v) {
    for (Backend* b : {cpu.get(), gpu.get()}) {
      TensorData d;
      d.meta = {shape, dt};
      d.bytes = Buffer::copy_of(v.data(), v.size() * sizeof(T));
      const Status st = b->execute(from_host_of(std::move(d), id));
      ASSERT_TRUE(st.ok()) << b->name() << ": " << st.message();
    }
  }
  void run(const ir::Op& op) {
    for (Backend* b : {cpu.get(), gpu.get()}) {
      const Status st = b->execute(op);
      ASSERT_TRUE(st.ok()) << b->name() << " " << ir::op_name(op) << ": " << st.message();
    }
  }
  // Output `id` of both, bit for bit (tol 0) or within tol relative (f32/f64 outputs).
  void expect(ir::TensorId id, double tol, const std::string& what) {
    Result<TensorData> a = cpu->read(id), b = gpu->read(id);
    ASSERT_TRUE(a.ok()) << what << ": " << a.status().message();
    ASSERT_TRUE(b.ok()) << what << ": " << b.status().message();
    ASSERT_EQ(a->meta, b->meta) << what;
    ASSERT_EQ(a->bytes.size(), b->bytes.size()) << what;
    if (tol == 0) {
      EXPECT_EQ(std::memcmp(a->bytes.data(), b->bytes.data(), a->bytes.size()), 0) << what;
      return;
    }
    const size_t es = dtype_size(a->meta.dtype);
    for (size_t i = 0; i < a->bytes.size() / es; ++i) {
      double x, y;
      if (es == 4) {
        float fx, fy;
        std::memcpy(&fx, a->bytes.data() + 4 * i, 4);
        std::memcpy(&fy, b->bytes.data() + 4 * i, 4);
        x = fx;
        y = fy;
      } else {
        std::memcpy(&x, a->bytes.data() + 8 * i, 8);
        std::memcpy(&y, b->bytes.data() + 8 * i, 8);
      }
      if (std::isnan(x) || std::isnan(y)) {
        ASSERT_EQ(std::isnan(x), std::isnan(y)) << what << " element " << i;
        continue;
      }
      ASSERT_LE(std::fabs(x - y), tol * (1 + std::fabs(x))) << what << " element " << i;
    }
  }
};

TEST(CudaDeviceRun, NewKernelsMatchCpu) {
  OnBoth on;
  if (!on.gpu) GTEST_SKIP() << "no cuda device: " << on.why;
  std::mt19937 rng(21);
  const Shape xs{4, 6, 5};
  on.put(1, xs, kF32, floats(rng, numel(xs)));
  std::vector<int64_t> iv(static_cast<size_t>(numel(Shape{4, 3, 5})));
  for (int64_t& v : iv) v = static_cast<int64_t>(rng() % 12) - 6;
  on.put(2, Shape{4, 3, 5}, kI64, iv);
  on.put(3, Shape{4, 3, 5}, kF32, floats(rng, 60));
  on.put(4, Shape{5}, kI64, std::vector<int64_t>{0, 5, -1, 5, 2});
  on.put(5, Shape{4, 5, 5}, kF32, floats(rng, 100));
  on.put(6, Shape{2, 3}, kI32, std::vector<int32_t>{0, 3, 1, 2, 2, 0});
  on.put(7, Shape{2, 70000}, kF32, floats(rng, 140000));
  // Exact: the cpu backend's bits.
  on.run(ir::Gather{{1}, 1, {2}, {10}});
  on.expect(10, 0, "gather");
  on.run(ir::ScatterAdd{{1}, 1, {2}, {3}, {11}});
  on.expect(11, 0, "scatter_add");
  on.run(ir::IndexSelect{{1}, 1, {4}, {12}});
  on.expect(12, 0, "index_select");
  on.run(ir::IndexSelectBackward{{5}, {4}, 1, xs, {13}});
  on.expect(13, 0, "index_select_backward");
  on.run(ir::OneHot{{6}, 4, {14}});
  on.expect(14, 0, "one_hot");
  on.run(ir::Cumsum{{7}, 1, {15}});
  on.expect(15, 0, "cumsum (long lines)");
  on.run(ir::Cat{{{1}, {5}, {1}}, 1, {16}});
  on.expect(16, 0, "cat");
  on.run(ir::Flip{{1}, {0, 2}, {17}});
  on.expect(17, 0, "flip");
  on.run(ir::Repeat{{1}, {2, 1, 3, 2}, {18}});
  on.expect(18, 0, "repeat");
  on.run(ir::SliceAssign{{1}, {3}, {0, 1, 0}, {4, 6, 5}, {1, 2, 1}, {19}});
  on.expect(19, 0, "slice_assign");
  on.run(ir::RandUniform{{20}, Shape{3000}, kF32, 42, -2.0, 3.0});
  on.expect(20, 0, "rand_uniform f32");
  on.run(ir::RandUniform{{21}, Shape{3000}, kF64, 43, 0.0, 1.0});
  on.expect(21, 0, "rand_uniform f64");
  on.run(ir::Bernoulli{{1}, {22}, 44});
  on.expect(22, 0, "bernoulli");
  // Normal: the device's log and cos may differ from glibc's in an f64's last bit.
  on.run(ir::RandNormal{{24}, Shape{3000}, kF64, 45, 0.5, 2.0});
  on.expect(24, 1e-14, "rand_normal f64");
  // Adam: the cpu backend's rounded operations, in its order.
  on.put(30, Shape{}, kF32, std::vector<float>{0.01f});
  on.put(31, Shape{}, kF32, std::vector<float>{0.3f});
  on.put(32, xs, kF32, floats(rng, numel(xs)));  // the gradient
  on.put(37, xs, kF32, floats(rng, numel(xs)));  // the first moment
  std::vector<float> sq = floats(rng, numel(xs));
  for (float& f : sq) f = f * f;
  on.put(33, xs, kF32, sq);
  on.run(ir::AdamStep{
      {1}, {32}, {37}, {33}, {30}, {31}, 0.9, 0.999, 1e-8, 0.01, 1e-3, true, {34}, {35}, {36}});
  for (ir::TensorId id : {34, 35, 36}) on.expect(id, 0, "adam_step output " + std::to_string(id));
  // Within f32 rounding: gelu and layer_norm gradients, attention.
  on.put(40, xs, kF32, floats(rng, numel(xs)));
  on.run(ir::GeluBackward{{40}, {1}, {41}});
  on.expect(41, 1e-5, "gelu_backward");
  on.put(42, Shape{5}, kF32, floats(rng, 5));
  on.run(ir::LayerNormBackward{{40}, {1}, {42}, 1, 1e-5, {43}, {44}, {45}});
  for (ir::TensorId id : {43, 44, 45})
    on.expect(id, 1e-4, "layer_norm_backward " + std::to_string(id));
  const Shape qs{2, 3, 37, 16}, ks{2, 3, 50, 16};
  on.put(50, qs, kF32, floats(rng, numel(qs)));
  on.put(51, ks, kF32, floats(rng, numel(ks)));
  on.put(52, ks, kF32, floats(rng, numel(ks)));
  on.put(53, qs, kF32, floats(rng, numel(qs)));
  for (bool causal : {false, true}) {
    on.run(ir::ScaledDotProductAttention{{50}, {51}, {52}, {}, causal, 0.25, {54}});
    on.expect(54, 1e-4, causal ? "attention causal" : "attention");
    on.run(ir::ScaledDotProductAttentionBackward{
        {53}, {50}, {51}, {52}, {}, causal, 0.25, {55}, {56}, {57}});
    for (ir::TensorId id : {55, 56, 57}) on.expect(id, 1e-4, "attention backward");
  }
  // Adaptive pooling and its backward, exact.
  const Shape px{2, 3, 7, 5}, py{2, 3, 3, 4};
  on.put(60, px, kF32, floats(rng, numel(px)));
  on.put(61, py, kF32, floats(rng, numel(py)));
  on.run(ir::AdaptiveAvgPool2d{{60}, {3, 4}, {62}});
  on.expect(62, 0, "adaptive_avg_pool2d");
  on.run(ir::AdaptiveAvgPool2dBackward{{61}, {7, 5}, {63}});
  on.expect(63, 0, "adaptive_avg_pool2d_backward");
}

// f16 and bf16 attention and its backward on `on` against the cpu backend's, within the dtype's
// rounding; causal cases too when `causal_too`.
void low_precision_attention(OnBoth& on, bool causal_too) {
  std::mt19937 rng(5);
  const Shape qs{2, 2, 33, 16}, ks{2, 2, 40, 16};
  on.put(1, qs, kF32, floats(rng, numel(qs)));
  on.put(2, ks, kF32, floats(rng, numel(ks)));
  on.put(3, ks, kF32, floats(rng, numel(ks)));
  on.put(4, qs, kF32, floats(rng, numel(qs)));
  ir::TensorId id = 10;
  for (DType dt : {kBF16, kF16}) {
    const ir::TensorId q = id++, k = id++, v = id++, g = id++;
    on.run(ir::Cast{{1}, dt, {q}});
    on.run(ir::Cast{{2}, dt, {k}});
    on.run(ir::Cast{{3}, dt, {v}});
    on.run(ir::Cast{{4}, dt, {g}});
    for (bool causal : {false, true}) {
      if (causal && !causal_too) continue;
      const ir::TensorId o = id++, dq = id++, dk = id++, dv = id++;
      on.run(ir::ScaledDotProductAttention{{q}, {k}, {v}, {}, causal, 0.25, {o}});
      on.run(ir::ScaledDotProductAttentionBackward{
          {g}, {q}, {k}, {v}, {}, causal, 0.25, {dq}, {dk}, {dv}});
      for (ir::TensorId t : {o, dq, dk, dv}) {
        const ir::TensorId f = id++;
        on.run(ir::Cast{{t}, kF32, {f}});
        // A few units in the last place of the dtype (bf16: 8 bits of mantissa).
        on.expect(f, dt == kBF16 ? 3e-2 : 4e-3,
                  std::string(dtype_name(dt)) + (causal ? " causal" : "") + " attention %" +
                      std::to_string(t));
      }
    }
  }
}

// f16/bf16 attention as the backend chooses (cuDNN where it serves the case, else the f32
// kernels, docs/cuda.md).
TEST(CudaDeviceRun, LowPrecisionAttentionMatchesCpu) {
  OnBoth on;
  if (!on.gpu) GTEST_SKIP() << "no cuda device: " << on.why;
  low_precision_attention(on, true);
}

// The cases cuDNN's fused attention serves (no mask, not causal), on cuDNN only
// (TW_CUDA_SDPA=cudnn): a refusal fails the op, naming cuDNN's reason.
TEST(CudaDeviceRun, LowPrecisionAttentionOnCudnnMatchesCpu) {
  setenv("TW_CUDA_SDPA", "cudnn", 1);
  OnBoth on;
  unsetenv("TW_CUDA_SDPA");
  if (!on.gpu) GTEST_SKIP() << "no cuda device: " << on.why;
  low_precision_attention(on, false);
}

TEST(CudaDeviceRun, BadIndexFailsTheNextReadWithTheCpuMessage) {
  OnBoth on;
  if (!on.gpu) GTEST_SKIP() << "no cuda device: " << on.why;
  on.put(1, Shape{5}, kF32, std::vector<float>(5, 1.f));
  on.put(2, Shape{2}, kI64, std::vector<int64_t>{1, 7});
  ASSERT_TRUE(on.gpu->execute(ir::Gather{{1}, 0, {2}, {3}}).ok());  // queued: checked later
  Result<TensorData> r = on.gpu->read(3);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("gather: index 7 out of range for dim 0 of size 5"),
            std::string::npos)
      << r.status().message();
  // The error is reported once; the backend goes on.
  on.put(4, Shape{2}, kI64, std::vector<int64_t>{1, -5});
  ASSERT_TRUE(on.gpu->execute(ir::Gather{{1}, 0, {4}, {5}}).ok());
  EXPECT_TRUE(on.gpu->read(5).ok());
}

}  // namespace
}  // namespace tw
