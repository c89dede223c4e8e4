// The per-element bodies of the cuda backend's index kernels (Gather, IndexSelect, OneHot,
// ScatterAdd, IndexSelectBackward) and of Cumsum's per-line scan, written once: kernels.cu runs
// them on the device, and tests/unit/cuda runs the same text on the host against the cpu
// backend. Every output element is computed by one thread from its inputs, in a fixed order (a
// scatter's additions in index order, starting from x's value): no atomics, the cpu backend's
// bits. Plain C++ over launch.h's argument blocks: no CUDA or project headers beyond it.
#pragma once
#include <cstdint>

#include "backend/cuda/launch.h"

#if defined(__CUDACC__)
#define TW_IX_HD __host__ __device__ __forceinline__
#else
#define TW_IX_HD inline
#endif

namespace tw::cuda::ix {

// Offsets of output element i's coordinates in x, the index and src (a.xs, a.is, a.ss); its
// coordinate along a.dim; whether it lies inside the index's shape outside dim (scatter).
struct Pos {
  int64_t x = 0, index = 0, src = 0, along = 0;
  bool inside = true;
};
TW_IX_HD Pos position(const IxArgs& a, int64_t i) {
  Pos p;
  int64_t rem = i;
  for (int d = a.rank - 1; d >= 0; --d) {
    const int64_t c = rem % a.shape[d];
    rem /= a.shape[d];
    p.x += c * a.xs[d];
    p.index += c * a.is[d];
    p.src += c * a.ss[d];
    if (d == a.dim) {
      p.along = c;
    } else if (a.mode == kIxScatter && c >= a.ishape[d]) {
      p.inside = false;
    }
  }
  return p;
}

// An index value checked against [-size, size) (counted from the end when negative) or [0,
// size) (one_hot): the position, or -1 with the value recorded in a.bad.
TW_IX_HD int64_t checked(const IxArgs& a, int64_t v) {
  const bool negatives = a.mode != kIxOneHot;
  if (v >= a.size || v < (negatives ? -a.size : 0)) {
    if (a.bad) {
      a.bad[0] = v;
      a.bad[1] = a.seq;
    }
    return -1;
  }
  return v < 0 ? v + a.size : v;
}

// Gather and IndexSelect (bits of type U copied), OneHot (out i64: value == coordinate).
template <class U, class I>
TW_IX_HD void gather_element(const IxArgs& a, int64_t i) {
  const Pos p = position(a, i);
  const int64_t v = checked(a, static_cast<int64_t>(static_cast<const I*>(a.index)[p.index]));
  if (a.mode == kIxOneHot) {
    static_cast<int64_t*>(a.out)[i] = v == p.along ? 1 : 0;
    return;
  }
  static_cast<U*>(a.out)[i] = v < 0 ? U(0) : static_cast<const U*>(a.x)[p.x + v * a.x_dim_stride];
}

// ScatterAdd and IndexSelectBackward: x's element (or 0) plus, in index order, every src element
// whose index value names this element's position along dim. T the storage type, A the
// accumulation type (floats: T; integers: unsigned, wrapping).
template <class T, class A, class I>
TW_IX_HD void scatter_element(const IxArgs& a, int64_t i) {
  const Pos p = position(a, i);
  A acc = a.x ? static_cast<A>(static_cast<const T*>(a.x)[p.x]) : A(0);
  if (p.inside) {
    const I* index = static_cast<const I*>(a.index);
    const T* src = static_cast<const T*>(a.src);
    for (int64_t l = 0; l < a.len; ++l) {
      const int64_t v = checked(a, static_cast<int64_t>(index[p.index + l * a.i_dim_stride]));
      if (v == p.along) acc = static_cast<A>(acc + static_cast<A>(src[p.src + l * a.s_dim_stride]));
    }
  }
  static_cast<T*>(a.out)[i] = static_cast<T>(acc);
}

// Cumsum's line `line` (of outer * inner) in the cpu backend's order (launch.h, ScanArgs).
template <class T, class A, class O>
TW_IX_HD void scan_line(const ScanArgs& a, int64_t line) {
  const int64_t o = line / a.inner, c = line % a.inner;
  const T* x = static_cast<const T*>(a.x) + o * a.len * a.inner + c;
  O* out = static_cast<O*>(a.out) + o * a.len * a.inner + c;
  const int64_t step = a.inner;
  if (a.inner > 1 || a.len < 2 * kScanBlock) {
    A acc = A(0);
    for (int64_t j = 0; j < a.len; ++j) {
      acc += static_cast<A>(x[j * step]);
      out[j * step] = static_cast<O>(acc);
    }
    return;
  }
  // Long lines: each block's sum from zero, the blocks' prefix in order, each block rescanned
  // from its prefix.
  A run = A(0);
  for (int64_t b0 = 0; b0 < a.len; b0 += kScanBlock) {
    const int64_t n = a.len - b0 < kScanBlock ? a.len - b0 : kScanBlock;
    A s = A(0);
    for (int64_t j = 0; j < n; ++j) s += static_cast<A>(x[b0 + j]);
    A acc = run;
    for (int64_t j = 0; j < n; ++j) {
      acc += static_cast<A>(x[b0 + j]);
      out[b0 + j] = static_cast<O>(acc);
    }
    run += s;
  }
}

// AdaptiveAvgPool2d's bins: output oy of ho over h rows covers [oy * h / ho, ceil((oy + 1) * h /
// ho)).
TW_IX_HD int64_t bin_lo(int64_t o, int64_t n, int64_t no) { return o * n / no; }
TW_IX_HD int64_t bin_hi(int64_t o, int64_t n, int64_t no) { return ((o + 1) * n + no - 1) / no; }

// AdaptiveAvgPool2d and its backward, element i of the output. Forward: the bin's sum in
// row-major order over its size (0 / 0 for an empty bin). Backward: input element (iy, ix) adds
// grad / bin size of every bin covering it, bins in row-major order: the cpu backend's order of
// additions into that element.
template <class T>
TW_IX_HD void adaptive_element(const AdaptArgs& a, int64_t i) {
  const T* in = static_cast<const T*>(a.in);
  T* out = static_cast<T*>(a.out);
  if (!a.backward) {
    const int64_t ox = i % a.wo, oy = (i / a.wo) % a.ho, p = i / (a.wo * a.ho);
    const int64_t y0 = bin_lo(oy, a.h, a.ho), y1 = bin_hi(oy, a.h, a.ho);
    const int64_t x0 = bin_lo(ox, a.w, a.wo), x1 = bin_hi(ox, a.w, a.wo);
    const T* plane = in + p * a.h * a.w;
    T sum = 0;
    for (int64_t iy = y0; iy < y1; ++iy) {
      for (int64_t ix = x0; ix < x1; ++ix) sum += plane[iy * a.w + ix];
    }
    out[i] = sum / static_cast<T>((y1 - y0) * (x1 - x0));
    return;
  }
  const int64_t ix = i % a.w, iy = (i / a.w) % a.h, p = i / (a.w * a.h);
  const T* grad = in + p * a.ho * a.wo;
  T acc = 0;
  for (int64_t oy = 0; oy < a.ho; ++oy) {
    const int64_t y0 = bin_lo(oy, a.h, a.ho), y1 = bin_hi(oy, a.h, a.ho);
    if (iy < y0 || iy >= y1) continue;
    for (int64_t ox = 0; ox < a.wo; ++ox) {
      const int64_t x0 = bin_lo(ox, a.w, a.wo), x1 = bin_hi(ox, a.w, a.wo);
      if (ix < x0 || ix >= x1) continue;
      acc += grad[oy * a.wo + ox] / static_cast<T>((y1 - y0) * (x1 - x0));
    }
  }
  out[i] = acc;
}

}  // namespace tw::cuda::ix
