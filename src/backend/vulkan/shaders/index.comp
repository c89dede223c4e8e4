#version 450
// The structured ops, one shader specialised by MODE (shader_abi.h, kIx*): strided copies into a
// view (SliceAssign, Cat), creation (Arange, Eye, the Philox random ops), index reads (Gather,
// IndexSelect, OneHot) and the in-order accumulations (ScatterAdd, IndexSelectBackward, Cumsum).
// Every thread owns whole outputs: the accumulating modes give a thread a row of the scanned or
// indexed dim and add along it in index order, so results are identical run to run and to the
// cpu backend's order (no float atomics). Index values are checked on the host before the
// dispatch (vulkan/indexing.cc), so every read here is in range.
#include "common.glsl"

layout(local_size_x = 256) in;
// The mode is fixed by the build variant (IX_MODE: vulkan.cmake builds one per mode), so the
// SPIR-V holds only its code; the specialisation constant's id stays (unused there).
#ifdef IX_MODE
#define MODE IX_MODE
#else
layout(constant_id = 0) const int MODE = 0;
#endif
layout(constant_id = 1) const int DT_A = 0;
layout(constant_id = 2) const int DT_B = 0;
layout(constant_id = 3) const int DT_OUT = 0;
layout(constant_id = 4) const int CLS = 0;  // CLS_F32, CLS_F64, CLS_I64

TW_TENSOR(0)  // out
TW_TENSOR(1)  // a: the source (x, src, grad, p)
TW_TENSOR(2)  // b: the index

layout(set = 0, binding = 4) readonly buffer Params {
  uint n, rank;
  uint shape[6];
  int sa[6], sb[6], so[6];
  uint oa, ob, oo;
  uint dim;   // the dim whose coordinate a mode needs (one_hot's class dim)
  uint size;  // the indexed dim's size (negative indices count from its end)
  int da, db, dout;  // strides along the indexed or scanned dim
  uint len;          // the length scanned per thread
  uint u0, u1, u2, u3, u4, u5, u6, u7;  // scalars (mode-specific, 64-bit ones as lo, hi)
} p;

int64_t s64(uint lo, uint hi) { return int64_t(uint64_t(lo) | (uint64_t(hi) << 32)); }
#if TW_F64
double d64(uint lo, uint hi) { return uint64BitsToDouble(uint64_t(lo) | (uint64_t(hi) << 32)); }
#endif

// Philox4x32-10 (core/philox.h): the cpu backend's generator, element i drawn with counter i.
uvec4 philox(uint64_t counter, uint64_t key) {
  uint c0 = uint(counter), c1 = uint(counter >> 32), c2 = 0u, c3 = 0u;
  uint k0 = uint(key), k1 = uint(key >> 32);
  for (int r = 0; r < 10; ++r) {
    uint hi0, lo0, hi1, lo1;
    umulExtended(0xD2511F53u, c0, hi0, lo0);
    umulExtended(0xCD9E8D57u, c2, hi1, lo1);
    const uint n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return uvec4(c0, c1, c2, c3);
}

#if TW_F64
// log(x) for x in (0, 1] in double (GLSL has none): x = 2^e m with m in [sqrt(1/2), sqrt(2)),
// log(m) = 2 atanh(s), s = (m - 1) / (m + 1), by its series (|s| < 0.172: 12 terms reach 1e-19),
// plus e ln 2 in two parts. Within an ulp or so of the C library's.
double log_d(double x) {
  int e;
  double m = frexp(x, e);  // m in [0.5, 1)
  if (m < 0.70710678118654752LF) {
    m *= 2.0LF;
    e -= 1;
  }
  const double f = m - 1.0LF;
  const double s = f / (2.0LF + f), z = s * s;
  double q = 1.0LF / 25.0LF;
  for (int k = 11; k >= 0; --k) q = q * z + 1.0LF / double(2 * k + 1);
  const double de = double(e);
  return de * 0.693147180369123816490LF + (2.0LF * s * q + de * 1.90821492927058770002e-10LF);
}
// cos(x) for x in [0, 2 pi) in double: x reduced by pi/2 (three-part constant), then the
// sine or cosine series on [-pi/4, pi/4].
double cos_d(double x) {
  const double k = floor(x * 0.636619772367581343LF + 0.5LF);
  double r = x - k * 1.57079632673412561417LF;
  r = r - k * 6.07710050650619224932e-11LF;
  r = r - k * 2.02226624879595063154e-21LF;
  const double r2 = r * r;
  // cos r and sin r by their Taylor series to r^20 / r^21 (|r| <= pi/4: error below 1e-19).
  double c = 0.0LF, s = 0.0LF, term_c = 1.0LF, term_s = r;
  for (int n = 0; n < 11; ++n) {
    c += term_c;
    s += term_s;
    term_c *= -r2 / double((2 * n + 1) * (2 * n + 2));
    term_s *= -r2 / double((2 * n + 2) * (2 * n + 3));
  }
  const int q = int(k) & 3;
  return q == 0 ? c : (q == 1 ? -s : (q == 2 ? -c : s));
}
#endif

// Bit copy of element ia of binding 1 to element io of binding 0, by the output's width.
void copy_bits(uint io, uint ia) {
  if (DT_OUT == DT_U8 || DT_OUT == DT_BOOL) b0_8.v[io] = b1_8.v[ia];
  else if (DT_OUT == DT_F16 || DT_OUT == DT_BF16) b0_16.v[io] = b1_16.v[ia];
  else if (DT_OUT == DT_F64 || DT_OUT == DT_I64) b0_64.v[io] = b1_64.v[ia];
  else b0_32.v[io] = b1_32.v[ia];
}

// a * b + c with one rounding, as the cpu backend's build computes low + range * u (GCC
// contracts it into an FMA there). GLSL's fma() is not fused on every driver (lavapipe splits
// it), so: f32 through double (the product is exact there, and so is the sum unless c is far
// smaller than it); f64 by Dekker's exact product and a compensated sum (one rounding but in
// rare halfway cases).
#if TW_F64
float fused(float a, float b, float c) { return float(double(a) * double(b) + double(c)); }
double fused(double a, double b, double c) {
  const double k = 134217729.0LF;  // 2^27 + 1
  const double ca = k * a, cb = k * b;
  const double ah = ca - (ca - a), al = a - ah, bh = cb - (cb - b), bl = b - bh;
  const double pr = a * b;
  const double e = ((ah * bh - pr) + ah * bl + al * bh) + al * bl;
  const double s = pr + c, bb = s - pr;
  const double t = (pr - (s - bb)) + (c - bb);
  return s + (t + e);
}
#else
float fused(float a, float b, float c) { return a * b + c; }  // (f32 without doubles)
#endif

int64_t wrap_index(int64_t v) { return v < 0 ? v + int64_t(p.size) : v; }

void main() {
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
    int ia = int(p.oa), ib = int(p.ob), io = int(p.oo);
    uint rem = i, dimc = 0u;
    for (int d = int(p.rank) - 1; d >= 0; --d) {
      const uint idx = rem % p.shape[d];
      rem /= p.shape[d];
      ia += int(idx) * p.sa[d];
      ib += int(idx) * p.sb[d];
      io += int(idx) * p.so[d];
      if (uint(d) == p.dim) dimc = idx;
    }
    if (MODE == IX_COPY) {  // out (a view) = a (a view), same dtype
      copy_bits(uint(io), uint(ia));
    } else if (MODE == IX_ARANGE) {  // start + i * step; u0..u3: start, step (i64 or f64 bits)
      if (CLS == CLS_I64) {
        sti0(DT_OUT, i, s64(p.u0, p.u1) + int64_t(i) * s64(p.u2, p.u3));
      } else {
#if TW_F64
        // One rounding, as the cpu backend's fma(i, step, start) in double.
        std0(DT_OUT, i, fma(double(i), d64(p.u2, p.u3), d64(p.u0, p.u1)));
#endif
      }
    } else if (MODE == IX_EYE) {  // u0: the number of columns
      sti0(DT_OUT, i, i / p.u0 == i % p.u0 ? 1 : 0);
    } else if (MODE == IX_GATHER) {  // out[i] = a[ia + index[ib] * da] (gather, index_select)
      const int64_t v = wrap_index(ldi2(DT_B, uint(ib)));
      copy_bits(i, uint(int64_t(ia) + v * int64_t(p.da)));
    } else if (MODE == IX_ONE_HOT) {  // out i64: a[ia] == the class coordinate
      b0_64.v[i] = ldi1(DT_A, uint(ia)) == int64_t(dimc) ? 1UL : 0UL;
    } else if (MODE == IX_SCATTER) {  // out[io + index[ib + l db] dout] += a[ia + l da], l in order
      for (uint l = 0u; l < p.len; ++l) {
        const int64_t v = wrap_index(ldi2(DT_B, uint(ib + int(l) * p.db)));
        const uint o = uint(int64_t(io) + v * int64_t(p.dout));
        const uint s = uint(ia + int(l) * p.da);
        if (CLS == CLS_I64) {
          sti0(DT_OUT, o, ldi0(DT_OUT, o) + ldi1(DT_A, s));
        } else if (CLS == CLS_F64) {
#if TW_F64
          std0(DT_OUT, o, ldd0(DT_OUT, o) + ldd1(DT_A, s));
#endif
        } else {
          precise float r = ldf0(DT_OUT, o) + ldf1(DT_A, s);
          stf0(DT_OUT, o, r);
        }
      }
    } else if (MODE == IX_CUMSUM) {  // a running sum along the row: floats in double, ints in i64
      if (CLS == CLS_I64) {
        int64_t acc = 0;
        for (uint l = 0u; l < p.len; ++l) {
          acc += ldi1(DT_A, uint(ia + int(l) * p.da));
          sti0(DT_OUT, uint(io + int(l) * p.dout), acc);
        }
      } else {
#if TW_F64
        double acc = 0.0LF;
        for (uint l = 0u; l < p.len; ++l) {
          acc += ldd1(DT_A, uint(ia + int(l) * p.da));
          std0(DT_OUT, uint(io + int(l) * p.dout), acc);
        }
#endif
      }
    } else if (MODE == IX_RAND_UNIFORM) {  // u0, u1: seed; low + range * U(seed, i)
      const uvec4 r = philox(uint64_t(i), uint64_t(s64(p.u0, p.u1)));
      if (DT_OUT == DT_F64) {
#if TW_F64
        const uint64_t bits = (uint64_t(r.x) << 21) ^ uint64_t(r.y >> 11);
        const double u = double(bits & 0x1FFFFFFFFFFFFFUL) * (1.0LF / 9007199254740992.0LF);
        const double v = fused(d64(p.u4, p.u5), u, d64(p.u2, p.u3));
        std0(DT_OUT, i, v);
#endif
      } else {
        const float u = float(r.x >> 8) * (1.0 / 16777216.0);
        const float v = fused(uintBitsToFloat(p.u4), u, uintBitsToFloat(p.u2));
        stf0(DT_OUT, i, v);
      }
    } else if (MODE == IX_RAND_NORMAL) {  // mean + std * N(seed, i): Box-Muller in double
#if TW_F64
      const uvec4 r = philox(uint64_t(i), uint64_t(s64(p.u0, p.u1)));
      const double u1 = (double(r.x) + 1.0LF) * (1.0LF / 4294967296.0LF);
      const double u2 = double(r.y) * (1.0LF / 4294967296.0LF);
      const double nrm = sqrt(-2.0LF * log_d(u1)) * cos_d(6.283185307179586LF * u2);
      const double v = fused(d64(p.u4, p.u5), nrm, d64(p.u2, p.u3));
      std0(DT_OUT, i, v);
#endif
    } else if (MODE == IX_BERNOULLI) {  // U(seed, i) (double) < a[ia], in a's dtype
#if TW_F64
      const uvec4 r = philox(uint64_t(i), uint64_t(s64(p.u0, p.u1)));
      const uint64_t bits = (uint64_t(r.x) << 21) ^ uint64_t(r.y >> 11);
      const double u = double(bits & 0x1FFFFFFFFFFFFFUL) * (1.0LF / 9007199254740992.0LF);
      sti0(DT_OUT, i, u < ldd1(DT_A, uint(ia)) ? 1 : 0);
#endif
    }
  }
}
