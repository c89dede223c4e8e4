// What the host and the shaders agree on beyond the IR's enums (which gen_kinds.cc writes into
// kinds.glsl from their declarations): the elementwise shader's families and compute classes,
// the parameter block every shader reads (binding kParamsBinding), and the workgroup size.
#pragma once
#include <cstdint>

namespace tw::vk {

enum Family : int32_t {
  kEwUnary = 0,
  kEwBinary = 1,
  kEwWhere = 2,
  kEwFill = 3,
  kEwClamp = 4,
  kEwMaskedFill = 5,
  kEwGeluBackward = 6,
};
enum Cls : int32_t { kClsF32 = 0, kClsF64 = 1, kClsI64 = 2 };

inline constexpr int kMaxRank = 6;         // after merging dims (strided.cc); more is refused
inline constexpr int kTensorBindings = 4;  // bindings 0-3: tensors (0: the output)
inline constexpr int kParamsBinding = 4;   // binding 4: this dispatch's Params
// Bindings 5-9: more tensors, for the ops with many operands (Binding k >= 4 is binding k + 1).
inline constexpr int kExtraBindings = 5;
inline constexpr uint32_t kGroupSize = 256;

// The elementwise shader's parameter block (std430: every member 4 bytes, in this order).
struct EwParams {
  uint32_t n = 0, rank = 0;
  uint32_t shape[kMaxRank] = {};
  int32_t sa[kMaxRank] = {}, sb[kMaxRank] = {}, sc[kMaxRank] = {};
  uint32_t oa = 0, ob = 0, oc = 0;
  uint32_t s0f = 0, s0d_lo = 0, s0d_hi = 0, s0i_lo = 0, s0i_hi = 0;
  uint32_t s1f = 0, s1d_lo = 0, s1d_hi = 0, s1i_lo = 0, s1i_hi = 0;
  uint32_t dta = 0, dtb = 0, dtc = 0;  // the operands' dtypes
};

// The reduce shader's parameter block (std430, in this order).
struct ReduceParams {
  uint32_t n_out = 0, n_red = 0, kept_rank = 0, red_rank = 0;
  uint32_t kshape[kMaxRank] = {};
  int32_t kstride[kMaxRank] = {};
  uint32_t rshape[kMaxRank] = {};
  int32_t rstride[kMaxRank] = {};
  uint32_t offset = 0;
};
inline constexpr uint32_t kReduceGroupSize = 64;

// The matmul shader's parameter block (std430, in this order) and tile.
inline constexpr int kMaxBatchRank = 4;
struct MatmulParams {
  uint32_t M = 0, N = 0, K = 0, batch = 0, batch_rank = 0;
  uint32_t bshape[kMaxBatchRank] = {};
  int32_t a_bstride[kMaxBatchRank] = {}, b_bstride[kMaxBatchRank] = {};
  int32_t a_m = 0, a_k = 0, b_k = 0, b_n = 0, bias_n = 0;
  uint32_t a_off = 0, b_off = 0, bias_off = 0;
};
inline constexpr uint32_t kMatmulTile = 16;

// The index shader's modes (shaders/index.comp) and parameter block (std430, in this order).
enum IndexMode : int32_t {
  kIxCopy = 0,
  kIxArange = 1,
  kIxEye = 2,
  kIxGather = 3,
  kIxOneHot = 4,
  kIxScatter = 5,
  kIxCumsum = 6,
  kIxRandUniform = 7,
  kIxBernoulli = 8,
  kIxRandNormal = 9,
};
struct IndexParams {
  uint32_t n = 0, rank = 0;
  uint32_t shape[kMaxRank] = {};
  int32_t sa[kMaxRank] = {}, sb[kMaxRank] = {}, so[kMaxRank] = {};
  uint32_t oa = 0, ob = 0, oo = 0;
  uint32_t dim = 0xffffffffu, size = 0;
  int32_t da = 0, db = 0, dout = 0;
  uint32_t len = 0;
  uint32_t u[8] = {};
};

// The conv shader's modes (shaders/conv.comp) and parameter block (std430, in this order).
enum ConvMode : int32_t {
  kCvForward = 0,
  kCvBackwardInput = 1,
  kCvBackwardWeight = 2,
  kCvPool = 3,
  kCvPoolBackward = 4,
  kCvAdaptive = 5,
  kCvAdaptiveBackward = 6,
};
struct ConvParams {
  uint32_t n = 0;
  uint32_t N = 0, C = 0, H = 0, W = 0;
  uint32_t O = 0, Ho = 0, Wo = 0;
  uint32_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1, groups = 1;
  uint32_t has_bias = 0;
  uint32_t oa = 0, ob = 0, oc = 0;
};

// The rows shader's parameter block (softmax, log_softmax, layer_norm).
struct RowsParams {
  uint32_t rows = 0, len = 0, inner = 0;
  float eps = 0;
  uint32_t eps_lo = 0, eps_hi = 0;  // eps's double bits (the f64 build)
};

}  // namespace tw::vk
