#version 450
// MatMul and Linear, written once: C[b, m, n] = sum_k A[b, m, k] B[b, k, n] (+ bias[n], relu),
// tiled: each 16x16 workgroup stages 16x16 tiles of A and B in shared memory and each thread
// accumulates one output element over k in order (the same order every run). A and B are read
// through strides (a transposed weight, a broadcast batch: no copies); the batch dims (merged,
// at most 4) index by gl_WorkGroupID.z.
#include "common.glsl"

layout(local_size_x = 16, local_size_y = 16) in;
layout(constant_id = 0) const int DT = 0;    // A's, B's and C's dtype
layout(constant_id = 1) const int CLS = 0;   // CLS_F32, CLS_F64, CLS_I64
layout(constant_id = 2) const int BIAS = 0;  // 1: add bias[n] (binding 3)
layout(constant_id = 3) const int RELU = 0;  // 1: max(0, .) after the bias

TW_TENSOR(0)  // C
TW_TENSOR(1)  // A
TW_TENSOR(2)  // B
TW_TENSOR(3)  // bias

layout(set = 0, binding = 4) readonly buffer Params {
  uint M, N, K, batch, batch_rank;
  uint bshape[4];
  int a_bstride[4], b_bstride[4];
  int a_m, a_k, b_k, b_n, bias_n;
  uint a_off, b_off, bias_off;
} p;

const uint T = 16;
shared float fa[T][T], fb[T][T];
shared int64_t ia[T][T], ib[T][T];
#if TW_F64
shared double da[T][T], db[T][T];
#endif

void main() {
  const uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
  const uint n = gl_WorkGroupID.x * T + tx, m = gl_WorkGroupID.y * T + ty;
  for (uint bz = gl_WorkGroupID.z; bz < p.batch; bz += gl_NumWorkGroups.z) {
    int a0 = int(p.a_off), b0 = int(p.b_off);
    uint rem = bz;
    for (int d = int(p.batch_rank) - 1; d >= 0; --d) {
      const int i = int(rem % p.bshape[d]);
      rem /= p.bshape[d];
      a0 += i * p.a_bstride[d];
      b0 += i * p.b_bstride[d];
    }
    float accf = 0.0;
    int64_t acci = 0;
#if TW_F64
    double accd = 0.0LF;
#endif
    for (uint k0 = 0; k0 < p.K; k0 += T) {
      // Stage A[m, k0 + tx] and B[k0 + ty, n] (zero outside the matrices).
      const uint ka = k0 + tx, kb = k0 + ty;
      const bool in_a = m < p.M && ka < p.K, in_b = kb < p.K && n < p.N;
      const uint at = uint(a0 + int(m) * p.a_m + int(ka) * p.a_k);
      const uint bt = uint(b0 + int(kb) * p.b_k + int(n) * p.b_n);
      if (CLS == CLS_F32) {
        fa[ty][tx] = in_a ? ldf1(DT, at) : 0.0;
        fb[ty][tx] = in_b ? ldf2(DT, bt) : 0.0;
      } else if (CLS == CLS_I64) {
        ia[ty][tx] = in_a ? ldi1(DT, at) : 0;
        ib[ty][tx] = in_b ? ldi2(DT, bt) : 0;
#if TW_F64
      } else {
        da[ty][tx] = in_a ? ldd1(DT, at) : 0.0LF;
        db[ty][tx] = in_b ? ldd2(DT, bt) : 0.0LF;
#endif
      }
      barrier();
      const uint kend = min(T, p.K - k0);
      for (uint k = 0; k < kend; ++k) {
        if (CLS == CLS_F32) accf += fa[ty][k] * fb[k][tx];
        else if (CLS == CLS_I64) acci += ia[ty][k] * ib[k][tx];
#if TW_F64
        else accd += da[ty][k] * db[k][tx];
#endif
      }
      barrier();
    }
    if (m < p.M && n < p.N) {
      const uint o = (bz * p.M + m) * p.N + n;
      const uint bi = uint(int(p.bias_off) + int(n) * p.bias_n);
      if (CLS == CLS_F32) {
        if (BIAS == 1) accf += ldf3(DT, bi);
        if (RELU == 1 && accf < 0.0) accf = 0.0;
        stf0(DT, o, accf);
      } else if (CLS == CLS_I64) {
        if (BIAS == 1) acci += ldi3(DT, bi);
        if (RELU == 1 && acci < 0) acci = 0;
        sti0(DT, o, acci);
#if TW_F64
      } else {
        if (BIAS == 1) accd += ldd3(DT, bi);
        if (RELU == 1 && accd < 0.0LF) accd = 0.0LF;
        std0(DT, o, accd);
#endif
      }
    }
    barrier();
  }
}
