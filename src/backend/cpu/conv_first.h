// A direct AVX-512 convolution for a network's first layer: few input channels, unit stride and
// dilation along the width, one group. oneDNN's kernels for this case write a channel-blocked
// result (nChw16c) that must then be transposed to NCHW, which on bench/kernels_bench.cc's
// conv2d (3 -> 64 channels, 32x32, batch 32) took as long as the convolution itself; this one
// writes NCHW directly, vectorised along the output row.
#pragma once
#include <cstdint>

#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw::cpu {

struct FirstLayerConv {
  int64_t n, c, h, w;  // input
  int64_t o, kh, kw;   // weights [o, c, kh, kw]
  int64_t ho, wo;      // output
  int64_t sh, ph, dh;  // stride, padding and dilation along the height
  int64_t pw, dw;      // padding and dilation along the width (stride 1)
};

// Whether conv_first_layer takes this problem on this CPU.
bool conv_first_layer_fits(int64_t c, int64_t kh, int64_t kw, int64_t wo, int64_t groups,
                           int64_t sw);

// y[n, o, ho, wo] = bias[o] + sum over (c, ky, kx) in that order of w * x; each output row is
// one unit of work for the pool, so the bytes do not depend on the thread count.
void conv_first_layer(const FirstLayerConv& g, const float* x, const float* w, const float* bias,
                      float* y);

}  // namespace tw::cpu
TW_INTERNAL_END
