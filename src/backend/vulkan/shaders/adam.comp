#version 450
// AdamStep (docs/ops.md): one Adam/AdamW update of a parameter and its two moments, each element
// through the same IEEE operations in the same order as the cpu backend's (vulkan/optim.cc
// passes the scalars rounded to the dtype as it does), every operation `precise` so that none is
// fused. TW_F64: the f64 variant; otherwise f32.
#include "common.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 0) const int DT = 0;
layout(constant_id = 1) const int DECAY = 0;  // 0: none; 1: coupled (L2); 2: decoupled (AdamW)

TW_TENSOR(0)  // param_out
TW_TENSOR(1)  // param
TW_TENSOR(2)  // grad
TW_TENSOR(3)  // exp_avg
TW_TENSOR(5)  // exp_avg_sq
TW_TENSOR(6)  // step_size (0-d)
TW_TENSOR(7)  // bias2_sqrt (0-d)
TW_TENSOR(8)  // exp_avg_out
TW_TENSOR(9)  // exp_avg_sq_out

layout(set = 0, binding = 4) readonly buffer Params {
  uint n;
  uint o1, o2, o3, o5, o6, o7;  // element offsets of the inputs
  // one_minus_beta1, beta2, one_minus_beta2, eps, decay, shrink: f32 bits, or f64 (lo, hi)
  uint s[12];
} p;

#if TW_F64
#define real double
#define LD(N, i) ldd##N(DT, i)
#define ST(N, i, v) std##N(DT, i, v)
real S(int k) { return uint64BitsToDouble(uint64_t(p.s[2 * k]) | (uint64_t(p.s[2 * k + 1]) << 32)); }
#else
#define real float
#define LD(N, i) ldf##N(DT, i)
#define ST(N, i, v) stf##N(DT, i, v)
real S(int k) { return uintBitsToFloat(p.s[2 * k]); }
#endif

void main() {
  const real step_size = LD(6, p.o6), bias2_sqrt = LD(7, p.o7);
  const real one_minus_beta1 = S(0), beta2 = S(1), one_minus_beta2 = S(2), eps = S(3),
             decay = S(4), shrink = S(5);
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
    precise real value = LD(1, p.o1 + i);
    precise real grad = LD(2, p.o2 + i);
    const real m = LD(3, p.o3 + i), v = LD(5, p.o5 + i);
    if (DECAY == 2) value = value * shrink;
    if (DECAY == 1) {
      precise real wd = value * decay;
      grad = grad + wd;
    }
    precise real diff = grad - m;
    precise real m_step = diff * one_minus_beta1;
    precise real m_new = m + m_step;
    precise real v_old = v * beta2;
    precise real g2 = grad * grad;
    precise real g2_scaled = g2 * one_minus_beta2;
    precise real v_new = v_old + g2_scaled;
    precise real root = sqrt(v_new);
    precise real corrected = root / bias2_sqrt;
    precise real denom = corrected + eps;
    precise real ratio = m_new / denom;
    precise real update = ratio * step_size;
    precise real out_value = value - update;
    ST(0, i, out_value);
    ST(8, i, m_new);
    ST(9, i, v_new);
  }
}
