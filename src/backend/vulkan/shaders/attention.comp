#version 450
// Scaled dot-product attention, forward and backward, f32 (f16/bf16 storage), without the score
// matrix. MODE 0 (forward), a thread per query row: the row's max and whether it attends any
// key, then sum_j exp(s_j - max) v_j / sum_j exp(s_j - max). MODE 1 (backward, rows), a thread
// per query row: the same statistics, delta = sum_j P_ij dP_ij (dP = g v^T), dq = sum_j dS_ij k_j
// with dS = P (dP - delta) scale; it keeps the row's max, 1 / l, delta and fill. MODE 2
// (backward, keys), a thread per key: dk = sum_i dS_ij q_i and dv = sum_i P_ij g_i, from those
// statistics. Every sum runs in index order (no atomics). A row that attends nothing gives
// zeros; one with a NaN or +inf score, or only -inf ones, NaN (as the cpu backend, whose
// backward NaN-fills such a row up to its query block's last key under causal).
#include "common.glsl"

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
} p;

#define NEG_INF uintBitsToFloat(0xff800000u)
#define POS_INF uintBitsToFloat(0x7f800000u)
#define NAN uintBitsToFloat(0x7fc00000u)

// Query i (of batch-head b) attends key j: the causal rule and the mask.
bool attended(uint b, uint i, uint j) {
  if (CAUSAL == 1 && j > i) return false;
  if (MASK == 1 && b5_8.v[p.om + (b * p.tq + i) * p.tk + j] == uint8_t(0)) return false;
  return true;
}
float score(uint b, uint i, uint j) {
  const uint qb = p.oq + (b * p.tq + i) * p.d, kb = p.ok + (b * p.tk + j) * p.d;
  float s = 0.0;
  for (uint c = 0u; c < p.d; ++c) s += ldf1(DT, qb + c) * ldf2(DT, kb + c);
  return s * p.scale;
}
// g_i . v_j
float gv(uint b, uint i, uint j) {
  const uint gb = p.og + (b * p.tq + i) * p.dv, vb = p.ov + (b * p.tk + j) * p.dv;
  float s = 0.0;
  for (uint c = 0u; c < p.dv; ++c) s += ldf6(DT, gb + c) * ldf3(DT, vb + c);
  return s;
}
// The keys a row's backward covers under causal: up to its 64-query block's last query.
uint key_end(uint i) {
  if (CAUSAL == 0) return p.tk;
  const uint i0 = (i / 64u) * 64u;
  return min(p.tk, i0 + min(64u, p.tq - i0));
}

struct Stats {
  float mx, inv_l;
  bool special;  // nothing attended, or a NaN / inf score: the row is `fill`
  float fill;
};
Stats row_stats(uint b, uint i) {
  Stats st;
  bool any = false, nan_ = false;
  float mx = NEG_INF;
  for (uint j = 0u; j < p.tk; ++j) {
    if (!attended(b, i, j)) continue;
    any = true;
    const float s = score(b, i, j);
    if (isnan(s)) nan_ = true;
    mx = s > mx ? s : mx;
  }
  st.mx = mx;
  st.special = nan_ || !(mx > NEG_INF && mx < POS_INF);
  st.fill = any ? NAN : 0.0;
  float l = 0.0;
  if (!st.special) {
    for (uint j = 0u; j < p.tk; ++j) {
      if (attended(b, i, j)) l += exp(score(b, i, j) - mx);
    }
  }
  st.inv_l = 1.0 / l;
  return st;
}
float prob(uint b, uint i, uint j, Stats st) {
  if (st.special) return st.fill;
  return attended(b, i, j) ? exp(score(b, i, j) - st.mx) * st.inv_l : 0.0;
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
          float acc = 0.0;
          if (!st.special) {
            for (uint j = 0u; j < p.tk; ++j) {
              if (attended(b, i, j)) {
                acc += exp(score(b, i, j) - st.mx) * ldf3(DT, p.ov + (b * p.tk + j) * p.dv + c);
              }
            }
            acc *= st.inv_l;
          } else {
            acc = st.fill;
          }
          stf0(DT, ob + c, acc);
        }
        continue;
      }
      const uint kend = key_end(i);
      float delta = 0.0;
      for (uint j = 0u; j < kend; ++j) delta += prob(b, i, j, st) * gv(b, i, j);
      b7_32.v[4u * r] = floatBitsToUint(st.mx);
      b7_32.v[4u * r + 1u] = floatBitsToUint(st.inv_l);
      b7_32.v[4u * r + 2u] = floatBitsToUint(delta);
      b7_32.v[4u * r + 3u] = st.special ? floatBitsToUint(st.fill) : 0xffffffffu;
      for (uint c = 0u; c < p.d; ++c) {
        float acc = 0.0;
        for (uint j = 0u; j < kend; ++j) {
          const float ds = prob(b, i, j, st) * (gv(b, i, j) - delta) * p.scale;
          acc += ds * ldf2(DT, p.ok + (b * p.tk + j) * p.d + c);
        }
        stf0(DT, r * p.d + c, acc);
      }
    }
  } else {
    for (uint r = gl_GlobalInvocationID.x; r < p.bh * p.tk; r += stride) {
      const uint b = r / p.tk, j = r % p.tk;
      for (uint c = 0u; c < max(p.d, p.dv); ++c) {
        float ak = 0.0, av = 0.0;
        for (uint i = 0u; i < p.tq; ++i) {
          if (j >= key_end(i)) continue;
          const uint row = b * p.tq + i;
          Stats st;
          st.mx = uintBitsToFloat(b7_32.v[4u * row]);
          st.inv_l = uintBitsToFloat(b7_32.v[4u * row + 1u]);
          const float delta = uintBitsToFloat(b7_32.v[4u * row + 2u]);
          const uint f = b7_32.v[4u * row + 3u];
          st.special = f != 0xffffffffu;
          st.fill = uintBitsToFloat(f);
          const float pr = prob(b, i, j, st);
          if (c < p.d) {
            const float ds = pr * (gv(b, i, j) - delta) * p.scale;
            ak += ds * ldf1(DT, p.oq + row * p.d + c);
          }
          if (c < p.dv) av += pr * ldf6(DT, p.og + row * p.dv + c);
        }
        if (c < p.d) stf0(DT, r * p.d + c, ak);
        if (c < p.dv) stf8(DT, r * p.dv + c, av);
      }
    }
  }
}
