// MatMul and Linear through cuBLASLt: the parameters come from plan_gemm (plan.h, tested on the
// host), operands are read in place when one of their matrix strides is 1 (a transposed weight
// is not copied) and batch dims run as a strided batch. f32 computes exact f32 by default
// (CUBLAS_COMPUTE_32F; TW_CUDA_TF32=1 allows TF32 tensor cores), bf16 operands on tensor cores with
// f32 accumulation and an f32 result (docs/lowp.md), f64 in f64. Linear's bias and relu run as
// cuBLASLt's epilogue where it has one for the problem, else as elementwise kernels after it. One
// algorithm per problem from cuBLASLt's heuristic: the same problem gets the same algorithm and
// bits every run.
#include <memory>

#include "backend/cuda/kernels.h"

namespace tw::cuda {
namespace {

cudaDataType_t data_type(DType d) {
  switch (d) {
    case kF64: return CUDA_R_64F;
    case kF16: return CUDA_R_16F;
    case kBF16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

Status lt_check(cublasStatus_t st, const std::string& what, const std::string& device) {
  if (st == CUBLAS_STATUS_SUCCESS) return Status::OK();
  return internal_error(device + ": " + what + " failed: cuBLASLt status " +
                        std::to_string(static_cast<int>(st)));
}

// Owners of cuBLASLt's descriptors for one call.
struct Descs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~Descs() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

template <class T>
Status set_layout(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr, T v,
                  const std::string& device) {
  return lt_check(cublasLtMatrixLayoutSetAttribute(l, attr, &v, sizeof v),
                  "cublasLtMatrixLayoutSetAttribute", device);
}

}  // namespace

Result<CuTensor> Kernels::matmul(const CuTensor& a0, const CuTensor& b0, const CuTensor* bias,
                                 bool relu, const std::string& op) {
  const TensorMeta& m = out_meta();
  const std::string& dev = device_;
  TW_ASSIGN_OR_RETURN(GemmPlan p, plan_gemm(a0, b0, m.shape, ex_->tf32, op, dev));
  // Operands no in-place read can take: made contiguous in the output's batch shape, which
  // plans in place.
  CuTensor ka, kb;
  const CuTensor* a = &a0;
  const CuTensor* b = &b0;
  auto expanded = [&](const CuTensor& t) -> Result<CuTensor> {
    Shape full(m.shape.begin(), m.shape.end() - 2);
    full.push_back(t.shape[t.shape.size() - 2]);
    full.push_back(t.shape[t.shape.size() - 1]);
    return contiguous(strided::expand_view(t, full));
  };
  if (p.a.copy || p.b.copy) {
    if (p.b.copy) {
      TW_ASSIGN_OR_RETURN(ka, expanded(a0));
      a = &ka;
    }
    if (p.a.copy) {
      TW_ASSIGN_OR_RETURN(kb, expanded(b0));
      b = &kb;
    }
    TW_ASSIGN_OR_RETURN(p, plan_gemm(*a, *b, m.shape, ex_->tf32, op, dev));
    if (p.a.copy || p.b.copy) return internal_error(op + ": no in-place plan for copies");
  }
  TW_ASSIGN_OR_RETURN(CuTensor out, fresh(m));
  if (out.numel() == 0) return out;
  const int64_t es = static_cast<int64_t>(dtype_size(m.dtype));
  const int64_t in_es = static_cast<int64_t>(dtype_size(a->dtype));
  if (p.k == 0) {  // an empty sum: zeros (then the bias)
    TW_RETURN_NOT_OK(ex_->dev->check(
        cudaMemsetAsync(out.storage->ptr, 0, out.numel() * es, ex_->stream->s), op));
  }
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType_t scale = CUDA_R_32F;
  if (p.compute == GemmCompute::kTF32) compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  if (p.compute == GemmCompute::kF64) {
    compute = CUBLAS_COMPUTE_64F;
    scale = CUDA_R_64F;
  }
  // bf16 operands give an f32 result (docs/lowp.md): A and B in their type, C and D in the
  // result's.
  const cudaDataType_t type_in = data_type(a->dtype), type_out = data_type(m.dtype);
  bool epilogue_done = false;
  if (p.k > 0) {
    // Each try builds the descriptors; with `epilogue` false Linear's extras run afterwards.
    auto attempt = [&](bool epilogue) -> Result<bool> {
      Descs d;
      TW_RETURN_NOT_OK(lt_check(cublasLtMatmulDescCreate(&d.op, compute, scale),
                                "cublasLtMatmulDescCreate", dev));
      const cublasOperation_t ta = p.a.transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
      const cublasOperation_t tb = p.b.transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
      TW_RETURN_NOT_OK(lt_check(
          cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta),
          "TRANSA", dev));
      TW_RETURN_NOT_OK(lt_check(
          cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb),
          "TRANSB", dev));
      if (epilogue && (bias || relu)) {
        const cublasLtEpilogue_t e =
            bias ? (relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                 : CUBLASLT_EPILOGUE_RELU;
        TW_RETURN_NOT_OK(lt_check(
            cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e),
            "EPILOGUE", dev));
        if (bias) {
          const void* ptr = bias->data();
          TW_RETURN_NOT_OK(lt_check(cublasLtMatmulDescSetAttribute(
                                        d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &ptr, sizeof ptr),
                                    "BIAS_POINTER", dev));
        }
      }
      TW_RETURN_NOT_OK(lt_check(
          cublasLtMatrixLayoutCreate(&d.a, type_in, p.a.rows, p.a.cols, p.a.ld), "layout A", dev));
      TW_RETURN_NOT_OK(lt_check(
          cublasLtMatrixLayoutCreate(&d.b, type_in, p.b.rows, p.b.cols, p.b.ld), "layout B", dev));
      TW_RETURN_NOT_OK(
          lt_check(cublasLtMatrixLayoutCreate(&d.c, type_out, p.m, p.n, p.ldc), "layout C", dev));
      if (p.batch > 1) {
        const int32_t count = static_cast<int32_t>(p.batch);
        for (auto [l, stride] : {std::pair{d.a, p.a.batch_stride}, std::pair{d.b, p.b.batch_stride},
                                 std::pair{d.c, p.batch_stride_c}}) {
          TW_RETURN_NOT_OK(set_layout(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, count, dev));
          TW_RETURN_NOT_OK(set_layout(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, stride, dev));
        }
      }
      TW_RETURN_NOT_OK(
          lt_check(cublasLtMatmulPreferenceCreate(&d.pref), "cublasLtMatmulPreferenceCreate", dev));
      const uint64_t ws = kWorkspaceBytes;
      TW_RETURN_NOT_OK(
          lt_check(cublasLtMatmulPreferenceSetAttribute(
                       d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
                   "MAX_WORKSPACE_BYTES", dev));
      const uint32_t align_a = pointer_alignment(static_cast<uint64_t>(b->offset * in_es));
      const uint32_t align_b = pointer_alignment(static_cast<uint64_t>(a->offset * in_es));
      const uint32_t align_c = 256;
      for (auto [attr, v] : {std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a},
                             std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b},
                             std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_c},
                             std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_c}}) {
        TW_RETURN_NOT_OK(lt_check(cublasLtMatmulPreferenceSetAttribute(d.pref, attr, &v, sizeof v),
                                  "MIN_ALIGNMENT", dev));
      }
      cublasLtMatmulHeuristicResult_t h{};
      int found = 0;
      const cublasStatus_t hs =
          cublasLtMatmulAlgoGetHeuristic(ex_->lt, d.op, d.a, d.b, d.c, d.c, d.pref, 1, &h, &found);
      if (hs != CUBLAS_STATUS_SUCCESS || found == 0) {
        if (epilogue && (bias || relu)) return false;  // try without the epilogue
        return unimplemented(op + " of " + meta_str(a->meta()) + " and " + meta_str(b->meta()) +
                             ": not supported by the " + dev +
                             " backend (cuBLASLt has no algorithm for it, status " +
                             std::to_string(static_cast<int>(hs)) + ")");
      }
      const float one_f = 1, zero_f = 0;
      const double one_d = 1, zero_d = 0;
      const bool f64 = scale == CUDA_R_64F;
      const void* alpha = f64 ? static_cast<const void*>(&one_d) : &one_f;
      const void* beta = f64 ? static_cast<const void*>(&zero_d) : &zero_f;
      TW_RETURN_NOT_OK(
          lt_check(cublasLtMatmul(ex_->lt, d.op, alpha, b->data(), d.a, a->data(), d.b, beta,
                                  out.storage->ptr, d.c, out.storage->ptr, d.c, &h.algo,
                                  ex_->workspace->ptr, kWorkspaceBytes, ex_->stream->s),
                   "cublasLtMatmul (" + op + ")", dev));
      ex_->count_dispatch();
      ex_->last_op = op;
      return epilogue;
    };
    TW_ASSIGN_OR_RETURN(epilogue_done, attempt(bias || relu));
    if (!epilogue_done && (bias || relu)) {
      TW_ASSIGN_OR_RETURN(bool again, attempt(false));
      (void)again;
    }
  }
  if (!epilogue_done && bias) {
    EwArgs add;
    add.family = kEwBinary;
    add.kind = static_cast<int32_t>(ir::BinaryKind::kAdd);
    add.cls = cls_of(m.dtype);
    TW_ASSIGN_OR_RETURN(out, elementwise(add, {&out, bias}, m, op + " bias"));
  }
  if (!epilogue_done && relu) {
    EwArgs r;
    r.family = kEwUnary;
    r.kind = static_cast<int32_t>(ir::UnaryKind::kRelu);
    r.cls = cls_of(m.dtype);
    TW_ASSIGN_OR_RETURN(out, elementwise(r, {&out}, m, op + " relu"));
  }
  return out;
}

Result<CuTensor> Kernels::run(const ir::MatMul& op) {
  TW_ASSIGN_OR_RETURN(const CuTensor* a, in(op.a));
  TW_ASSIGN_OR_RETURN(const CuTensor* b, in(op.b));
  return matmul(*a, *b, nullptr, false, "matmul");
}

Result<CuTensor> Kernels::run(const ir::Linear& op) {
  TW_ASSIGN_OR_RETURN(const CuTensor* x, in(op.x));
  TW_ASSIGN_OR_RETURN(const CuTensor* w, in(op.w));
  const CuTensor* bias = nullptr;
  CuTensor kbias;
  if (op.bias.id != 0) {
    TW_ASSIGN_OR_RETURN(const CuTensor* b, in(op.bias));
    TW_ASSIGN_OR_RETURN(bias, dense(*b, kbias));  // the epilogue reads [0, out) contiguous
  }
  // w [out, in] read as [in, out]: a view (cuBLASLt reads it transposed in place).
  return matmul(*x, strided::permute_view(*w, {1, 0}), bias, op.relu, "linear");
}

}  // namespace tw::cuda
