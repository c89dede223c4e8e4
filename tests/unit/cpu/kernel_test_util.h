// Helpers shared by the CPU kernel tests that call kernels directly (dnnl_backward_test.cc,
// depthwise_conv_test.cc): seeded inputs, one op run into a host vector, and the same bytes at
// several intra-op thread counts.
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "backend/cpu/kernels.h"
#include "core/thread_pool.h"

namespace tw::cpu::test {

// Values in [-1, 1) from a 64-bit LCG seeded with `seed`.
inline CpuTensor filled(const Shape& shape, uint64_t seed) {
  CpuTensor t = alloc_tensor({shape, kF32});
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < t.numel(); ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    t.data<float>()[i] = static_cast<float>(static_cast<double>(s >> 40) / 8388608.0 - 1.0);
  }
  return t;
}

// Runs `op` on `inputs` (ids 1, 2, ...) into an output of `out_shape` and dtype T.
template <class Op, class T = float>
std::vector<T> run_op(Op op, const std::vector<CpuTensor>& inputs, const Shape& out_shape) {
  KernelContext ctx;
  for (size_t i = 0; i < inputs.size(); ++i)
    ctx.add_input(static_cast<ir::TensorId>(i + 1), inputs[i]);
  op.out.id = static_cast<ir::TensorId>(inputs.size() + 1);
  ctx.add_output(op.out.id, {out_shape, sizeof(T) == 8 ? kF64 : kF32});
  const Status st = run(op, ctx);
  EXPECT_TRUE(st.ok()) << st.to_string();
  auto out = ctx.take(op.out.id);
  if (!st.ok() || !out.ok()) return {};
  const CpuTensor t = std::move(out).value();
  std::vector<T> v(static_cast<size_t>(t.numel()));
  std::memcpy(v.data(), t.template data<T>(), v.size() * sizeof(T));
  return v;
}

// make() at 1, 2 and 4 threads: expects the same bytes and returns them.
template <class F>
std::vector<float> at_every_thread_count(F&& make) {
  const int before = get_num_threads();
  std::vector<float> first;
  for (int threads : {1, 2, 4}) {
    set_num_threads(threads);
    const std::vector<float> got = make();
    if (threads == 1) {
      first = got;
    } else {
      EXPECT_EQ(0, std::memcmp(first.data(), got.data(), first.size() * sizeof(float)))
          << "1 vs " << threads << " threads";
      EXPECT_EQ(first.size(), got.size());
    }
  }
  set_num_threads(before);
  return first;
}

}  // namespace tw::cpu::test
