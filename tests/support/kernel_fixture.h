// What the CPU kernel tests (tests/unit/cpu/*_kernels_test.cc) share: host tensors from
// values, a KernelContext harness that gives inputs and outputs fresh ids and runs one kernel,
// a runner that takes the output meta from ir::infer, values read back through
// copy_to_contiguous (so strided outputs read as logical tensors), deterministic pseudo-random
// inputs, and runs at a given intra-op thread count.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <type_traits>
#include <utility>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/strided.h"
#include "core/tensor_data.h"
#include "core/thread_pool.h"
#include "ir/infer.h"

namespace tw::cpu::kernel_test {

#define TW_ASSERT_OK(expr)                    \
  do {                                        \
    ::tw::Status _st = (expr);                \
    ASSERT_TRUE(_st.ok()) << _st.to_string(); \
  } while (0)

// A contiguous tensor holding `v` (row-major); an empty `v` leaves it uninitialised.
template <class T>
CpuTensor make(const Shape& shape, DType dtype, const std::vector<T>& v) {
  CpuTensor t = alloc_tensor({shape, dtype});
  if (!v.empty()) {
    EXPECT_EQ(static_cast<size_t>(t.numel()), v.size());
    std::memcpy(t.bytes(), v.data(),
                std::min(v.size(), static_cast<size_t>(t.numel())) * sizeof(T));
  }
  return t;
}
// The same with the dtype of T (float: f32, double: f64, ...).
template <class T>
CpuTensor make(const Shape& shape, const std::vector<T>& v) {
  return make(shape, dtype_of<T>(), v);
}
inline CpuTensor f32(const Shape& s, const std::vector<float>& v) { return make(s, kF32, v); }
inline CpuTensor f64(const Shape& s, const std::vector<double>& v) { return make(s, kF64, v); }
inline CpuTensor i32(const Shape& s, const std::vector<int32_t>& v) { return make(s, kI32, v); }
inline CpuTensor i64(const Shape& s, const std::vector<int64_t>& v) { return make(s, kI64, v); }
inline CpuTensor u8(const Shape& s, const std::vector<uint8_t>& v) { return make(s, kU8, v); }
inline CpuTensor boolean(const Shape& s, const std::vector<uint8_t>& v) {
  return make(s, kBool, v);
}

// A 2-D tensor's transpose as a strided view (no copy).
inline CpuTensor transposed(CpuTensor t) {
  std::swap(t.shape[0], t.shape[1]);
  std::swap(t.strides[0], t.strides[1]);
  return t;
}

// The logical values of a (possibly strided) tensor, in row-major order.
template <class T>
std::vector<T> values(const CpuTensor& t) {
  std::vector<T> v(static_cast<size_t>(t.numel()));
  copy_to_contiguous(t, reinterpret_cast<std::byte*>(v.data()));
  return v;
}
inline std::vector<bool> bools(const CpuTensor& t) {
  std::vector<bool> r;
  for (uint8_t b : values<uint8_t>(t)) r.push_back(b != 0);
  return r;
}

// Deterministic pseudo-random values in [-1, 1) (a 64-bit LCG: independent of the kernels'
// own generators, so a test's inputs do not move when core/philox.h does).
template <class T>
std::vector<T> random_values(int64_t n, uint64_t seed) {
  std::vector<T> v(static_cast<size_t>(n));
  uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (auto& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<T>(static_cast<double>(s >> 11) / 4503599627370496.0 - 1.0);
  }
  return v;
}
inline CpuTensor random_f32(const Shape& shape, uint64_t seed) {
  return f32(shape, random_values<float>(numel(shape), seed));
}
inline CpuTensor random_f64(const Shape& shape, uint64_t seed) {
  return f64(shape, random_values<double>(numel(shape), seed));
}

// Builds a KernelContext: inputs and outputs get fresh ids; run() executes one kernel and takes
// its output, fails() returns the kernel's Status for the error cases.
struct Harness {
  KernelContext ctx;
  ir::TensorId next = 1;
  ir::In in(const CpuTensor& t) {
    ir::In i{next++};
    ctx.add_input(i.id, t);
    return i;
  }
  ir::Out out(const Shape& shape, DType dtype) {
    ir::Out o{next++};
    ctx.add_output(o.id, {shape, dtype});
    return o;
  }
  CpuTensor take(ir::Out o) {
    auto r = ctx.take(o.id);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? std::move(r).value() : CpuTensor{};
  }
  template <class Op>
  CpuTensor run(const Op& op) {
    Status st = cpu::run(op, ctx);
    EXPECT_TRUE(st.ok()) << st.to_string();
    if (!st.ok()) return {};
    return take(op.out);
  }
  template <class Op>
  Status fails(const Op& op) {
    return cpu::run(op, ctx);
  }
};

// Runs `op` on `inputs` (in the op's input order) with the output meta ir::infer gives, so the
// kernel sees exactly what the backend would hand it.
template <class Op>
CpuTensor run_inferred(Op op, const std::vector<CpuTensor>& inputs) {
  Harness h;
  std::map<ir::TensorId, TensorMeta> metas;
  size_t next_input = 0;
  op.fields([&](const char*, auto& f) {
    if constexpr (std::is_same_v<std::decay_t<decltype(f)>, ir::In>) {
      const CpuTensor& t = inputs.at(next_input++);
      f = h.in(t);
      metas[f.id] = t.meta();
    }
  });
  op.out.id = h.next++;
  auto m = ir::infer(ir::Op(op), [&](ir::TensorId t) -> Result<TensorMeta> { return metas.at(t); });
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  if (!m.ok()) return {};
  h.ctx.add_output(op.out.id, m->at(0));
  return h.run(op);
}

// Runs body with the intra-op pool at n threads, restoring the previous count afterwards.
template <class F>
void with_threads(int n, F&& body) {
  const int before = get_num_threads();
  set_num_threads(n);
  body();
  set_num_threads(before);
}

// Runs `make_result` at 1, 2 and 3 threads, expects the same bytes each time and returns the
// first result.
template <class F>
CpuTensor thread_independent(F&& make_result) {
  CpuTensor first;
  std::vector<uint8_t> bytes[3];
  for (int t = 1; t <= 3; ++t) {
    with_threads(t, [&] {
      CpuTensor r = make_result();
      bytes[t - 1].resize(static_cast<size_t>(r.numel()) * dtype_size(r.dtype));
      copy_to_contiguous(r, reinterpret_cast<std::byte*>(bytes[t - 1].data()));
      if (t == 1) first = r;
    });
  }
  EXPECT_EQ(bytes[0], bytes[1]) << "1 vs 2 threads";
  EXPECT_EQ(bytes[0], bytes[2]) << "1 vs 3 threads";
  return first;
}

}  // namespace tw::cpu::kernel_test
