#version 450
// Every Reduce kind, written once: one workgroup per output element (a grid-stride loop past
// 65535), each thread folding a strided share of the reduced elements, then a fixed tree in
// shared memory (the same order every run: results are identical run to run). The input is
// read through strides: the kept dims enumerate outputs, the reduced dims (row-major) the
// elements of one output, whose flat index argmax/argmin return.
#include "common.glsl"

layout(local_size_x = 64) in;
layout(constant_id = 0) const int KIND = 0;  // RK_*
layout(constant_id = 1) const int DT_X = 0;
layout(constant_id = 2) const int DT_OUT = 0;
layout(constant_id = 3) const int CLS = 0;   // how values accumulate: CLS_F32, CLS_F64, CLS_I64

TW_TENSOR(0)  // out
TW_TENSOR(1)  // x

layout(set = 0, binding = 4) readonly buffer Params {
  uint n_out, n_red, kept_rank, red_rank;
  uint kshape[6];
  int kstride[6];
  uint rshape[6];
  int rstride[6];
  uint offset;
} p;

const uint G = 64;
shared float sf[G];
shared int64_t si[G];
shared uint sx[G];  // argmax/argmin: the index; max/min of floats: 1 when NaN
#if TW_F64
shared double sd[G];
#endif

uint element(uint base, uint r) {
  int at = int(base);
  for (int d = int(p.red_rank) - 1; d >= 0; --d) {
    at += int(r % p.rshape[d]) * p.rstride[d];
    r /= p.rshape[d];
  }
  return uint(at);
}

bool is_arg() { return KIND == RK_Argmax || KIND == RK_Argmin; }
bool wants_max() { return KIND == RK_Max || KIND == RK_Argmax; }

// (a, ia) combined with (b, ib): NaN beats everything; ties (and NaN vs NaN) go to the lower
// index, so the first occurrence wins whatever the order.
bool f_takes(float a, uint ia, float b, uint ib) {
  if (isnan(a) || isnan(b)) return isnan(b) && (!isnan(a) || ib < ia);
  if (b == a) return ib < ia;
  return wants_max() ? b > a : b < a;
}
bool i_takes(int64_t a, uint ia, int64_t b, uint ib) {
  if (b == a) return ib < ia;
  return wants_max() ? b > a : b < a;
}
#if TW_F64
bool d_takes(double a, uint ia, double b, uint ib) {
  if (isnan(a) || isnan(b)) return isnan(b) && (!isnan(a) || ib < ia);
  if (b == a) return ib < ia;
  return wants_max() ? b > a : b < a;
}
#endif

void main() {
  const uint t = gl_LocalInvocationID.x;
  for (uint o = gl_WorkGroupID.x; o < p.n_out; o += gl_NumWorkGroups.x) {
    int base_i = int(p.offset);
    uint rem = o;
    for (int d = int(p.kept_rank) - 1; d >= 0; --d) {
      base_i += int(rem % p.kshape[d]) * p.kstride[d];
      rem /= p.kshape[d];
    }
    const uint base = uint(base_i);
    const bool sum_like = KIND == RK_Sum || KIND == RK_Mean;
    // This thread's fold. Identity: index 0xffffffff marks "nothing yet" for extremes.
    uint idx = 0xffffffffu;
    if (CLS == CLS_F32) {
      float acc = sum_like ? 0.0 : (KIND == RK_Prod ? 1.0 : 0.0);
      for (uint r = t; r < p.n_red; r += G) {
        const float v = ldf1(DT_X, element(base, r));
        if (sum_like) acc += v;
        else if (KIND == RK_Prod) acc *= v;
        else if (idx == 0xffffffffu || f_takes(acc, idx, v, r)) { acc = v; idx = r; }
      }
      sf[t] = acc;
    } else if (CLS == CLS_I64) {
      int64_t acc = KIND == RK_Prod ? 1 : 0;
      for (uint r = t; r < p.n_red; r += G) {
        const int64_t v = ldi1(DT_X, element(base, r));
        if (KIND == RK_Sum) acc += v;
        else if (KIND == RK_Prod) acc *= v;
        else if (idx == 0xffffffffu || i_takes(acc, idx, v, r)) { acc = v; idx = r; }
      }
      si[t] = acc;
#if TW_F64
    } else {
      // f64 values, or an integral mean (accumulated in double, as the cpu backend does).
      double acc = KIND == RK_Prod ? 1.0LF : 0.0LF;
      for (uint r = t; r < p.n_red; r += G) {
        const double v = ldd1(DT_X, element(base, r));
        if (sum_like) acc += v;
        else if (KIND == RK_Prod) acc *= v;
        else if (idx == 0xffffffffu || d_takes(acc, idx, v, r)) { acc = v; idx = r; }
      }
      sd[t] = acc;
#endif
    }
    sx[t] = idx;
    barrier();
    for (uint s = G / 2; s > 0; s >>= 1) {
      if (t < s) {
        const uint u = t + s;
        if (CLS == CLS_F32) {
          if (sum_like) sf[t] += sf[u];
          else if (KIND == RK_Prod) sf[t] *= sf[u];
          else if (sx[u] != 0xffffffffu && (sx[t] == 0xffffffffu || f_takes(sf[t], sx[t], sf[u], sx[u]))) {
            sf[t] = sf[u];
            sx[t] = sx[u];
          }
        } else if (CLS == CLS_I64) {
          if (KIND == RK_Sum) si[t] += si[u];
          else if (KIND == RK_Prod) si[t] *= si[u];
          else if (sx[u] != 0xffffffffu && (sx[t] == 0xffffffffu || i_takes(si[t], sx[t], si[u], sx[u]))) {
            si[t] = si[u];
            sx[t] = sx[u];
          }
#if TW_F64
        } else {
          if (sum_like) sd[t] += sd[u];
          else if (KIND == RK_Prod) sd[t] *= sd[u];
          else if (sx[u] != 0xffffffffu && (sx[t] == 0xffffffffu || d_takes(sd[t], sx[t], sd[u], sx[u]))) {
            sd[t] = sd[u];
            sx[t] = sx[u];
          }
#endif
        }
      }
      barrier();
    }
    if (t == 0) {
      if (is_arg()) {
        sti0(DT_OUT, o, int64_t(sx[0]));
      } else if (CLS == CLS_F32) {
        stf0(DT_OUT, o, KIND == RK_Mean ? sf[0] / float(p.n_red) : sf[0]);
      } else if (CLS == CLS_I64) {
        sti0(DT_OUT, o, si[0]);
#if TW_F64
      } else {
        std0(DT_OUT, o, KIND == RK_Mean ? sd[0] / double(p.n_red) : sd[0]);
#endif
      }
    }
    barrier();
  }
}
