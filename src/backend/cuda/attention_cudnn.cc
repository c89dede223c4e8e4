// cuDNN's fused attention for f16 and bf16 (ScaledDotProductAttention and its backward), through
// cuDNN 9's graph API: the backend descriptors of its native SDPA operations
// (CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR and _BWD_, cuDNN 9.13 and later; cudnn_frontend, the
// header library over them, is not on the machines this builds on). An execution plan is built
// once per case (dtype, batch-heads, lengths, head dims) and kept with the backend's cuDNN handle,
// refusals too, so a case cuDNN does not serve costs one attempt.
//
// The cases served: no mask and not causal (cuDNN 9.19's native operation has no score mask; a
// causal or masked one needs its score subgraph, cuDNN 9.21), head dims multiples of 8 up to 256,
// and engines whose numerical notes do not say nondeterministic (the backward's dq accumulation
// with atomics is left out: results equal run to run). Everything else, and every refusal by cuDNN
// or the device, runs on this backend's f32 kernels (attention.cc), unless TW_CUDA_SDPA=cudnn asks
// for cuDNN only (the refusal is then the op's error, naming cuDNN's reason).
//
// The backward needs the forward's output and its softmax statistics (log-sum-exp per query row),
// which the op does not carry: it runs the forward plan first (O and the statistics), then the
// backward plan.
#if TW_CUDA_CUDNN
#include <cudnn.h>

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <tuple>
#include <utility>

#include "backend/cuda/kernels.h"

namespace tw::cuda {

namespace {

enum : int64_t { kQ = 1, kK, kV, kO, kStats, kScale, kDO, kDQ, kDK, kDV };

struct Desc {
  cudnnBackendDescriptor_t d = nullptr;
  Desc() = default;
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  ~Desc() {
    if (d) (void)cudnnBackendDestroyDescriptor(d);
  }
};

// Descriptors made and set, the first failure kept (later calls do nothing once one failed).
struct Graph {
  std::vector<std::unique_ptr<Desc>> descs;  // alive as long as the plan
  std::string error;

  bool ok() const { return error.empty(); }
  void fail(const std::string& what, cudnnStatus_t st) {
    if (error.empty()) error = what + ": " + cudnnGetErrorString(st);
  }
  cudnnBackendDescriptor_t make(cudnnBackendDescriptorType_t type, const char* what) {
    auto p = std::make_unique<Desc>();
    if (ok()) {
      const cudnnStatus_t st = cudnnBackendCreateDescriptor(type, &p->d);
      if (st != CUDNN_STATUS_SUCCESS) fail(std::string("creating ") + what, st);
    }
    descs.push_back(std::move(p));
    return descs.back()->d;
  }
  void set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
           cudnnBackendAttributeType_t type, int64_t n, const void* v, const char* what) {
    if (!ok()) return;
    const cudnnStatus_t st = cudnnBackendSetAttribute(d, name, type, n, v);
    if (st != CUDNN_STATUS_SUCCESS) fail(std::string("setting ") + what, st);
  }
  void desc(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
            cudnnBackendDescriptor_t v, const char* what) {
    set(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v, what);
  }
  void finalize(cudnnBackendDescriptor_t d, const char* what) {
    if (!ok()) return;
    const cudnnStatus_t st = cudnnBackendFinalize(d);
    if (st != CUDNN_STATUS_SUCCESS) fail(std::string("finalizing ") + what, st);
  }
  // A [b, 1, s, d] tensor, dense (BHSD with one head per batch entry: the op's batch dims merged).
  cudnnBackendDescriptor_t tensor(int64_t uid, std::array<int64_t, 4> dims, cudnnDataType_t dt,
                                  bool by_value = false) {
    const std::array<int64_t, 4> strides{dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3],
                                         1};
    cudnnBackendDescriptor_t t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR, "a tensor descriptor");
    const int64_t align = 16;
    set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt, "a tensor's dtype");
    set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data(), "a tensor's dims");
    set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data(), "a tensor's strides");
    set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "a tensor's id");
    set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "a tensor's alignment");
    if (by_value) {
      const bool yes = true;
      set(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &yes, "a scalar's by-value");
    }
    finalize(t, "a tensor descriptor");
    return t;
  }
};

}  // namespace

// The case a plan serves.
struct SdpaKey {
  bool backward;
  int dtype;
  int64_t b, sq, skv, d, dv;
  auto tie() const { return std::tie(backward, dtype, b, sq, skv, d, dv); }
  bool operator<(const SdpaKey& o) const { return tie() < o.tie(); }
};
struct SdpaPlan {
  Graph g;
  cudnnBackendDescriptor_t plan = nullptr;
  int64_t workspace = 0;
  std::string refused;  // non-empty: cuDNN does not serve the case, and why
};
struct SdpaPlans {
  std::map<SdpaKey, std::unique_ptr<SdpaPlan>> plans;
};

namespace {

// The forward (O and the statistics) or the backward (dq, dk, dv) of key k on handle h: the first
// engine of cuDNN's heuristic (mode A) that is deterministic and finalizes.
std::unique_ptr<SdpaPlan> build_plan(cudnnHandle_t h, const SdpaKey& k) {
  auto p = std::make_unique<SdpaPlan>();
  Graph& g = p->g;
  const auto dt = static_cast<cudnnDataType_t>(k.dtype);
  cudnnBackendDescriptor_t q = g.tensor(kQ, {k.b, 1, k.sq, k.d}, dt);
  cudnnBackendDescriptor_t kk = g.tensor(kK, {k.b, 1, k.skv, k.d}, dt);
  cudnnBackendDescriptor_t v = g.tensor(kV, {k.b, 1, k.skv, k.dv}, dt);
  cudnnBackendDescriptor_t o = g.tensor(kO, {k.b, 1, k.sq, k.dv}, dt);
  cudnnBackendDescriptor_t stats = g.tensor(kStats, {k.b, 1, k.sq, 1}, CUDNN_DATA_FLOAT);
  cudnnBackendDescriptor_t scale = g.tensor(kScale, {1, 1, 1, 1}, CUDNN_DATA_FLOAT, true);
  cudnnBackendDescriptor_t op;
  if (!k.backward) {
    op = g.make(CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR, "the SDPA forward operation");
    g.desc(op, CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, q, "q");
    g.desc(op, CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, kk, "k");
    g.desc(op, CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, v, "v");
    g.desc(op, CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, o, "o");
    g.desc(op, CUDNN_ATTR_OPERATION_SDPA_FWD_STATSDESC, stats, "the statistics");
    g.desc(op, CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC, scale, "the scale");
  } else {
    cudnnBackendDescriptor_t d_o = g.tensor(kDO, {k.b, 1, k.sq, k.dv}, dt);
    cudnnBackendDescriptor_t dq = g.tensor(kDQ, {k.b, 1, k.sq, k.d}, dt);
    cudnnBackendDescriptor_t dk = g.tensor(kDK, {k.b, 1, k.skv, k.d}, dt);
    cudnnBackendDescriptor_t dv = g.tensor(kDV, {k.b, 1, k.skv, k.dv}, dt);
    op = g.make(CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR, "the SDPA backward operation");
    g.desc(op, CUDNN_ATTR_OPERATION_SDPA_BWD_QDESC, q, "q");
    g.desc(op, CUDNN_ATTR_OPERATION_SDPA_BWD_KDESC, kk, "k");
    g.desc(op, CUDNN_ATTR_OPERATION_SDPA_BWD_VDESC, v, "v");
    g.desc(op, CUDNN_ATTR_OPERATION_SDPA_BWD_ODESC, o, "o");
    g.desc(op, CUDNN_ATTR_OPERATION_SDPA_BWD_DODDESC, d_o, "do");
    g.desc(op, CUDNN_ATTR_OPERATION_SDPA_BWD_STATSDESC, stats, "the statistics");
    g.desc(op, CUDNN_ATTR_OPERATION_SDPA_BWD_SCALEDESC, scale, "the scale");
    g.desc(op, CUDNN_ATTR_OPERATION_SDPA_BWD_DQDESC, dq, "dq");
    g.desc(op, CUDNN_ATTR_OPERATION_SDPA_BWD_DKDESC, dk, "dk");
    g.desc(op, CUDNN_ATTR_OPERATION_SDPA_BWD_DVDESC, dv, "dv");
  }
  g.finalize(op, "the SDPA operation");
  cudnnBackendDescriptor_t graph = g.make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "a graph");
  g.set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, "the graph's handle");
  g.desc(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, op, "the graph's operation");
  g.finalize(graph, "the operation graph");
  cudnnBackendDescriptor_t heur = g.make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "a heuristic");
  g.desc(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph, "the heuristic's graph");
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  g.set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "the heuristic's mode");
  g.finalize(heur, "the engine heuristic");
  int64_t count = 0;
  if (g.ok()) {
    const cudnnStatus_t st = cudnnBackendGetAttribute(
        heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr);
    if (st != CUDNN_STATUS_SUCCESS) g.fail("counting the heuristic's engines", st);
  }
  if (!g.ok()) {
    p->refused = g.error;
    return p;
  }
  std::vector<cudnnBackendDescriptor_t> cfgs;
  for (int64_t i = 0; i < count; ++i) {
    cfgs.push_back(g.make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "an engine configuration"));
  }
  int64_t got = 0;
  if (g.ok() && count > 0) {
    const cudnnStatus_t st =
        cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                 count, &got, cfgs.data());
    if (st != CUDNN_STATUS_SUCCESS) g.fail("reading the heuristic's engines", st);
  }
  std::string skipped;
  for (int64_t i = 0; g.ok() && i < got; ++i) {
    // Deterministic engines only: an engine that notes nondeterminism (atomics) is skipped.
    Desc engine;
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine.d) !=
        CUDNN_STATUS_SUCCESS) {
      continue;
    }
    int64_t n = 0;
    if (cudnnBackendGetAttribute(cfgs[i], CUDNN_ATTR_ENGINECFG_ENGINE,
                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                                 &engine.d) != CUDNN_STATUS_SUCCESS) {
      continue;
    }
    std::array<cudnnBackendNumericalNote_t, CUDNN_NUMERICAL_NOTE_TYPE_COUNT> notes{};
    int64_t nn = 0;
    bool deterministic = true;
    if (cudnnBackendGetAttribute(engine.d, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                                 CUDNN_TYPE_NUMERICAL_NOTE, static_cast<int64_t>(notes.size()), &nn,
                                 notes.data()) == CUDNN_STATUS_SUCCESS) {
      for (int64_t j = 0; j < nn; ++j) {
        if (notes[static_cast<size_t>(j)] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) {
          deterministic = false;
        }
      }
    }
    if (!deterministic) {
      skipped = "; its nondeterministic engines are left out";
      continue;
    }
    Desc plan;
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan.d) !=
        CUDNN_STATUS_SUCCESS) {
      continue;
    }
    if (cudnnBackendSetAttribute(plan.d, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1,
                                 &h) != CUDNN_STATUS_SUCCESS ||
        cudnnBackendSetAttribute(plan.d, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                 &cfgs[i]) != CUDNN_STATUS_SUCCESS ||
        cudnnBackendFinalize(plan.d) != CUDNN_STATUS_SUCCESS) {
      continue;
    }
    int64_t ws = 0, wn = 0;
    if (cudnnBackendGetAttribute(plan.d, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
                                 1, &wn, &ws) != CUDNN_STATUS_SUCCESS) {
      continue;
    }
    p->plan = plan.d;
    g.descs.push_back(std::make_unique<Desc>());
    g.descs.back()->d = std::exchange(plan.d, nullptr);
    p->workspace = ws;
    return p;
  }
  p->refused = !g.ok() ? g.error
                       : "cuDNN " + std::to_string(cudnnGetVersion()) + " has no engine for it (" +
                             std::to_string(got) + " proposed" + skipped + ")";
  return p;
}

// Runs plan p with `ptrs` (uid -> device address; the scale by value) and a workspace.
Status execute(cudnnHandle_t h, const SdpaPlan& p, std::vector<int64_t> uids,
               std::vector<void*> ptrs, void* workspace, const std::string& op) {
  Graph g;
  cudnnBackendDescriptor_t pack = g.make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, "a variant pack");
  g.set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
        static_cast<int64_t>(uids.size()), uids.data(), "the pack's ids");
  g.set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
        static_cast<int64_t>(ptrs.size()), ptrs.data(), "the pack's pointers");
  g.set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace,
        "the pack's workspace");
  g.finalize(pack, "the variant pack");
  if (g.ok()) {
    const cudnnStatus_t st = cudnnBackendExecute(h, p.plan, pack);
    if (st != CUDNN_STATUS_SUCCESS) g.fail("cudnnBackendExecute", st);
  }
  if (!g.ok()) return internal_error(op + ": cuDNN's fused attention failed: " + g.error);
  return Status::OK();
}

}  // namespace

Result<std::optional<std::vector<CuTensor>>> Kernels::cudnn_attention(
    const CuTensor& q0, const CuTensor& k0, const CuTensor& v0, const CuTensor* g0, double scale,
    std::string* why) {
  const bool backward = g0 != nullptr;
  const std::string op =
      backward ? "scaled_dot_product_attention_backward" : "scaled_dot_product_attention";
  const size_t r = q0.shape.size();
  SdpaKey key{backward,
              q0.dtype == kBF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF,
              1,
              q0.shape[r - 2],
              k0.shape[r - 2],
              q0.shape[r - 1],
              v0.shape[r - 1]};
  for (size_t i = 0; i + 2 < r; ++i) key.b *= q0.shape[i];
  if (key.d % 8 != 0 || key.dv % 8 != 0 || key.d > 256 || key.dv > 256) {
    *why = "head dims " + std::to_string(key.d) + " and " + std::to_string(key.dv) +
           " (cuDNN's fused attention takes multiples of 8 up to 256)";
    return std::optional<std::vector<CuTensor>>();
  }
  if (!ex_->sdpa) ex_->sdpa = std::make_shared<SdpaPlans>();
  auto plan_of = [&](bool bwd) -> const SdpaPlan& {
    SdpaKey k = key;
    k.backward = bwd;
    std::unique_ptr<SdpaPlan>& p = ex_->sdpa->plans[k];
    if (!p) p = build_plan(ex_->dnn, k);
    return *p;
  };
  const SdpaPlan& fwd = plan_of(false);
  const SdpaPlan* bwd = backward ? &plan_of(true) : nullptr;
  if (!fwd.refused.empty() || (bwd && !bwd->refused.empty())) {
    *why = "cuDNN refused the " + std::string(fwd.refused.empty() ? "backward" : "forward") + ": " +
           (fwd.refused.empty() ? bwd->refused : fwd.refused);
    return std::optional<std::vector<CuTensor>>();
  }
  CuTensor keep[4];
  TW_ASSIGN_OR_RETURN(const CuTensor* q, dense(q0, keep[0]));
  TW_ASSIGN_OR_RETURN(const CuTensor* k, dense(k0, keep[1]));
  TW_ASSIGN_OR_RETURN(const CuTensor* v, dense(v0, keep[2]));
  Shape o_shape = q0.shape;
  o_shape[r - 1] = key.dv;
  TW_ASSIGN_OR_RETURN(CuTensor o, fresh(TensorMeta{o_shape, q0.dtype}));
  TW_ASSIGN_OR_RETURN(CuTensor stats, fresh(TensorMeta{Shape{key.b * key.sq}, kF32}));
  const int64_t ws_bytes = std::max(fwd.workspace, bwd ? bwd->workspace : 0);
  CuTensor ws;
  if (ws_bytes > 0) {
    TW_ASSIGN_OR_RETURN(ws, fresh(TensorMeta{Shape{ws_bytes}, kU8}));
  }
  void* wsp = ws.storage ? ws.storage->ptr : nullptr;
  float s = static_cast<float>(scale);
  auto ptr = [](const CuTensor* t) { return const_cast<void*>(t->data()); };
  TW_RETURN_NOT_OK(execute(ex_->dnn, fwd, {kQ, kK, kV, kO, kStats, kScale},
                           {ptr(q), ptr(k), ptr(v), o.storage->ptr, stats.storage->ptr, &s}, wsp,
                           op));
  ex_->count_dispatch();
  ex_->last_op = op;
  if (!backward) return std::optional<std::vector<CuTensor>>(std::vector<CuTensor>{std::move(o)});
  TW_ASSIGN_OR_RETURN(const CuTensor* g, dense(*g0, keep[3]));
  std::vector<CuTensor> grads;
  for (const CuTensor* t : {q, k, v}) {
    TW_ASSIGN_OR_RETURN(CuTensor d, fresh(t->meta()));
    grads.push_back(std::move(d));
  }
  TW_RETURN_NOT_OK(execute(ex_->dnn, *bwd, {kQ, kK, kV, kO, kDO, kStats, kScale, kDQ, kDK, kDV},
                           {ptr(q), ptr(k), ptr(v), o.storage->ptr, ptr(g), stats.storage->ptr, &s,
                            grads[0].storage->ptr, grads[1].storage->ptr, grads[2].storage->ptr},
                           wsp, op));
  ex_->count_dispatch();
  return std::optional<std::vector<CuTensor>>(std::move(grads));
}

}  // namespace tw::cuda
#endif
