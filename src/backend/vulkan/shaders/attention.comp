#version 450
// Scaled dot-product attention, forward and backward, f32 (f16/bf16 storage), without the score
// matrix. MODE 0 (forward), a thread per query row: the row's max and whether it attends any
// key, then sum_j exp(s_j - max) v_j / sum_j exp(s_j - max). MODE 1 (backward, rows), a thread
// per query row: the same statistics, delta = sum_j P_ij dP_ij (dP = g v^T), dq = sum_j dS_ij k_j
// with dS = P (dP - delta) scale; it keeps the row's max, 1 / l, delta and fill. MODE 2
// (backward, keys), a thread per key: dk = sum_i dS_ij q_i and dv = sum_i P_ij g_i, from those
// statistics. Every sum runs in index order (no atomics). A row that attends nothing gives
// zeros; one with a NaN or +inf score, or only -inf ones, NaN (as the cpu backend, whose
// backward NaN-fills such a row up to its query block's last key under causal). Built twice:
// REAL64 0 computes in f32 (f16/bf16 storage), REAL64 1 in f64 (math64.glsl's exp).
#include "common.glsl"
#ifndef REAL64
#define REAL64 0
#endif
#if REAL64 && TW_F64
#include "math64.glsl"
#define real double
#define LD(n, i) ldd##n(DT, i)
#define ST(n, i, x) std##n(DT, i, x)
#define EXP(x) exp_d(x)
#define NEG_INF (-m64_inf())
#define POS_INF m64_inf()
#define NAN m64_nan()
#define SCALE uint64BitsToDouble(uint64_t(p.scale_lo) | (uint64_t(p.scale_hi) << 32))
// The per-row statistics (binding 7): four doubles per row; the fill slot's all-ones: none.
#define STAT_ST(r, k, x) b7_64.v[4u * (r) + (k)] = doubleBitsToUint64(x)
#define STAT_LD(r, k) uint64BitsToDouble(b7_64.v[4u * (r) + (k)])
#define STAT_NONE 0xffffffffffffffffUL
#define STAT_RAW(r, k) b7_64.v[4u * (r) + (k)]
#define STAT_BITS(x) doubleBitsToUint64(x)
#define STAT_VAL(u) uint64BitsToDouble(u)
#else
#define real float
#define LD(n, i) ldf##n(DT, i)
#define ST(n, i, x) stf##n(DT, i, x)
#define EXP(x) exp(x)
#define NEG_INF uintBitsToFloat(0xff800000u)
#define POS_INF uintBitsToFloat(0x7f800000u)
#define NAN uintBitsToFloat(0x7fc00000u)
#define SCALE p.scale
#define STAT_ST(r, k, x) b7_32.v[4u * (r) + (k)] = floatBitsToUint(x)
#define STAT_LD(r, k) uintBitsToFloat(b7_32.v[4u * (r) + (k)])
#define STAT_NONE 0xffffffffu
#define STAT_RAW(r, k) b7_32.v[4u * (r) + (k)]
#define STAT_BITS(x) floatBitsToUint(x)
#define STAT_VAL(u) uintBitsToFloat(u)
#endif

layout(local_size_x = 64) in;
layout(constant_id = 0) const int MODE = 0;
layout(constant_id = 1) const int DT = 0;
layout(constant_id = 2) const int CAUSAL = 0;
layout(constant_id = 3) const int MASK = 0;  // binding 5 holds the bool mask [bh, tq, tk]

TW_TENSOR(0)  // out, dq, or dk
TW_TENSOR(1)  // q
TW_TENSOR(2)  // k
TW_TENSOR(3)  // v
TW_TENSOR(5)  // mask
TW_TENSOR(6)  // g (backward)
TW_TENSOR(7)  // per row: max, 1 / l, delta, fill (f32), backward
TW_TENSOR(8)  // dv (MODE 2)

layout(set = 0, binding = 4) readonly buffer Params {
  uint bh, tq, tk, d, dv;
  float scale;
  uint oq, ok, ov, og, om;
  uint scale_lo, scale_hi;  // scale's double bits (REAL64)
} p;

// Query i (of batch-head b) attends key j: the causal rule and the mask.
bool attended(uint b, uint i, uint j) {
  if (CAUSAL == 1 && j > i) return false;
  if (MASK == 1 && b5_8.v[p.om + (b * p.tq + i) * p.tk + j] == uint8_t(0)) return false;
  return true;
}
real score(uint b, uint i, uint j) {
  const uint qb = p.oq + (b * p.tq + i) * p.d, kb = p.ok + (b * p.tk + j) * p.d;
  real s = real(0.0);
  for (uint c = 0u; c < p.d; ++c) s += LD(1, qb + c) * LD(2, kb + c);
  return s * SCALE;
}
// g_i . v_j
real gv(uint b, uint i, uint j) {
  const uint gb = p.og + (b * p.tq + i) * p.dv, vb = p.ov + (b * p.tk + j) * p.dv;
  real s = real(0.0);
  for (uint c = 0u; c < p.dv; ++c) s += LD(6, gb + c) * LD(3, vb + c);
  return s;
}
// The keys a row's backward covers under causal: up to its 64-query block's last query.
uint key_end(uint i) {
  if (CAUSAL == 0) return p.tk;
  const uint i0 = (i / 64u) * 64u;
  return min(p.tk, i0 + min(64u, p.tq - i0));
}

struct Stats {
  real mx, inv_l;
  bool special;  // nothing attended, or a NaN / inf score: the row is `fill`
  real fill;
};
Stats row_stats(uint b, uint i) {
  Stats st;
  bool any = false, nan_ = false;
  real mx = NEG_INF;
  for (uint j = 0u; j < p.tk; ++j) {
    if (!attended(b, i, j)) continue;
    any = true;
    const real s = score(b, i, j);
    if (isnan(s)) nan_ = true;
    mx = s > mx ? s : mx;
  }
  st.mx = mx;
  st.special = nan_ || !(mx > NEG_INF && mx < POS_INF);
  st.fill = any ? NAN : real(0.0);
  real l = real(0.0);
  if (!st.special) {
    for (uint j = 0u; j < p.tk; ++j) {
      if (attended(b, i, j)) l += EXP(score(b, i, j) - mx);
    }
  }
  st.inv_l = real(1.0) / l;
  return st;
}
real prob(uint b, uint i, uint j, Stats st) {
  if (st.special) return st.fill;
  return attended(b, i, j) ? EXP(score(b, i, j) - st.mx) * st.inv_l : real(0.0);
}

void main() {
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  if (MODE == 0 || MODE == 1) {
    for (uint r = gl_GlobalInvocationID.x; r < p.bh * p.tq; r += stride) {
      const uint b = r / p.tq, i = r % p.tq;
      const Stats st = row_stats(b, i);
      if (MODE == 0) {
        const uint ob = r * p.dv;
        for (uint c = 0u; c < p.dv; ++c) {
          real acc = real(0.0);
          if (!st.special) {
            for (uint j = 0u; j < p.tk; ++j) {
              if (attended(b, i, j)) {
                acc += EXP(score(b, i, j) - st.mx) * LD(3, p.ov + (b * p.tk + j) * p.dv + c);
              }
            }
            acc *= st.inv_l;
          } else {
            acc = st.fill;
          }
          ST(0, ob + c, acc);
        }
        continue;
      }
      const uint kend = key_end(i);
      real delta = real(0.0);
      for (uint j = 0u; j < kend; ++j) delta += prob(b, i, j, st) * gv(b, i, j);
      STAT_ST(r, 0u, st.mx);
      STAT_ST(r, 1u, st.inv_l);
      STAT_ST(r, 2u, delta);
      STAT_RAW(r, 3u) = st.special ? STAT_BITS(st.fill) : STAT_NONE;
      for (uint c = 0u; c < p.d; ++c) {
        real acc = real(0.0);
        for (uint j = 0u; j < kend; ++j) {
          const real ds = prob(b, i, j, st) * (gv(b, i, j) - delta) * SCALE;
          acc += ds * LD(2, p.ok + (b * p.tk + j) * p.d + c);
        }
        ST(0, r * p.d + c, acc);
      }
    }
  } else {
    for (uint r = gl_GlobalInvocationID.x; r < p.bh * p.tk; r += stride) {
      const uint b = r / p.tk, j = r % p.tk;
      for (uint c = 0u; c < max(p.d, p.dv); ++c) {
        real ak = real(0.0), av = real(0.0);
        for (uint i = 0u; i < p.tq; ++i) {
          if (j >= key_end(i)) continue;
          const uint row = b * p.tq + i;
          Stats st;
          st.mx = STAT_LD(row, 0u);
          st.inv_l = STAT_LD(row, 1u);
          const real delta = STAT_LD(row, 2u);
          st.special = STAT_RAW(row, 3u) != STAT_NONE;
          st.fill = STAT_VAL(STAT_RAW(row, 3u));
          const real pr = prob(b, i, j, st);
          if (c < p.d) {
            const real ds = pr * (gv(b, i, j) - delta) * SCALE;
            ak += ds * LD(1, p.oq + row * p.d + c);
          }
          if (c < p.dv) av += pr * LD(6, p.og + row * p.dv + c);
        }
        if (c < p.d) ST(0, r * p.d + c, ak);
        if (c < p.dv) ST(8, r * p.dv + c, av);
      }
    }
  }
}
