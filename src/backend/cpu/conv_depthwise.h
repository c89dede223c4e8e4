// Direct f32 kernels for depthwise convolution (groups == in channels == out channels, one input
// channel per group: MobileNet's and EfficientNet's 3x3 and 5x5 layers), forward and both
// gradients, on plain NCHW.
//
// oneDNN 2.6 has no fast kernel for this on plain NCHW (conv.cc keeps a one-channel-per-group
// source plain, and its depthwise kernels want nChw8c/nChw16c): it ran [2,144,56,56] 3x3 in 4.7
// ms against PyTorch's 0.9. Here each plane is copied into a zero-padded scratch plane (in L1 or
// L2), so that every output is the same unconditional sum over the window, vectorised along the
// output row with the accumulators in registers.
//
// Determinism (ARCHITECTURE.md §8): the forward pass and d x give each (image, channel) plane to
// one task; d w gives each channel to one task, which adds its terms in an order fixed by the
// loops (images, rows, 16 lanes along the row, then the lanes in order). No result depends on the
// thread count or on the partition of tasks over threads.
#pragma once
#include <cstdint>

#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw::cpu {

struct DepthwiseConv {
  int64_t n, c, h, w;  // input [n, c, h, w]; weights [c, 1, kh, kw]; output [n, c, ho, wo]
  int64_t kh, kw;
  int64_t ho, wo;
  int64_t sh, sw, ph, pw, dh, dw;
};

// Whether the kernels below take a convolution with these weights ([o, cg, kh, kw]) and groups:
// depthwise with a depth multiplier of 1, and a padded plane of bounded size (a padding far larger
// than the image stays on oneDNN).
bool depthwise_fits(const DepthwiseConv& g, int64_t o, int64_t cg, int64_t groups);

// y = bias[c] + sum over (ky, kx) in order of w[c, ky, kx] * x (zero outside the image).
void depthwise_forward(const DepthwiseConv& g, const float* x, const float* w, const float* bias,
                       float* y);
// d x of sum(grad * conv2d(x, w)).
void depthwise_input_grad(const DepthwiseConv& g, const float* grad, const float* w, float* dx);
// d w of sum(grad * conv2d(x, w)).
void depthwise_weight_grad(const DepthwiseConv& g, const float* x, const float* grad, float* dw);

}  // namespace tw::cpu
TW_INTERNAL_END
