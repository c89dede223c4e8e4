#version 450
// Softmax, log_softmax and layer_norm, written once: a workgroup per row, the row's statistics
// (max and sum of exponentials; mean and variance) folded by each thread over a strided share
// and combined by a fixed tree in shared memory (identical run to run). f32 (and f16/bf16
// storage). The input is contiguous, seen as [outer, len, inner] with the row along len.
#include "common.glsl"

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
} p;

const uint G = 64;
shared float s[G];

// Folds s[0, G) into s[0] by a fixed tree: op 0 max (NaN wins), 1 sum.
void combine(int op) {
  const uint t = gl_LocalInvocationID.x;
  barrier();
  for (uint h = G / 2; h > 0; h >>= 1) {
    if (t < h) {
      const float a = s[t], b = s[t + h];
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
      float acc = 0.0;
      for (uint j = t; j < p.len; j += G) acc += ldf1(DT, base + j * step);
      s[t] = acc;
      combine(1);
      const float mean = s[0] / float(p.len);
      barrier();
      acc = 0.0;
      for (uint j = t; j < p.len; j += G) {
        const float d = ldf1(DT, base + j * step) - mean;
        acc += d * d;
      }
      s[t] = acc;
      combine(1);
      const float rstd = 1.0 / sqrt(s[0] / float(p.len) + p.eps);
      for (uint j = t; j < p.len; j += G) {
        float y = (ldf1(DT, base + j * step) - mean) * rstd;
        if (WEIGHT == 1) y *= ldf2(DT, j);
        if (BIAS == 1) y += ldf3(DT, j);
        stf0(DT, base + j * step, y);
      }
    } else {
      float m = uintBitsToFloat(0xff800000u);  // -inf
      for (uint j = t; j < p.len; j += G) {
        const float v = ldf1(DT, base + j * step);
        m = (v > m || isnan(v)) ? v : m;
      }
      s[t] = m;
      combine(0);
      const float mx = s[0];
      barrier();
      float acc = 0.0;
      for (uint j = t; j < p.len; j += G) acc += exp(ldf1(DT, base + j * step) - mx);
      s[t] = acc;
      combine(1);
      const float sum = s[0];
      for (uint j = t; j < p.len; j += G) {
        const float d = ldf1(DT, base + j * step) - mx;
        stf0(DT, base + j * step, MODE == 1 ? d - log(sum) : exp(d) / sum);
      }
    }
    barrier();
  }
}
