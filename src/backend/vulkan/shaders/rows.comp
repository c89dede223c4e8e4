#version 450
// Softmax, log_softmax and layer_norm, written once: a workgroup per row, the row's statistics
// (max and sum of exponentials; mean and variance) folded by each thread over a strided share
// and combined by a fixed tree in shared memory (identical run to run). Built twice: REAL64 0
// computes in f32 (f16/bf16 as storage), REAL64 1 in f64 (math64.glsl's exp and log). The
// input is contiguous, seen as [outer, len, inner] with the row along len.
#include "common.glsl"
#ifndef REAL64
#define REAL64 0
#endif
#if REAL64 && TW_F64
#include "math64.glsl"
#define real double
#define LD1(dt, i) ldd1(dt, i)
#define LD2(dt, i) ldd2(dt, i)
#define LD3(dt, i) ldd3(dt, i)
#define ST0(dt, i, x) std0(dt, i, x)
#define EXP(x) exp_d(x)
#define LOG(x) log_d(x)
#define NEG_INF (-m64_inf())
#define EPS uint64BitsToDouble(uint64_t(p.eps_lo) | (uint64_t(p.eps_hi) << 32))
#else
#define real float
#define LD1(dt, i) ldf1(dt, i)
#define LD2(dt, i) ldf2(dt, i)
#define LD3(dt, i) ldf3(dt, i)
#define ST0(dt, i, x) stf0(dt, i, x)
#define EXP(x) exp(x)
#define LOG(x) log(x)
#define NEG_INF uintBitsToFloat(0xff800000u)
#define EPS p.eps
#endif

layout(local_size_x = 64) in;
layout(constant_id = 0) const int MODE = 0;  // 0 softmax, 1 log_softmax, 2 layer_norm
layout(constant_id = 1) const int DT = 0;
layout(constant_id = 2) const int WEIGHT = 0;  // layer_norm: binding 2 holds the weight
layout(constant_id = 3) const int BIAS = 0;    // layer_norm: binding 3 holds the bias

TW_TENSOR(0)  // out
TW_TENSOR(1)  // x
TW_TENSOR(2)  // weight
TW_TENSOR(3)  // bias

layout(set = 0, binding = 4) readonly buffer Params {
  uint rows, len, inner;
  float eps;
  uint eps_lo, eps_hi;  // eps in double (REAL64)
} p;

const uint G = 64;
shared real s[G];

// Folds s[0, G) into s[0] by a fixed tree: op 0 max (NaN wins), 1 sum.
void combine(int op) {
  const uint t = gl_LocalInvocationID.x;
  barrier();
  for (uint h = G / 2; h > 0; h >>= 1) {
    if (t < h) {
      const real a = s[t], b = s[t + h];
      s[t] = op == 0 ? ((b > a || isnan(b)) ? b : a) : a + b;
    }
    barrier();
  }
}

void main() {
  const uint t = gl_LocalInvocationID.x;
  for (uint row = gl_WorkGroupID.x; row < p.rows; row += gl_NumWorkGroups.x) {
    const uint o = row / p.inner, i = row % p.inner;
    const uint base = o * p.len * p.inner + i, step = p.inner;
    if (MODE == 2) {
      real acc = real(0.0);
      for (uint j = t; j < p.len; j += G) acc += LD1(DT, base + j * step);
      s[t] = acc;
      combine(1);
      const real mean = s[0] / real(p.len);
      barrier();
      acc = real(0.0);
      for (uint j = t; j < p.len; j += G) {
        const real d = LD1(DT, base + j * step) - mean;
        acc += d * d;
      }
      s[t] = acc;
      combine(1);
      const real rstd = real(1.0) / sqrt(s[0] / real(p.len) + EPS);
      for (uint j = t; j < p.len; j += G) {
        real y = (LD1(DT, base + j * step) - mean) * rstd;
        if (WEIGHT == 1) y *= LD2(DT, j);
        if (BIAS == 1) y += LD3(DT, j);
        ST0(DT, base + j * step, y);
      }
    } else {
      real m = NEG_INF;
      for (uint j = t; j < p.len; j += G) {
        const real v = LD1(DT, base + j * step);
        m = (v > m || isnan(v)) ? v : m;
      }
      s[t] = m;
      combine(0);
      const real mx = s[0];
      barrier();
      real acc = real(0.0);
      for (uint j = t; j < p.len; j += G) acc += EXP(LD1(DT, base + j * step) - mx);
      s[t] = acc;
      combine(1);
      const real sum = s[0];
      for (uint j = t; j < p.len; j += G) {
        const real d = LD1(DT, base + j * step) - mx;
        ST0(DT, base + j * step, MODE == 1 ? d - LOG(sum) : EXP(d) / sum);
      }
    }
    barrier();
  }
}
