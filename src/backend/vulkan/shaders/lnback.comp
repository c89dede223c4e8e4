#version 450
// LayerNormBackward, in two dispatches (vulkan/rows.cc): MODE 0, a thread per row, recomputes
// the row's mean and rstd and writes dx = rstd * (gh - mean(gh) - xhat * mean(gh * xhat)) (gh = g
// * w, xhat = (x - mean) * rstd) and the row's statistics; MODE 1, a thread per column, sums
// dw = g * xhat and db = g over the rows in order. Computed in double (the TW_F64 variant), as
// the cpu backend does, rounding each output once; every sum in a fixed order.
#include "common.glsl"

layout(local_size_x = 64) in;
layout(constant_id = 0) const int MODE = 0;
layout(constant_id = 1) const int DT = 0;
layout(constant_id = 2) const int WEIGHT = 0;  // binding 3 holds the weight

TW_TENSOR(0)  // dx (MODE 0) or dw (MODE 1)
TW_TENSOR(1)  // g
TW_TENSOR(2)  // x
TW_TENSOR(3)  // weight
TW_TENSOR(5)  // per row: mean, rstd (f64 pairs)
TW_TENSOR(6)  // db (MODE 1)

layout(set = 0, binding = 4) readonly buffer Params {
  uint rows, n;
  uint eps_lo, eps_hi;
} p;

#if TW_F64
void main() {
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  if (MODE == 0) {
    const double eps = uint64BitsToDouble(uint64_t(p.eps_lo) | (uint64_t(p.eps_hi) << 32));
    for (uint r = gl_GlobalInvocationID.x; r < p.rows; r += stride) {
      const uint base = r * p.n;
      double s = 0.0LF;
      for (uint i = 0u; i < p.n; ++i) s += ldd2(DT, base + i);
      const double mean = s / double(p.n);
      s = 0.0LF;
      for (uint i = 0u; i < p.n; ++i) {
        const double d = ldd2(DT, base + i) - mean;
        s += d * d;
      }
      const double rstd = 1.0LF / sqrt(s / double(p.n) + eps);
      b5_64.v[2u * r] = doubleBitsToUint64(mean);
      b5_64.v[2u * r + 1u] = doubleBitsToUint64(rstd);
      double sa = 0.0LF, sb = 0.0LF;
      for (uint i = 0u; i < p.n; ++i) {
        const double gh = ldd1(DT, base + i) * (WEIGHT == 1 ? ldd3(DT, i) : 1.0LF);
        sa += gh;
        sb += gh * ((ldd2(DT, base + i) - mean) * rstd);
      }
      const double a = sa * (1.0LF / double(p.n)), b = sb * (1.0LF / double(p.n));
      for (uint i = 0u; i < p.n; ++i) {
        const double gh = ldd1(DT, base + i) * (WEIGHT == 1 ? ldd3(DT, i) : 1.0LF);
        const double xh = (ldd2(DT, base + i) - mean) * rstd;
        std0(DT, base + i, rstd * (gh - a - xh * b));
      }
    }
  } else {
    for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
      double sw = 0.0LF, sb = 0.0LF;
      for (uint r = 0u; r < p.rows; ++r) {
        const double mean = uint64BitsToDouble(b5_64.v[2u * r]);
        const double rstd = uint64BitsToDouble(b5_64.v[2u * r + 1u]);
        const double g = ldd1(DT, r * p.n + i);
        sw += g * ((ldd2(DT, r * p.n + i) - mean) * rstd);
        sb += g;
      }
      std0(DT, i, sw);
      std6(DT, i, sb);
    }
  }
}
#else
void main() {}  // refused without shaderFloat64 (vulkan/rows.cc)
#endif
