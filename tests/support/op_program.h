// One program over every op of TW_OP_LIST, shared by the op codec tests
// (tests/unit/ir/codec_test.cc) and the fuzz seeds (tests/fuzz/seeds.cc), which need the same
// two things of it:
//   - it is valid: each op infers against the tensors the ops before it made (ids from 1), so
//     the validator's seed corpus is accepted (infer_in_order checks it);
//   - the first op of each code sets every field to something other than its default, so that
//     a field the codec dropped, swapped or defaulted shows up as a round-trip difference.
// Later ops of a code add other kinds, dtypes and scalar types. A new op gets its first
// instance here; Codec.ProgramCoversEveryOpWithNonDefaultFields and tw_fuzz_seeds fail until
// it has one.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/infer.h"
#include "ir/ops.h"
#include "ir/printer.h"

namespace tw::testing {

inline std::vector<ir::Op> every_op_program() {
  using namespace ir;
  const double host[4] = {1, 2, 3, 4};
  const uint16_t half_host[2] = {0x3C00, 0xC000};  // f16 1 and -2
  const std::vector<int64_t> conv_stride = {2, 1}, conv_padding = {2, 1}, conv_dilation = {2, 1};
  return {
      // -- creation: the inputs of what follows --
      Full{.out = {1}, .shape = {4, 4}, .dtype = kBool, .value = 1},  // a mask
      Arange{.out = {2}, .start = 1, .end = 5, .step = 1, .dtype = kI32},
      Eye{.out = {3}, .n = 4, .m = 4, .dtype = kF64},
      FromHost{
          .out = {4}, .shape = {2, 2}, .dtype = kF64, .data = {Buffer::copy_of(host, sizeof host)}},
      RandUniform{.out = {5}, .shape = {4, 4}, .dtype = kF64, .seed = 7, .low = 0.25, .high = 0.75},
      RandNormal{
          .out = {6}, .shape = {2, 4, 6, 6}, .dtype = kF64, .seed = ~0ull, .mean = 0.5, .std = 2},
      Bernoulli{.p = {5}, .out = {7}, .seed = 99},
      Arange{.out = {8}, .start = 0.5, .end = 9.5, .step = 0.5, .dtype = kF32},
      Eye{.out = {9}, .n = 3, .m = 4, .dtype = kBF16},
      FromHost{.out = {10},
               .shape = {2},
               .dtype = kF16,
               .data = {Buffer::copy_of(half_host, sizeof half_host)}},
      Arange{.out = {11}, .start = 0, .end = 4, .step = 1},  // i64: an index
      // -- elementwise --
      Unary{.kind = UnaryKind::kGelu, .x = {3}, .out = {12}},
      Binary{.kind = BinaryKind::kPow, .a = {5}, .b = {3}, .out = {13}},
      BinaryScalar{.kind = BinaryKind::kRemainder, .a = {3}, .s = -4, .reverse = true, .out = {14}},
      Where{.cond = {1}, .a = {3}, .b = {5}, .out = {15}},
      Clamp{.x = {3}, .has_lo = true, .lo = -1.5, .has_hi = true, .hi = 3, .out = {16}},
      MaskedFill{.x = {3}, .mask = {1}, .value = -1e9, .out = {17}},
      Cast{.x = {3}, .dtype = kI64, .out = {18}},  // zeros and ones: an index
      Cast{.x = {5}, .dtype = kBool, .out = {19}},
      Unary{.kind = UnaryKind::kExp, .x = {8}, .out = {20}},
      Binary{.kind = BinaryKind::kAdd, .a = {3}, .b = {5}, .out = {21}},
      BinaryScalar{.kind = BinaryKind::kMul, .a = {8}, .s = 2.0, .out = {22}},
      // -- reductions, linear algebra --
      Reduce{.kind = ReduceKind::kArgmin, .x = {3}, .dims = {-1}, .keepdim = true, .out = {23}},
      Reduce{.kind = ReduceKind::kSum, .x = {6}, .dims = {1, -1}, .out = {24}},
      Cumsum{.x = {3}, .dim = 1, .out = {25}},
      MatMul{.a = {3}, .b = {5}, .out = {26}},
      // -- movement --
      Reshape{.x = {3}, .shape = {-1, 8}, .out = {27}},
      Permute{.x = {6}, .dims = {0, 2, 3, 1}, .out = {28}},
      Expand{.x = {4}, .shape = {3, -1, 2}, .out = {29}},
      Slice{.x = {3}, .starts = {1, -2}, .ends = {4, 100}, .steps = {2, 1}, .out = {30}},
      SliceAssign{
          .x = {3}, .src = {4}, .starts = {0, 1}, .ends = {4, 3}, .steps = {2, 1}, .out = {31}},
      Cat{.xs = {{3}, {5}, {13}}, .dim = 1, .out = {32}},
      Flip{.x = {3}, .dims = {0, 1}, .out = {33}},
      Repeat{.x = {3}, .repeats = {2, 1, 3}, .out = {34}},
      // -- indexing --
      Gather{.x = {3}, .dim = 1, .index = {18}, .out = {35}},
      ScatterAdd{.x = {3}, .dim = -1, .index = {18}, .src = {5}, .out = {36}},
      IndexSelect{.x = {3}, .dim = 1, .index = {11}, .out = {37}},
      OneHot{.x = {2}, .num_classes = 5, .out = {38}},
      // -- neural, on x = %6 [2, 4, 6, 6], and their gradients --
      Softmax{.x = {3}, .dim = 0, .log = true, .out = {39}},
      Full{.out = {40}, .shape = {8, 2, 3, 3}, .dtype = kF64, .value = 0.25},
      Full{.out = {41}, .shape = {8}, .dtype = kF64, .value = 0},
      Conv2d{.x = {6},
             .w = {40},
             .bias = {41},
             .stride = conv_stride,
             .padding = conv_padding,
             .dilation = conv_dilation,
             .groups = 2,
             .out = {42}},  // [2, 8, 3, 6]
      Pool2d{.kind = PoolKind::kAvg,
             .x = {6},
             .kernel = {3, 3},
             .stride = {1, 2},
             .padding = {1, 1},
             .out = {43}},  // [2, 4, 6, 3]
      Pool2d{.kind = PoolKind::kMax, .x = {6}, .out = {44}},
      AdaptiveAvgPool2d{.x = {6}, .output_size = {2, 3}, .out = {45}},
      Full{.out = {46}, .shape = {6, 6}, .dtype = kF64, .value = 1},
      LayerNorm{
          .x = {6}, .weight = {46}, .bias = {46}, .normalized_dims = 2, .eps = 1e-6, .out = {47}},
      Conv2dBackwardInput{.grad = {42},
                          .w = {40},
                          .x_shape = {2, 4, 6, 6},
                          .stride = conv_stride,
                          .padding = conv_padding,
                          .dilation = conv_dilation,
                          .groups = 2,
                          .out = {48}},
      Conv2dBackwardWeight{.grad = {42},
                           .x = {6},
                           .w_shape = {8, 2, 3, 3},
                           .stride = conv_stride,
                           .padding = conv_padding,
                           .dilation = conv_dilation,
                           .groups = 2,
                           .out = {49}},
      Pool2dBackward{.kind = PoolKind::kAvg,
                     .grad = {43},
                     .x = {6},
                     .kernel = {3, 3},
                     .stride = {1, 2},
                     .padding = {1, 1},
                     .out = {50}},
      Pool2dBackward{.kind = PoolKind::kMax, .grad = {44}, .x = {6}, .out = {51}},
      AdaptiveAvgPool2dBackward{.grad = {45}, .input_size = {6, 6}, .out = {52}},
      // -- an optimizer step and the fused linear, in f32 --
      Full{.out = {53}, .shape = {6, 6}, .value = -0.5},
      Full{.out = {54}, .shape = {}, .value = 0.5},
      AdamStep{.param = {53},
               .grad = {53},
               .exp_avg = {53},
               .exp_avg_sq = {53},
               .step_size = {54},
               .bias2_sqrt = {54},
               .beta1 = 0.8,
               .beta2 = 0.95,
               .eps = 1e-6,
               .weight_decay = 0.01,
               .lr = 0.02,
               .decoupled = true,
               .param_out = {55},
               .exp_avg_out = {56},
               .exp_avg_sq_out = {57}},
      Full{.out = {58}, .shape = {6}, .value = 0.25},
      Linear{.x = {53}, .w = {55}, .bias = {58}, .relu = true, .out = {59}},
      // -- attention (f32 [6, 6] as [Tq, D] and [Tk, D], a bool mask over the keys) --
      Full{.out = {60}, .shape = {6}, .dtype = kBool, .value = 1},
      ScaledDotProductAttention{.query = {53},
                                .key = {55},
                                .value = {59},
                                .mask = {60},
                                .causal = true,
                                .scale = 0.25,
                                .out = {61}},
      ScaledDotProductAttentionBackward{.grad = {61},
                                        .query = {53},
                                        .key = {55},
                                        .value = {59},
                                        .mask = {60},
                                        .causal = true,
                                        .scale = 0.25,
                                        .grad_query = {62},
                                        .grad_key = {63},
                                        .grad_value = {64}},
      // -- index_select's gradient: the f64 [4, 4] eye as rows 1..4 (id 2) of a [5, 4] x --
      IndexSelectBackward{.grad = {3}, .index = {2}, .dim = -2, .x_shape = {5, 4}, .out = {65}},
      // -- layer_norm's gradients over both dims of the f32 [6, 6] tensors, gelu's --
      LayerNormBackward{.grad = {53},
                        .x = {55},
                        .weight = {59},
                        .normalized_dims = 2,
                        .eps = 1e-3,
                        .grad_x = {66},
                        .grad_weight = {67},
                        .grad_bias = {68}},
      GeluBackward{.grad = {53}, .x = {55}, .out = {69}},
      // -- quantization (protocol 14): f32 rows [4, 64], per-block u8, Q4_0 blocks, int8 --
      RandUniform{.out = {70}, .shape = {4, 64}, .dtype = kF32, .seed = 5, .low = -1, .high = 1},
      Full{.out = {71}, .shape = {4, 2}, .dtype = kF32, .value = 0.05},
      Full{.out = {72}, .shape = {4, 2}, .dtype = kU8, .value = 3},
      Quantize{.x = {70},
               .scale = {71},
               .zero_point = {72},
               .axis = -1,
               .block = 32,
               .dtype = kU8,
               .out = {73}},
      Dequantize{
          .x = {73}, .scale = {71}, .zero_point = {72}, .axis = -1, .block = 32, .out = {74}},
      PackBlocks{.x = {70}, .format = BlockFormat::kQ4_0, .out = {75}},
      UnpackBlocks{.x = {75}, .format = BlockFormat::kQ4_0, .out = {76}},
      Full{.out = {77}, .shape = {4}, .dtype = kF32, .value = 0.5},
      LinearBlocks{.x = {70}, .w = {75}, .bias = {77}, .format = BlockFormat::kQ4_0, .out = {78}},
      Full{.out = {79}, .shape = {4}, .dtype = kF32, .value = 0.01},
      Quantize{.x = {70},
               .scale = {79},
               .zero_point = {},
               .axis = 0,
               .block = 0,
               .dtype = kI8,
               .out = {80}},
      LinearInt8{.x = {70}, .w = {80}, .w_scale = {79}, .bias = {77}, .out = {81}},
  };
}

// OK when every op of `ops` infers against the tensors the ops before it made; else the first
// that does not, printed, with inference's message.
inline Status infer_in_order(const std::vector<ir::Op>& ops) {
  std::unordered_map<ir::TensorId, TensorMeta> made;
  const ir::MetaLookup lookup = [&made](ir::TensorId id) -> Result<TensorMeta> {
    auto it = made.find(id);
    if (it == made.end()) return not_found("no tensor " + std::to_string(id));
    return it->second;
  };
  for (const ir::Op& op : ops) {
    Result<std::vector<TensorMeta>> metas = ir::infer(op, lookup);
    if (!metas.ok()) return invalid_argument(ir::to_string(op) + ": " + metas.status().message());
    const std::vector<ir::TensorId> outs = ir::op_outputs(op);
    for (size_t i = 0; i < outs.size() && i < metas->size(); ++i) made[outs[i]] = (*metas)[i];
  }
  return Status::OK();
}

}  // namespace tw::testing
