// The cuda backend's host-side logic, on every machine (no GPU needed): the per-kind math its
// kernels compile (backend/kind_math.h) against the cpu backend, the index arithmetic of its
// elementwise and reduce kernels (plan.h, strided_view.h) against the cpu backend's strided
// iterator, launch configurations, and cuBLASLt's parameters (plan_gemm) checked by running a
// host emulation of cublasLtMatmul's documented column-major semantics with them. And on a
// machine without a CUDA device, the device's refusal says why.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <tuple>

#include "backend/cpu/strided.h"
#include "backend/cuda/plan.h"
#include "backend/kind_math.h"
#include "backend/registry.h"
#include "backend/upload.h"
#include "ir/infer.h"

namespace tw {
namespace {

namespace km = kind_math;

// ---- kind_math against the cpu backend ----

// Runs `op` (outputs %3) on a fresh cpu backend with f32/i64 inputs %1 (and %2), reading %3 back.
template <class T>
TensorData run_cpu(const ir::Op& op, const std::vector<T>& a, const std::vector<T>& b) {
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  const DType dt = std::is_same_v<T, float> ? kF32 : kI64;
  auto upload = [&](const std::vector<T>& v, ir::TensorId id) {
    TensorData d;
    d.meta = {Shape{static_cast<int64_t>(v.size())}, dt};
    d.bytes = Buffer::copy_of(v.data(), v.size() * sizeof(T));
    EXPECT_TRUE(cpu->execute(from_host_of(std::move(d), id)).ok());
  };
  upload(a, 1);
  if (!b.empty()) upload(b, 2);
  const Status st = cpu->execute(op);
  EXPECT_TRUE(st.ok()) << st.message();
  Result<TensorData> r = cpu->read(3);
  EXPECT_TRUE(r.ok());
  return r.ok() ? *r : TensorData{};
}

// The value of element i of a result as double (f32, i64 or bool).
double value_at(const TensorData& d, size_t i) {
  const std::byte* p = d.bytes.data();
  switch (d.meta.dtype) {
    case kF32: {
      float f;
      std::memcpy(&f, p + 4 * i, 4);
      return f;
    }
    case kI64: {
      int64_t v;
      std::memcpy(&v, p + 8 * i, 8);
      return static_cast<double>(v);
    }
    case kBool: return static_cast<double>(static_cast<uint8_t>(p[i]));
    default: return NAN;
  }
}

bool close(double want, double got) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
  if (std::isinf(want) || std::isinf(got)) return want == got;
  return std::fabs(want - got) <= 1e-5 * std::fabs(want) + 1e-6;
}

const std::vector<float> kFloats = {-3.75f, -2.5f, -1.f, -0.5f, -0.f, 0.f,   0.25f, 0.5f,
                                    1.f,    1.5f,  2.5f, 3.f,   7.5f, 1e-3f, NAN,   INFINITY};

TEST(CudaKindMath, UnaryFloatMatchesCpu) {
  for (int k = 0; k < km::kUnaryCount; ++k) {
    const auto kind = static_cast<ir::UnaryKind>(k);
    const TensorData want = run_cpu(ir::Op(ir::Unary{kind, ir::In{1}, ir::Out{3}}), kFloats, {});
    for (size_t i = 0; i < kFloats.size(); ++i) {
      const double got = km::unary_float<float>(k, kFloats[i]);
      EXPECT_TRUE(close(value_at(want, i), got))
          << ir::kind_name(kind) << "(" << kFloats[i] << "): cpu " << value_at(want, i)
          << ", kind_math " << got;
    }
  }
}

TEST(CudaKindMath, BinaryFloatMatchesCpu) {
  std::vector<float> a, b;
  for (float x : kFloats) {
    for (float y : {-2.f, -0.5f, 0.f, 0.75f, 3.f, NAN}) {
      a.push_back(x);
      b.push_back(y);
    }
  }
  for (int k = 0; k < km::kBinaryCount; ++k) {
    const auto kind = static_cast<ir::BinaryKind>(k);
    const TensorData want =
        run_cpu(ir::Op(ir::Binary{kind, ir::In{1}, ir::In{2}, ir::Out{3}}), a, b);
    for (size_t i = 0; i < a.size(); ++i) {
      const double got = km::binary_float<float>(k, a[i], b[i]);
      EXPECT_TRUE(close(value_at(want, i), got))
          << ir::kind_name(kind) << "(" << a[i] << ", " << b[i] << "): cpu " << value_at(want, i)
          << ", kind_math " << got;
    }
  }
}

TEST(CudaKindMath, IntegerKindsMatchCpu) {
  const std::vector<int64_t> v = {-7, -3, -1, 0, 1, 2, 5, 9};
  std::vector<int64_t> a, b;
  for (int64_t x : v) {
    for (int64_t y : {-3, -1, 1, 2, 4}) {
      a.push_back(x);
      b.push_back(y);
    }
  }
  for (int k = 0; k < km::kUnaryCount; ++k) {
    const auto kind = static_cast<ir::UnaryKind>(k);
    if (ir::is_float_math(kind)) continue;  // computed in f32 (above)
    const TensorData want = run_cpu(ir::Op(ir::Unary{kind, ir::In{1}, ir::Out{3}}), v, {});
    for (size_t i = 0; i < v.size(); ++i) {
      EXPECT_EQ(value_at(want, i), static_cast<double>(km::unary_int(k, v[i])))
          << ir::kind_name(kind) << "(" << v[i] << ")";
    }
  }
  for (int k = 0; k < km::kBinaryCount; ++k) {
    const auto kind = static_cast<ir::BinaryKind>(k);
    // Division and pow of integers compute in f32 (binary_compute_dtype); remainder is refused.
    if (ir::binary_compute_dtype(kind, kI64, kI64) != kI64 || kind == ir::BinaryKind::kRemainder)
      continue;
    const TensorData want =
        run_cpu(ir::Op(ir::Binary{kind, ir::In{1}, ir::In{2}, ir::Out{3}}), a, b);
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(value_at(want, i), static_cast<double>(km::binary_int(k, a[i], b[i])))
          << ir::kind_name(kind) << "(" << a[i] << ", " << b[i] << ")";
    }
  }
}

// ---- index arithmetic ----

// A random view: a permuted, sliced (stepped) and partly broadcast layout of a buffer.
cuda::View random_view(std::mt19937& rng, const Shape& shape) {
  cuda::View v;
  v.shape = shape;
  const size_t r = shape.size();
  std::vector<size_t> order(r);
  for (size_t i = 0; i < r; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  v.strides.assign(r, 0);
  int64_t acc = 1;
  for (size_t i : order) {
    const int64_t step = 1 + static_cast<int64_t>(rng() % 2);
    v.strides[i] = rng() % 5 == 0 ? 0 : acc * step;  // 0: an expanded dim
    acc *= shape[i] * step;
  }
  v.offset = static_cast<int64_t>(rng() % 7);
  return v;
}

TEST(CudaPlan, ElementwiseOffsetsMatchCpuIterator) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    Shape out;
    const size_t rank = 1 + rng() % 5;
    for (size_t d = 0; d < rank; ++d) out.push_back(1 + static_cast<int64_t>(rng() % 4));
    // Operand 0 has the output's rank; operand 1 fewer dims, some of size 1 (broadcast).
    cuda::View a = random_view(rng, out);
    Shape bs(out.begin() + static_cast<int64_t>(rng() % rank), out.end());
    for (int64_t& s : bs) s = rng() % 3 == 0 ? 1 : s;
    cuda::View b = random_view(rng, bs);
    Result<cuda::EwArgs> args = cuda::elementwise_args(out, kF32, {a, b}, "test", "cuda:0");
    ASSERT_TRUE(args.ok()) << args.status().message();
    // The cpu backend's iterator over the same views.
    cpu::CpuTensor ca, cb;
    ca.shape = a.shape;
    ca.strides = a.strides;
    cb.shape = b.shape;
    cb.strides = b.strides;
    cpu::StridedIter<2> it(out, {cpu::broadcast_strides(ca, out), cpu::broadcast_strides(cb, out)});
    strided::Indexing ix;
    ix.shape.assign(args->shape, args->shape + args->rank);
    ix.strides = {std::vector<int64_t>(args->strides[0], args->strides[0] + args->rank),
                  std::vector<int64_t>(args->strides[1], args->strides[1] + args->rank)};
    ASSERT_EQ(args->n, numel(out));
    for (int64_t i = 0; i < args->n; ++i) {
      it.seek(i);
      ASSERT_EQ(strided::element_offset(ix, 0, i), it.off[0]) << "trial " << trial << " i " << i;
      ASSERT_EQ(strided::element_offset(ix, 1, i), it.off[1]) << "trial " << trial << " i " << i;
    }
  }
}

TEST(CudaPlan, MergesDimsAndRefusesTooManyNamingTheDevice) {
  // A contiguous [2, 3, 4] merges into one dim; a broadcast operand keeps its own split.
  Result<cuda::EwArgs> a = cuda::elementwise_args(
      {2, 3, 4}, kF32, {cuda::View{{2, 3, 4}, {12, 4, 1}, 0, kF32}}, "add", "cuda:0");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->rank, 1);
  EXPECT_EQ(a->shape[0], 24);
  // Eight dims of stride 2^(2i+1), unmergeable: more than kMaxRank.
  Shape s(8, 2);
  std::vector<int64_t> st(8);
  for (int i = 0; i < 8; ++i) st[7 - i] = int64_t{2} << (2 * i);
  Result<cuda::EwArgs> b =
      cuda::elementwise_args(s, kF32, {cuda::View{s, st, 0, kF32}}, "unary exp", "cuda:1");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("unary exp"), std::string::npos);
  EXPECT_NE(b.status().message().find("cuda:1"), std::string::npos);
}

TEST(CudaPlan, LaunchConfiguration) {
  EXPECT_EQ(cuda::launch_1d(0).grid, 1);
  EXPECT_EQ(cuda::launch_1d(1).grid, 1);
  EXPECT_EQ(cuda::launch_1d(256).grid, 1);
  EXPECT_EQ(cuda::launch_1d(257).grid, 2);
  EXPECT_EQ(cuda::launch_1d(int64_t{1} << 40).grid, cuda::kMaxBlocks);
  EXPECT_EQ(cuda::launch_1d(1000, 128).grid, 8);
  EXPECT_EQ(cuda::launch_1d(1000, 128).block, 128);
}

// The reduce kernel's walk (kept index -> base, reduced index -> offset), emulated on the host,
// sums what a direct loop over the view sums.
TEST(CudaPlan, ReduceIndexingCoversEachElementOnce) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 100; ++trial) {
    Shape shape;
    const size_t rank = 1 + rng() % 4;
    for (size_t d = 0; d < rank; ++d) shape.push_back(1 + static_cast<int64_t>(rng() % 4));
    cuda::View x = random_view(rng, shape);
    for (int64_t& s : x.strides) s = s == 0 ? 1 : s;  // a real tensor: no expanded dims
    std::vector<int64_t> dims;
    for (size_t d = 0; d < rank; ++d) {
      if (rng() % 2) dims.push_back(static_cast<int64_t>(d) - (rng() % 2 ? 0 : int64_t(rank)));
    }
    Result<cuda::ReduceArgs> r = cuda::reduce_args(x, dims, "reduce sum", "cuda:0");
    ASSERT_TRUE(r.ok());
    // Visit counts per element offset: every element of the view exactly once.
    std::map<int64_t, int> seen, want;
    cpu::CpuTensor cx;
    cx.shape = x.shape;
    cx.strides = x.strides;
    cpu::StridedIter<1> it(shape, {x.strides});
    for (int64_t i = 0; i < numel(shape); ++i) {
      it.seek(i);
      ++want[it.off[0]];
    }
    for (int64_t o = 0; o < r->n_out; ++o) {
      int64_t base = 0, rem = o;
      for (int d = r->kept_rank - 1; d >= 0; --d) {
        base += (rem % r->kshape[d]) * r->kstride[d];
        rem /= r->kshape[d];
      }
      for (int64_t j = 0; j < r->n_red; ++j) {
        int64_t e = base, rr = j;
        for (int d = r->red_rank - 1; d >= 0; --d) {
          e += (rr % r->rshape[d]) * r->rstride[d];
          rr /= r->rshape[d];
        }
        ++seen[e];
      }
    }
    EXPECT_EQ(seen, want) << "trial " << trial;
    EXPECT_EQ(r->n_out * r->n_red, numel(shape));
  }
}

// ---- cuBLASLt parameters ----

// cublasLtMatmul's documented semantics, on the host: D = op(A) op(B), column-major, A and B
// as stored matrices of (rows x cols, ld) per batch at offset + batch * stride.
std::vector<double> emulate_lt(const cuda::GemmPlan& p, const std::vector<double>& abuf,
                               const std::vector<double>& bbuf) {
  std::vector<double> d(static_cast<size_t>(p.batch * p.batch_stride_c), 0.0);
  auto at = [](const cuda::GemmOperand& o, const std::vector<double>& buf, int64_t batch, int64_t i,
               int64_t j) {  // element (i, j) of op(X)
    const int64_t r = o.transpose ? j : i, c = o.transpose ? i : j;
    return buf[static_cast<size_t>(o.offset + batch * o.batch_stride + r + c * o.ld)];
  };
  for (int64_t bt = 0; bt < p.batch; ++bt) {
    for (int64_t i = 0; i < p.m; ++i) {
      for (int64_t j = 0; j < p.n; ++j) {
        double s = 0;
        for (int64_t k = 0; k < p.k; ++k) s += at(p.a, abuf, bt, i, k) * at(p.b, bbuf, bt, k, j);
        d[static_cast<size_t>(bt * p.batch_stride_c + i + j * p.ldc)] = s;
      }
    }
  }
  return d;
}

// Row-major A @ B over views of buffers, broadcast batch: the reference.
std::vector<double> reference_matmul(const cuda::View& a, const std::vector<double>& abuf,
                                     const cuda::View& b, const std::vector<double>& bbuf,
                                     const Shape& out) {
  const size_t ro = out.size();
  const int64_t M = out[ro - 2], N = out[ro - 1], K = a.shape[a.shape.size() - 1];
  const Shape batch(out.begin(), out.end() - 2);
  auto bstr = [&](const cuda::View& v) {
    return strided::broadcast_strides(Shape(v.shape.begin(), v.shape.end() - 2),
                                      std::vector<int64_t>(v.strides.begin(), v.strides.end() - 2),
                                      batch);
  };
  const std::vector<int64_t> sa = bstr(a), sb = bstr(b);
  std::vector<double> c;
  for (int64_t bt = 0; bt < numel(batch); ++bt) {
    int64_t oa = a.offset, ob = b.offset, rem = bt;
    for (size_t d = batch.size(); d-- > 0;) {
      oa += (rem % batch[d]) * sa[d];
      ob += (rem % batch[d]) * sb[d];
      rem /= batch[d];
    }
    const size_t ra = a.shape.size(), rb = b.shape.size();
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t n = 0; n < N; ++n) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) {
          s += abuf[static_cast<size_t>(oa + m * a.strides[ra - 2] + k * a.strides[ra - 1])] *
               bbuf[static_cast<size_t>(ob + k * b.strides[rb - 2] + n * b.strides[rb - 1])];
        }
        c.push_back(s);
      }
    }
  }
  return c;
}

struct GemmCase {
  const char* name;
  cuda::View a, b;
  Shape out;
  bool copies;  // the plan must ask for copies
};

TEST(CudaPlan, GemmParametersGiveTheProduct) {
  auto v = [](Shape s, std::vector<int64_t> st, int64_t off = 0) {
    return cuda::View{std::move(s), std::move(st), off, kF32};
  };
  const std::vector<GemmCase> cases = {
      {"contiguous", v({3, 4}, {4, 1}), v({4, 5}, {5, 1}), {3, 5}, false},
      {"transposed weight (linear)", v({3, 4}, {4, 1}), v({4, 5}, {1, 4}), {3, 5}, false},
      {"transposed a", v({3, 4}, {1, 3}), v({4, 5}, {5, 1}), {3, 5}, false},
      {"padded rows, offset", v({3, 4}, {6, 1}, 2), v({4, 5}, {7, 1}, 1), {3, 5}, false},
      {"batched", v({2, 3, 4}, {12, 4, 1}), v({2, 4, 5}, {20, 5, 1}), {2, 3, 5}, false},
      {"broadcast b", v({2, 3, 4}, {12, 4, 1}), v({4, 5}, {5, 1}), {2, 3, 5}, false},
      {"broadcast a", v({1, 3, 4}, {0, 4, 1}), v({2, 4, 5}, {20, 5, 1}), {2, 3, 5}, false},
      {"vector times matrix", v({1, 4}, {4, 1}), v({4, 5}, {5, 1}), {1, 5}, false},
      {"matrix times column", v({3, 4}, {4, 1}), v({4, 1}, {1, 1}), {3, 1}, false},
      {"two batch dims merge",
       v({2, 3, 3, 4}, {36, 12, 4, 1}),
       v({2, 3, 4, 5}, {60, 20, 5, 1}),
       {2, 3, 3, 5},
       false},
      {"stepped columns", v({3, 4}, {8, 2}), v({4, 5}, {5, 1}), {3, 5}, true},
      {"crossed broadcast",
       v({2, 1, 3, 4}, {12, 0, 4, 1}),
       v({1, 3, 4, 5}, {0, 20, 5, 1}),
       {2, 3, 3, 5},
       true},
  };
  for (const GemmCase& c : cases) {
    Result<cuda::GemmPlan> p = cuda::plan_gemm(c.a, c.b, c.out, false, "matmul", "cuda:0");
    ASSERT_TRUE(p.ok()) << c.name << ": " << p.status().message();
    EXPECT_EQ(p->a.copy || p->b.copy, c.copies) << c.name;
    if (c.copies) continue;
    // Buffers large enough for every view, filled with distinct values.
    auto fill = [](size_t n) {
      std::vector<double> buf(n);
      for (size_t i = 0; i < n; ++i) buf[i] = static_cast<double>((i * 7) % 13) - 6.0;
      return buf;
    };
    const std::vector<double> abuf = fill(256), bbuf = fill(256);
    // cuBLASLt's A is our B; its D (N x M column-major) is our row-major C.
    const std::vector<double> got = emulate_lt(*p, bbuf, abuf);
    const std::vector<double> want = reference_matmul(c.a, abuf, c.b, bbuf, c.out);
    EXPECT_EQ(got, want) << c.name;
    EXPECT_GE(p->a.ld, p->a.rows) << c.name;  // cuBLASLt's requirement on leading dims
    EXPECT_GE(p->b.ld, p->b.rows) << c.name;
  }
}

TEST(CudaPlan, GemmComputeTypesAndRefusals) {
  cuda::View a{{2, 2}, {2, 1}, 0, kF32}, b = a;
  EXPECT_EQ(cuda::plan_gemm(a, b, {2, 2}, false, "matmul", "cuda:0")->compute,
            cuda::GemmCompute::kF32);
  EXPECT_EQ(cuda::plan_gemm(a, b, {2, 2}, true, "matmul", "cuda:0")->compute,
            cuda::GemmCompute::kTF32);
  a.dtype = b.dtype = kBF16;
  EXPECT_EQ(cuda::plan_gemm(a, b, {2, 2}, true, "matmul", "cuda:0")->compute,
            cuda::GemmCompute::kBF16F32);
  a.dtype = b.dtype = kI64;
  Result<cuda::GemmPlan> r = cuda::plan_gemm(a, b, {2, 2}, false, "matmul", "cuda:0");
  ASSERT_FALSE(r.ok());
  const std::string& msg = r.status().message();
  EXPECT_NE(msg.find("matmul on i64"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not supported by the cuda:0 backend"), std::string::npos) << msg;
  EXPECT_EQ(cuda::pointer_alignment(0), 256u);
  EXPECT_EQ(cuda::pointer_alignment(4), 4u);
  EXPECT_EQ(cuda::pointer_alignment(48), 16u);
}

// ---- cuDNN parameters ----

// The output dims plan_conv and plan_pool give cuDNN's descriptors are the ones ir::infer gives
// the op (the output tensor cuDNN writes), for strides, padding, dilation and groups.
TEST(CudaPlan, ConvAndPoolDescriptorsMatchInference) {
  struct ConvCase {
    Shape x, w;
    std::vector<int64_t> stride, padding, dilation;
    int64_t groups;
  };
  const std::vector<ConvCase> convs = {
      {{2, 3, 8, 8}, {4, 3, 3, 3}, {1, 1}, {0, 0}, {1, 1}, 1},
      {{1, 4, 9, 7}, {6, 2, 3, 2}, {2, 1}, {1, 0}, {1, 2}, 2},
      {{3, 8, 16, 16}, {8, 1, 5, 5}, {2, 2}, {2, 2}, {1, 1}, 8},
      {{1, 1, 5, 5}, {1, 1, 1, 1}, {3, 3}, {0, 0}, {1, 1}, 1},
  };
  for (const ConvCase& c : convs) {
    const std::map<ir::TensorId, TensorMeta> metas = {{1, {c.x, kF32}}, {2, {c.w, kF32}}};
    const ir::Op op = ir::Conv2d{ir::In{1}, ir::In{2},  ir::In{0}, c.stride,
                                 c.padding, c.dilation, c.groups,  ir::Out{3}};
    Result<std::vector<TensorMeta>> want =
        ir::infer(op, [&](ir::TensorId id) -> Result<TensorMeta> { return metas.at(id); });
    ASSERT_TRUE(want.ok()) << want.status().message();
    Result<cuda::ConvPlan> p =
        cuda::plan_conv(c.x, c.w, c.stride, c.padding, c.dilation, c.groups, "conv2d", "cuda:0");
    ASSERT_TRUE(p.ok());
    EXPECT_EQ((Shape{p->n, p->k, p->p, p->q}), (*want)[0].shape) << shape_str(c.x);
    EXPECT_EQ(p->cg * p->groups, p->c);
  }
  const Shape x = {2, 3, 7, 6};
  for (const auto& [kernel, stride, padding] :
       {std::tuple{std::vector<int64_t>{2, 2}, std::vector<int64_t>{2, 2},
                   std::vector<int64_t>{0, 0}},
        std::tuple{std::vector<int64_t>{3, 2}, std::vector<int64_t>{1, 2},
                   std::vector<int64_t>{1, 1}}}) {
    const std::map<ir::TensorId, TensorMeta> metas = {{1, {x, kF32}}};
    const ir::Op op =
        ir::Pool2d{ir::PoolKind::kAvg, ir::In{1}, kernel, stride, padding, ir::Out{3}};
    Result<std::vector<TensorMeta>> want =
        ir::infer(op, [&](ir::TensorId id) -> Result<TensorMeta> { return metas.at(id); });
    ASSERT_TRUE(want.ok()) << want.status().message();
    Result<cuda::PoolPlan> p = cuda::plan_pool(x, kernel, stride, padding, "avg_pool2d", "cuda:0");
    ASSERT_TRUE(p.ok());
    EXPECT_EQ((Shape{p->n, p->c, p->p, p->q}), (*want)[0].shape);
  }
  // A dim beyond int32 is refused, naming op and device.
  Result<cuda::ConvPlan> big = cuda::plan_conv({int64_t{1} << 32, 1, 4, 4}, {1, 1, 1, 1}, {1, 1},
                                               {0, 0}, {1, 1}, 1, "conv2d", "cuda:2");
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("conv2d"), std::string::npos);
  EXPECT_NE(big.status().message().find("cuda:2"), std::string::npos);
}

// ---- the device ----

// This build's cuda backend (when it has one) either makes device 0 or says why not, naming
// the missing device; a GPU-less machine (CI) gets "no CUDA device: <reason>".
TEST(CudaDevice, MissingDeviceIsAClearRefusal) {
  if (!has_backend("cuda")) GTEST_SKIP() << "this build has no cuda backend (nvcc not found)";
  Result<std::unique_ptr<Backend>> b = make_backend("cuda:0");
  if (b.ok()) {
    EXPECT_EQ((*b)->name(), "cuda:0");
    Result<std::unique_ptr<Backend>> far = make_backend("cuda:999");
    ASSERT_FALSE(far.ok());
    EXPECT_NE(far.status().message().find("no CUDA device 999"), std::string::npos)
        << far.status().message();
    return;
  }
  EXPECT_NE(b.status().message().find("no CUDA device"), std::string::npos) << b.status().message();
  EXPECT_NE(b.status().message().find("cuda:0"), std::string::npos) << b.status().message();
}

}  // namespace
}  // namespace tw
