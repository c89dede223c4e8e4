#version 450
// Convolution and pooling over NCHW planes, forward and backward, one shader specialised by MODE
// (shader_abi.h, kCv*). Every thread computes whole outputs in a fixed order: the gradients are
// gathered (each input or weight element sums the terms that reach it), never scattered, so
// there are no atomics and the results are identical run to run; the pooling gradients add their
// terms in the cpu backend's order (output positions in row-major order). The variant with
// doubles (TW_F64) computes f64 tensors; the other computes f32, f16 and bf16 in float.
// Operands are contiguous (vulkan/conv.cc makes them so).
#include "common.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 0) const int MODE = 0;
layout(constant_id = 1) const int DT = 0;    // every operand's dtype
layout(constant_id = 2) const int KIND = 0;  // pooling: PK_* (kinds.glsl)

TW_TENSOR(0)  // out
TW_TENSOR(1)  // x, or the incoming gradient
TW_TENSOR(2)  // w, or x
TW_TENSOR(3)  // bias

layout(set = 0, binding = 4) readonly buffer Params {
  uint n;                   // threads: elements of the output
  uint N, C, H, W;          // x (or the gradient's input side)
  uint O, Ho, Wo;           // the forward output's channels and size
  uint kh, kw, sh, sw, ph, pw, dh, dw, groups;
  uint has_bias;
  uint oa, ob, oc;          // element offsets of bindings 1, 2, 3
} p;

#if TW_F64
#define real double
#define LD1(i) ldd1(DT, i)
#define LD2(i) ldd2(DT, i)
#define LD3(i) ldd3(DT, i)
#define ST0(i, v) std0(DT, i, v)
#define ZERO 0.0LF
#define NEG_INF double(uintBitsToFloat(0xff800000u))
#else
#define real float
#define LD1(i) ldf1(DT, i)
#define LD2(i) ldf2(DT, i)
#define LD3(i) ldf3(DT, i)
#define ST0(i, v) stf0(DT, i, v)
#define ZERO 0.0
#define NEG_INF uintBitsToFloat(0xff800000u)
#endif

bool takes(real v, real best) { return v > best || isnan(v); }

// For positions base + k * step (k = 0, 1, ...): the first k with a position >= 0, and the end
// of the k < count whose position is < size (the range [first, end) may be empty).
uint tap_first(int base, uint step) {
  return base >= 0 ? 0u : uint((-base + int(step) - 1) / int(step));
}
uint tap_end(int base, uint step, uint size, uint count) {
  const int room = int(size) - base;  // positions base .. size - 1
  if (room <= 0) return 0u;
  return min(count, uint((room + int(step) - 1) / int(step)));
}

// The first output position (along one axis) whose window, stride s, padding pad, kernel k,
// reaches input position i, and the last (inclusive); empty when first > last.
int first_out(int i, int pad, int k, int s) {
  const int t = i + pad - k + 1;
  return t <= 0 ? 0 : (t + s - 1) / s;
}
int last_out(int i, int pad, int s, int size_out) { return min((i + pad) / s, size_out - 1); }

void main() {
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
    if (MODE == CV_FORWARD) {  // out [N, O, Ho, Wo]; x, w [O, C/groups, kh, kw], bias [O]
      const uint ox = i % p.Wo, oy = (i / p.Wo) % p.Ho, o = (i / (p.Wo * p.Ho)) % p.O,
                 nn = i / (p.Wo * p.Ho * p.O);
      const uint cg = p.C / p.groups, og = p.O / p.groups, g = o / og;
      // The taps inside the input, found once (no test per tap): ky in [ky0, ky1), kx in
      // [kx0, kx1). The terms are added in the same order as testing each tap would.
      const int iy0 = int(oy * p.sh) - int(p.ph), ix0 = int(ox * p.sw) - int(p.pw);
      const uint ky0 = tap_first(iy0, p.dh), ky1 = tap_end(iy0, p.dh, p.H, p.kh);
      const uint kx0 = tap_first(ix0, p.dw), kx1 = tap_end(ix0, p.dw, p.W, p.kw);
      real acc = ZERO;
      for (uint c = 0u; c < cg; ++c) {
        const uint xplane = p.oa + ((nn * p.C + g * cg + c) * p.H) * p.W;
        const uint wbase = p.ob + ((o * cg + c) * p.kh) * p.kw;
        for (uint ky = ky0; ky < ky1; ++ky) {
          const uint xrow = xplane + uint(iy0 + int(ky * p.dh)) * p.W;
          const uint wrow = wbase + ky * p.kw;
          for (uint kx = kx0; kx < kx1; ++kx) {
            acc += LD1(xrow + uint(ix0 + int(kx * p.dw))) * LD2(wrow + kx);
          }
        }
      }
      if (p.has_bias != 0u) acc += LD3(p.oc + o);
      ST0(i, acc);
    } else if (MODE == CV_BACKWARD_INPUT) {  // out [N, C, H, W]; grad [N, O, Ho, Wo], w
      const uint ix = i % p.W, iy = (i / p.W) % p.H, ci = (i / (p.W * p.H)) % p.C,
                 nn = i / (p.W * p.H * p.C);
      const uint cg = p.C / p.groups, og = p.O / p.groups, g = ci / cg, c = ci % cg;
      // Each tap (ky, kx) that reaches this element is found once, then summed over the
      // group's output channels (integer division is slow where a lane is a loop iteration).
      const uint gstep = p.Ho * p.Wo, wstep = cg * p.kh * p.kw;
      const uint gplane0 = p.oa + (nn * p.O + g * og) * gstep;
      const uint wbase0 = p.ob + ((g * og * cg + c) * p.kh) * p.kw;
      real acc = ZERO;
      for (uint ky = 0u; ky < p.kh; ++ky) {
        const int ty = int(iy + p.ph) - int(ky * p.dh);
        if (ty < 0 || ty % int(p.sh) != 0 || ty / int(p.sh) >= int(p.Ho)) continue;
        for (uint kx = 0u; kx < p.kw; ++kx) {
          const int tx = int(ix + p.pw) - int(kx * p.dw);
          if (tx < 0 || tx % int(p.sw) != 0 || tx / int(p.sw) >= int(p.Wo)) continue;
          uint gi = gplane0 + uint(ty / int(p.sh)) * p.Wo + uint(tx / int(p.sw));
          uint wi = wbase0 + ky * p.kw + kx;
          for (uint o = 0u; o < og; ++o) {
            acc += LD1(gi) * LD2(wi);
            gi += gstep;
            wi += wstep;
          }
        }
      }
      ST0(i, acc);
    } else if (MODE == CV_BACKWARD_WEIGHT) {  // out w [O, C/groups, kh, kw]; grad, x
      const uint cg = p.C / p.groups, og = p.O / p.groups;
      const uint kx = i % p.kw, ky = (i / p.kw) % p.kh, c = (i / (p.kw * p.kh)) % cg,
                 o = i / (p.kw * p.kh * cg);
      const uint ci = (o / og) * cg + c;
      // The output positions whose tap (ky, kx) lies inside the input, found once: oy in
      // [oy0, oy1), ox in [ox0, ox1) (the terms in the order testing each would give).
      const int ry = int(ky * p.dh) - int(p.ph), rx = int(kx * p.dw) - int(p.pw);
      const uint oy0 = tap_first(ry, p.sh), oy1 = tap_end(ry, p.sh, p.H, p.Ho);
      const uint ox0 = tap_first(rx, p.sw), ox1 = tap_end(rx, p.sw, p.W, p.Wo);
      real acc = ZERO;
      for (uint nn = 0u; nn < p.N; ++nn) {
        const uint gplane = p.oa + ((nn * p.O + o) * p.Ho) * p.Wo;
        const uint xplane = p.ob + ((nn * p.C + ci) * p.H) * p.W;
        for (uint oy = oy0; oy < oy1; ++oy) {
          const uint grow = gplane + oy * p.Wo;
          const uint xrow = xplane + uint(int(oy * p.sh) + ry) * p.W;
          real row = ZERO;  // a row at a time: the rounding error grows with rows, not terms
          for (uint ox = ox0; ox < ox1; ++ox) {
            row += LD1(grow + ox) * LD2(xrow + uint(int(ox * p.sw) + rx));
          }
          acc += row;
        }
      }
      ST0(i, acc);
    } else if (MODE == CV_POOL) {  // out [N, C, Ho, Wo]; x; max ignores padding, NaN sticks
      const uint ox = i % p.Wo, oy = (i / p.Wo) % p.Ho, plane = i / (p.Wo * p.Ho);
      const uint xplane = p.oa + plane * p.H * p.W;
      real acc = KIND == PK_Max ? NEG_INF : ZERO;
      for (uint ky = 0u; ky < p.kh; ++ky) {
        const int iy = int(oy * p.sh + ky) - int(p.ph);
        if (iy < 0 || iy >= int(p.H)) continue;
        for (uint kx = 0u; kx < p.kw; ++kx) {
          const int ix = int(ox * p.sw + kx) - int(p.pw);
          if (ix < 0 || ix >= int(p.W)) continue;
          const real v = LD1(xplane + uint(iy) * p.W + uint(ix));
          if (KIND == PK_Max) acc = takes(v, acc) ? v : acc;
          else acc += v;
        }
      }
      if (KIND != PK_Max) acc /= real(p.kh) * real(p.kw);
      ST0(i, acc);
    } else if (MODE == CV_POOL_BACKWARD) {  // out x's shape; grad [N, C, Ho, Wo], x
      const uint ix = i % p.W, iy = (i / p.W) % p.H, plane = i / (p.W * p.H);
      const uint gplane = p.oa + plane * p.Ho * p.Wo, xplane = p.ob + plane * p.H * p.W;
      real acc = ZERO;
      const int oy0 = first_out(int(iy), int(p.ph), int(p.kh), int(p.sh));
      const int oy1 = last_out(int(iy), int(p.ph), int(p.sh), int(p.Ho));
      const int ox0 = first_out(int(ix), int(p.pw), int(p.kw), int(p.sw));
      const int ox1 = last_out(int(ix), int(p.pw), int(p.sw), int(p.Wo));
      for (int oy = oy0; oy <= oy1; ++oy) {
        for (int ox = ox0; ox <= ox1; ++ox) {
          const real gv = LD1(gplane + uint(oy) * p.Wo + uint(ox));
          if (KIND != PK_Max) {
            acc += gv / (real(p.kh) * real(p.kw));
            continue;
          }
          // The tap this window's max chose (pool order, first on ties; all -inf: the first).
          real best = NEG_INF;
          int at = -1, first = -1;
          for (uint ky = 0u; ky < p.kh; ++ky) {
            const int y = oy * int(p.sh) + int(ky) - int(p.ph);
            if (y < 0 || y >= int(p.H)) continue;
            for (uint kx = 0u; kx < p.kw; ++kx) {
              const int x = ox * int(p.sw) + int(kx) - int(p.pw);
              if (x < 0 || x >= int(p.W)) continue;
              const int k = y * int(p.W) + x;
              if (first < 0) first = k;
              const real v = LD2(xplane + uint(k));
              if (takes(v, best)) {
                best = v;
                at = k;
              }
            }
          }
          if (at < 0) at = first;
          if (at == int(iy * p.W + ix)) acc += gv;
        }
      }
      ST0(i, acc);
    } else if (MODE == CV_ADAPTIVE) {  // out [N, C, Ho, Wo]: the mean of each bin
      const uint ox = i % p.Wo, oy = (i / p.Wo) % p.Ho, plane = i / (p.Wo * p.Ho);
      const uint y0 = oy * p.H / p.Ho, y1 = ((oy + 1u) * p.H + p.Ho - 1u) / p.Ho;
      const uint x0 = ox * p.W / p.Wo, x1 = ((ox + 1u) * p.W + p.Wo - 1u) / p.Wo;
      real sum = ZERO;
      for (uint y = y0; y < y1; ++y) {
        for (uint x = x0; x < x1; ++x) sum += LD1(p.oa + (plane * p.H + y) * p.W + x);
      }
      ST0(i, sum / real((y1 - y0) * (x1 - x0)));
    } else if (MODE == CV_ADAPTIVE_BACKWARD) {  // out [N, C, H, W]; grad [N, C, Ho, Wo]
      const uint ix = i % p.W, iy = (i / p.W) % p.H, plane = i / (p.W * p.H);
      real acc = ZERO;
      for (uint oy = 0u; oy < p.Ho; ++oy) {
        const uint y0 = oy * p.H / p.Ho, y1 = ((oy + 1u) * p.H + p.Ho - 1u) / p.Ho;
        if (iy < y0 || iy >= y1) continue;
        for (uint ox = 0u; ox < p.Wo; ++ox) {
          const uint x0 = ox * p.W / p.Wo, x1 = ((ox + 1u) * p.W + p.Wo - 1u) / p.Wo;
          if (ix < x0 || ix >= x1) continue;
          acc += LD1(p.oa + (plane * p.Ho + oy) * p.Wo + ox) / real((y1 - y0) * (x1 - x0));
        }
      }
      ST0(i, acc);
    }
  }
}
