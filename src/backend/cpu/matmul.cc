// MatMul: [..., n, k] x [..., k, m] -> [..., n, m] with broadcast batch dims.
//
// f32 runs on oneDNN's matmul primitive, which reads strided operands directly: transposed
// matrices, sliced batches and broadcast batch dims (given to oneDNN as size 1) need no copy.
// Operands whose layout oneDNN's fast kernels do not take are copied to contiguous first.
// bf16 x bf16 (an f32 result) runs on oneDNN's bf16 kernels where the CPU has AVX512_BF16, and
// on the f32 path with both operands widened elsewhere (matmul_bf16).
// f64, i32 and i64 run on the register-tiled loops below; each output element sums over k in
// order within one task, so results do not depend on the thread count. Integer products and
// sums wrap (computed on the unsigned type of the same width).
#include <algorithm>
#include <optional>

#include "backend/cpu/dnnl_util.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/strided.h"
#include "backend/cpu/structured_util.h"
#include "core/buffer.h"
#include "core/thread_pool.h"

namespace tw::cpu {
namespace {

// oneDNN memory descriptors hold at most 12 dims; two are the matrix.
constexpr size_t kDnnlMaxBatchDims = 10;

// The matrix dims and batch strides of one operand broadcast to the output's batch shape.
struct Operand {
  CpuTensor t;
  int64_t rows = 0, cols = 0, rs = 0, cs = 0;
  Strides batch;  // one per output batch dim; 0 where broadcast
};

Operand make_operand(CpuTensor t, const Shape& out_batch) {
  Operand o;
  const int64_t r = t.rank();
  o.rows = t.shape[r - 2];
  o.cols = t.shape[r - 1];
  o.rs = t.strides[r - 2];
  o.cs = t.strides[r - 1];
  o.batch.assign(out_batch.size(), 0);
  const size_t lead = out_batch.size() - static_cast<size_t>(r - 2);
  for (int64_t i = 0; i < r - 2; ++i) {
    o.batch[lead + i] = t.shape[i] == 1 ? 0 : t.strides[i];
  }
  o.t = std::move(t);
  return o;
}

bool gemm_layout(Operand& o) { return cpu::gemm_layout(o.rows, o.cols, o.rs, o.cs); }

Operand contiguous_operand(const Operand& o, const Shape& out_batch) {
  return make_operand(contiguous(o.t), out_batch);
}

// ---------------------------------------------------------------------------------------------
// oneDNN (f32)

struct MatMulPrimitive {
  dnnl::primitive prim;
  dnnl::memory::desc a_md, b_md, c_md, scratchpad;
  bool reference = false;  // oneDNN fell back to its slow reference kernel
  bool brgemm = false;     // the kernel is brgemm (AVX-512 and up), whose k order is fixed
  // With b_blocked: b is first reordered to the blocked layout the kernel chose (b_blocked's
  // desc), then the primitive reads that.
  std::optional<DnnlReorder> b_reorder;
  dnnl::memory::desc b_blocked;
};

// Whether a product [rows, k] x [k, cols] (per batch) with b row-major first reorders b
// to the kernel's blocked layout. oneDNN's brgemm kernel reading a row-major b in place slows to
// 85-200 GFLOP/s on 2 threads when cols is 1536, 2560, 3072 or 3584 (about 370 elsewhere; the
// 2048^3 case 330); on a blocked b it runs 360-400 for every shape measured, and the reorder
// (one pass over b) costs under 16% of the product once rows >= 256. Smaller products keep
// reading b in place, where the two are even. The same kernel sums over k in the same order
// at any thread count either way.
bool reorders_b(int64_t rows, int64_t k, int64_t cols, const Operand& b) {
  constexpr int64_t kMinRows = 256, kMinMacs = int64_t{1} << 27;
  return b.cs == 1 && b.rs != 1 && rows >= kMinRows && rows * k * cols >= kMinMacs;
}

DnnlCache<MatMulPrimitive>& matmul_cache() {
  static DnnlCache<MatMulPrimitive> cache;
  return cache;
}

// Merges adjacent batch dims that every operand walks with one stride, and drops size-1 dims,
// so that batched problems fit oneDNN's dim limit and its kernels see simple batches.
void coalesce_batch(Shape& shape, std::vector<Strides*> strides) {
  Shape s;
  std::vector<Strides> st(strides.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !s.empty();
    for (size_t k = 0; merge && k < strides.size(); ++k) {
      merge = st[k].back() == (*strides[k])[d] * shape[d];
    }
    if (merge) {
      s.back() *= shape[d];
      for (size_t k = 0; k < strides.size(); ++k) st[k].back() = (*strides[k])[d];
    } else {
      s.push_back(shape[d]);
      for (size_t k = 0; k < strides.size(); ++k) st[k].push_back((*strides[k])[d]);
    }
  }
  shape = std::move(s);
  for (size_t k = 0; k < strides.size(); ++k) *strides[k] = std::move(st[k]);
}

// Dims and strides of one operand for oneDNN: broadcast batch dims become size 1 with a stride
// spanning the rest (oneDNN rejects stride 0).
dnnl::memory::desc operand_md(const Shape& batch, const Strides& bs, int64_t rows, int64_t cols,
                              int64_t rs, int64_t cs,
                              dnnl::memory::data_type type = dnnl::memory::data_type::f32) {
  const size_t nb = batch.size();
  dnnl::memory::dims dims(nb + 2), strides(nb + 2);
  dims[nb] = rows;
  dims[nb + 1] = cols;
  strides[nb] = rs;
  strides[nb + 1] = cs;
  int64_t span = (rows - 1) * rs + (cols - 1) * cs + 1;
  for (size_t i = nb; i-- > 0;) {
    if (bs[i] == 0) {
      dims[i] = 1;
      strides[i] = span;
    } else {
      dims[i] = batch[i];
      strides[i] = bs[i];
      span = std::max(span, (batch[i] - 1) * bs[i] + span);
    }
  }
  return dnnl::memory::desc(dims, type, strides);
}

// oneDNN's brgemm kernel sums over k in one order whatever its thread count; the gemm:jit kernel
// it takes on a CPU without AVX-512 splits k across threads when it has several, so its sums
// would depend on the thread count (1 vs 2 threads differed in the last bits of 59 of 64
// elements of a [8, 65536] x [65536, 8] product). There the product runs as a grid of tiles fixed
// by the shape alone, each a single-threaded primitive over the whole k, the tiles spread over
// the threads: the same bytes at any thread count.
constexpr int64_t kTileTasks = 16;  // tasks a product is cut into: enough for 16 threads
constexpr int64_t kMinTileRows = 32, kMinTileCols = 64;

int64_t round_up(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

Status matmul_tiles(const Operand& a, const Operand& b, CpuTensor& out, const Shape& batch,
                    const Strides& as, const Strides& bs, const Strides& cs, int64_t rows,
                    int64_t k, int64_t m) {
  const int64_t batches = numel(batch);
  const int64_t per_batch = std::max<int64_t>(1, (kTileTasks + batches - 1) / batches);
  const int64_t row_tiles =
      std::clamp<int64_t>(per_batch, 1, (rows + kMinTileRows - 1) / kMinTileRows);
  const int64_t col_tiles = std::clamp<int64_t>((per_batch + row_tiles - 1) / row_tiles, 1,
                                                (m + kMinTileCols - 1) / kMinTileCols);
  const int64_t tr = std::min(rows, round_up((rows + row_tiles - 1) / row_tiles, 8));
  const int64_t tc = std::min(m, round_up((m + col_tiles - 1) / col_tiles, 16));
  const int64_t nr = (rows + tr - 1) / tr, nc = (m + tc - 1) / tc;
  // The (at most four) tile shapes' primitives, made for one thread.
  auto tile = [&](int64_t h, int64_t w) {
    const std::vector<int64_t> key = {-1, h, k, w, a.rs, a.cs, b.rs, b.cs, m};
    return matmul_cache().get(key, "matmul", [&] {
      const DnnlThreadsFor one_thread(0);
      MatMulPrimitive p;
      p.a_md = operand_md({}, {}, h, k, a.rs, a.cs);
      p.b_md = operand_md({}, {}, k, w, b.rs, b.cs);
      p.c_md = operand_md({}, {}, h, w, m, 1);
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(p.a_md, p.b_md, p.c_md), dnnl_attr(),
                                      dnnl_engine());
      p.scratchpad = pd.scratchpad_desc();
      p.prim = dnnl::matmul(pd);
      return p;
    });
  };
  const int64_t last_r = rows - (nr - 1) * tr, last_c = m - (nc - 1) * tc;
  std::shared_ptr<const MatMulPrimitive> prims[2][2];
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 2; ++j) {
      TW_ASSIGN_OR_RETURN(prims[i][j], tile(i ? last_r : tr, j ? last_c : tc));
    }
  }
  std::vector<int64_t> aoff(batches), boff(batches), coff(batches);
  StridedIter<3> it(batch, {as, bs, cs});
  for (int64_t i = 0; i < batches; ++i, it.next()) {
    aoff[i] = it.off[0];
    boff[i] = it.off[1];
    coff[i] = it.off[2];
  }
  return dnnl_parallel_chunks("matmul", batches * nr * nc, [&](int64_t task) -> Status {
    const int64_t bi = task / (nr * nc), ri = task / nc % nr, ci = task % nc;
    const MatMulPrimitive& p = *prims[ri + 1 == nr][ci + 1 == nc];
    const DnnlThreadsFor one_thread(0);  // the tile's kernel runs on this thread alone
    dnnl::memory am(p.a_md, dnnl_engine(), a.t.data<float>() + aoff[bi] + ri * tr * a.rs);
    dnnl::memory bm(p.b_md, dnnl_engine(), b.t.data<float>() + boff[bi] + ci * tc * b.cs);
    dnnl::memory cm(p.c_md, dnnl_engine(), out.data<float>() + coff[bi] + ri * tr * m + ci * tc);
    return dnnl_run("matmul", p.prim, p.scratchpad,
                    {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
  });
}

// c (f32) = a x b, with a and b f32, or both bf16 (`type`; products of bf16 values summed in f32
// by oneDNN's bf16 kernels, only where the CPU has them: bf16_native()).
Status matmul_dnnl(Operand a, Operand b, CpuTensor& out, int64_t n, int64_t k, int64_t m,
                   dnnl::memory::data_type type = dnnl::memory::data_type::f32) {
  const int64_t esize = type == dnnl::memory::data_type::f32 ? 4 : 2;
  const Shape out_batch(out.shape.begin(), out.shape.end() - 2);
  for (int attempt = 0;; ++attempt) {
    if (attempt == 1) {  // the strided operands were refused or would run slowly: copy them
      a = contiguous_operand(a, out_batch);
      b = contiguous_operand(b, out_batch);
    }
    for (Operand* o : {&a, &b}) {
      if (!gemm_layout(*o)) {
        *o = contiguous_operand(*o, out_batch);
        gemm_layout(*o);
      }
    }
    Shape batch = out_batch;
    Strides as = a.batch, bs = b.batch;
    Strides cs(out.strides.begin(), out.strides.end() - 2);
    coalesce_batch(batch, {&as, &bs, &cs});
    // One b for every batch of a row-major a whose batches follow one another ([..., n, k] x
    // [k, m], a layer's input times its weights): one product of batch * n rows. Batched, the
    // kernel ran [8, 256, 768] x [768, 3072] at 176 GFLOP/s, against 400 as one product.
    int64_t rows = n;
    if (batch.size() == 1 && bs[0] == 0 && a.cs == 1 && as[0] == n * a.rs && cs[0] == n * m) {
      rows *= batch[0];
      batch.clear();
      as.clear();
      bs.clear();
      cs.clear();
    }
    // Batch dims beyond oneDNN's limit are looped over here, the rest go to one primitive. A b
    // reordered to the blocked layout is reordered and multiplied batch by batch: oneDNN's
    // batched kernel on a blocked b ran [8, 256, 768] x [8, 768, 3072] at 148 GFLOP/s (115 on
    // the row-major b), where each batch alone runs at about 320.
    const bool block_b = reorders_b(rows, k, m, b);
    const size_t outer = block_b                            ? batch.size()
                         : batch.size() > kDnnlMaxBatchDims ? batch.size() - kDnnlMaxBatchDims
                                                            : 0;
    const Shape inner_batch(batch.begin() + outer, batch.end());
    const Strides ias(as.begin() + outer, as.end()), ibs(bs.begin() + outer, bs.end());
    const Strides ics(cs.begin() + outer, cs.end());
    const DnnlThreadsFor dnnl_threads(numel(batch) * rows * k * m);
    const int threads = dnnl_threads.threads();
    std::vector<int64_t> key = {threads,
                                static_cast<int64_t>(inner_batch.size()),
                                rows,
                                k,
                                m,
                                a.rs,
                                a.cs,
                                b.rs,
                                b.cs,
                                block_b,
                                static_cast<int64_t>(type)};
    for (size_t i = 0; i < inner_batch.size(); ++i) {
      key.insert(key.end(), {inner_batch[i], ias[i], ibs[i], ics[i]});
    }
    auto made = matmul_cache().get(key, "matmul", [&] {
      MatMulPrimitive p;
      p.a_md = operand_md(inner_batch, ias, rows, k, a.rs, a.cs, type);
      p.b_md = operand_md(inner_batch, ibs, k, m, b.rs, b.cs, type);
      p.c_md = operand_md(inner_batch, ics, rows, m, m, 1);
      const dnnl::memory::desc any_b({k, m}, type, dnnl::memory::format_tag::any);
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(p.a_md, block_b ? any_b : p.b_md, p.c_md),
                                      dnnl_attr(), dnnl_engine());
      p.reference = std::string(pd.impl_info_str()).rfind("ref", 0) == 0;
      p.brgemm = std::string(pd.impl_info_str()).rfind("brg", 0) == 0;
      p.scratchpad = pd.scratchpad_desc();
      p.prim = dnnl::matmul(pd);
      if (block_b) {
        p.b_blocked = pd.weights_desc();
        p.b_reorder = dnnl_reorder(p.b_md, p.b_blocked);
      }
      return p;
    });
    if (!made.ok() && attempt == 0) continue;
    TW_RETURN_NOT_OK(made.status());
    const MatMulPrimitive& p = **made;
    if (p.reference && attempt == 0) continue;
    if (type == dnnl::memory::data_type::f32 && !p.brgemm &&
        numel(batch) * rows * k * m >= kDnnlSerialMacs) {
      return matmul_tiles(a, b, out, batch, as, bs, cs, rows, k, m);
    }
    const Shape outer_shape(batch.begin(), batch.begin() + outer);
    const Strides oas(as.begin(), as.begin() + outer), obs(bs.begin(), bs.begin() + outer);
    const Strides ocs(cs.begin(), cs.begin() + outer);
    StridedIter<3> it(outer_shape, {oas, obs, ocs});
    const int64_t outer_count = numel(outer_shape);
    Buffer blocked;
    int64_t blocked_from = -1;  // the offset in b of the matrix `blocked` holds
    for (int64_t i = 0; i < outer_count; ++i, it.next()) {
      try {
        dnnl::memory am(p.a_md, dnnl_engine(), a.t.bytes() + it.off[0] * esize);
        dnnl::memory bm(p.b_md, dnnl_engine(), b.t.bytes() + it.off[1] * esize);
        dnnl::memory cm(p.c_md, dnnl_engine(), out.data<float>() + it.off[2]);
        if (p.b_reorder) {
          if (!blocked.data()) blocked = Buffer::allocate(p.b_blocked.get_size());
          dnnl::memory to(p.b_blocked, dnnl_engine(), blocked.data());
          if (it.off[1] != blocked_from) {  // a b broadcast over batches is reordered once
            TW_RETURN_NOT_OK(dnnl_run_reorder("matmul", *p.b_reorder, bm, to));
            blocked_from = it.off[1];
          }
          bm = to;
        }
        TW_RETURN_NOT_OK(
            dnnl_run("matmul", p.prim, p.scratchpad,
                     {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}}));
      } catch (const std::exception& e) {
        return dnnl_status("matmul", e);
      }
    }
    return Status::OK();
  }
}

// ---------------------------------------------------------------------------------------------
// bf16 x bf16 -> f32

// An operand's values as f32 (exact: a bf16 is the top half of an f32), contiguous.
Operand widened(const Operand& o, const Shape& out_batch) {
  const CpuTensor src = contiguous(o.t);
  CpuTensor f = alloc_tensor({src.shape, kF32});
  const uint16_t* from = reinterpret_cast<const uint16_t*>(src.bytes());
  uint32_t* to = reinterpret_cast<uint32_t*>(f.bytes());
  parallel_chunks(src.numel(), int64_t{1} << 16, [&](int64_t, int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) to[i] = uint32_t{from[i]} << 16;
  });
  return make_operand(std::move(f), out_batch);
}

// On a CPU with AVX512_BF16, oneDNN's bf16 kernels; elsewhere both operands widened to f32 and
// multiplied by the f32 kernel: the same products (a product of two bf16 values is exact in f32)
// summed in f32, in another order. The path depends on the CPU only, so a local and a remote
// device on one machine give the same bytes.
Status matmul_bf16(Operand a, Operand b, CpuTensor& out, int64_t n, int64_t k, int64_t m) {
  const Shape out_batch(out.shape.begin(), out.shape.end() - 2);
  if (bf16_native()) {
    return matmul_dnnl(std::move(a), std::move(b), out, n, k, m, dnnl::memory::data_type::bf16);
  }
  return matmul_dnnl(widened(a, out_batch), widened(b, out_batch), out, n, k, m);
}

// ---------------------------------------------------------------------------------------------
// Own loops (f64, i32, i64)

// Output tile of kTileR rows by kTileW columns kept in registers while k runs; kTileW spans two
// AVX2 vectors of T.
template <class T>
constexpr int kTileW = 64 / static_cast<int>(sizeof(T));
constexpr int kTileR = 4;
// Rows of the output one task computes: the column panel of b it walks stays in L2 across them.
constexpr int64_t kTaskRows = 32;

// GCC/Clang vector of 32 bytes (one AVX2 register) of T.
template <class T>
using Vec [[gnu::vector_size(32)]] = T;

// A kTileR x kTileW tile: eight vector accumulators held in named variables (arrays of them
// invite GCC to vectorise the k loop instead and keep the sums on the stack).
template <class T>
inline void gemm_tile(const T* a, int64_t ars, int64_t acs, const T* b, T* c, int64_t ldc,
                      int64_t k) {
  static_assert(kTileR == 4 && kTileW<T> * sizeof(T) == 2 * sizeof(Vec<T>));
  constexpr int64_t kLanes = sizeof(Vec<T>) / sizeof(T);
  Vec<T> c00{}, c01{}, c10{}, c11{}, c20{}, c21{}, c30{}, c31{};
  const T *a0 = a, *a1 = a + ars, *a2 = a + 2 * ars, *a3 = a + 3 * ars;
  for (int64_t p = 0; p < k; ++p) {
    Vec<T> b0, b1;
    std::memcpy(&b0, b + p * 2 * kLanes, sizeof b0);
    std::memcpy(&b1, b + p * 2 * kLanes + kLanes, sizeof b1);
    const T x0 = a0[p * acs], x1 = a1[p * acs], x2 = a2[p * acs], x3 = a3[p * acs];
    c00 += x0 * b0;
    c01 += x0 * b1;
    c10 += x1 * b0;
    c11 += x1 * b1;
    c20 += x2 * b0;
    c21 += x2 * b1;
    c30 += x3 * b0;
    c31 += x3 * b1;
  }
  const Vec<T> rows[4][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}};
  for (int r = 0; r < 4; ++r) std::memcpy(c + r * ldc, rows[r], sizeof rows[r]);
}

// Edge tiles: the same sums (k in order) with runtime sizes.
template <class T>
void gemm_edge(const T* a, int64_t ars, int64_t acs, const T* b, int64_t ldb, T* c, int64_t ldc,
               int64_t k, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols; ++j) {
      T acc = 0;
      for (int64_t p = 0; p < k; ++p) acc += a[r * ars + p * acs] * b[p * ldb + j];
      c[r * ldc + j] = acc;
    }
  }
}

// c[rows, m] = a[rows, k] x b[k, m]; b has unit column stride, c is contiguous. Each kW-wide
// column panel of b is first copied to `panel` ([k][kW], contiguous): read in place, its rows sit
// ldb apart and, for the power-of-two widths common in practice, all land in a few L1 sets.
template <class T>
void gemm_rows(const T* a, int64_t ars, int64_t acs, const T* b, int64_t ldb, T* c, int64_t rows,
               int64_t k, int64_t m, std::vector<T>& panel) {
  constexpr int W = kTileW<T>;
  panel.resize(static_cast<size_t>(k * W));
  for (int64_t j = 0; j < m; j += W) {
    const int64_t cols = std::min<int64_t>(W, m - j);
    for (int64_t p = 0; p < k; ++p) {
      std::memcpy(panel.data() + p * W, b + p * ldb + j, static_cast<size_t>(cols) * sizeof(T));
    }
    for (int64_t r = 0; r < rows; r += kTileR) {
      const int64_t nr = std::min<int64_t>(kTileR, rows - r);
      const T* ap = a + r * ars;
      T* cp = c + r * m + j;
      if (nr == kTileR && cols == W) {
        gemm_tile<T>(ap, ars, acs, panel.data(), cp, m, k);
      } else {
        gemm_edge<T>(ap, ars, acs, panel.data(), W, cp, m, k, nr, cols);
      }
    }
  }
}

template <class T>
void matmul_loops(const Operand& a, Operand b, CpuTensor& out, int64_t n, int64_t k, int64_t m) {
  const Shape out_batch(out.shape.begin(), out.shape.end() - 2);
  if (b.cs != 1 && b.cols > 1) b = contiguous_operand(b, out_batch);
  const int64_t ldb = b.rs;
  const int64_t batches = numel(out_batch);
  const int64_t tasks_per_batch = (n + kTaskRows - 1) / kTaskRows;
  const T* ad = reinterpret_cast<const T*>(a.t.bytes());
  const T* bd = reinterpret_cast<const T*>(b.t.bytes());
  T* cd = reinterpret_cast<T*>(out.bytes());
  const Strides cs = contiguous_strides(out_batch);
  parallel_chunks(batches * tasks_per_batch, 1, [&](int64_t, int64_t begin, int64_t end) {
    std::vector<T> panel;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t batch = task / tasks_per_batch;
      const int64_t row0 = (task % tasks_per_batch) * kTaskRows;
      StridedIter<2> it(out_batch, {a.batch, b.batch});
      it.seek(batch);
      gemm_rows<T>(ad + it.off[0] + row0 * a.rs, a.rs, a.cs, bd + it.off[1], ldb,
                   cd + batch * n * m + row0 * m, std::min(kTaskRows, n - row0), k, m, panel);
    }
  });
}

}  // namespace

Status run(const ir::MatMul& op, KernelContext& ctx) {
  CpuTensor& out = ctx.alloc(op.out);
  const CpuTensor& a = ctx.in(op.a);
  const int64_t r = out.rank();
  const int64_t n = out.shape[r - 2], m = out.shape[r - 1], k = a.shape.back();
  if (out.numel() == 0) return Status::OK();
  if (k == 0) {
    std::memset(out.bytes(), 0, static_cast<size_t>(out.numel()) * dtype_size(out.dtype));
    return Status::OK();
  }
  const Shape out_batch(out.shape.begin(), out.shape.end() - 2);
  Operand oa = make_operand(a, out_batch);
  Operand ob = make_operand(ctx.in(op.b), out_batch);
  if (a.dtype == kBF16) return matmul_bf16(std::move(oa), std::move(ob), out, n, k, m);
  switch (out.dtype) {
    case kF32: return matmul_dnnl(std::move(oa), std::move(ob), out, n, k, m);
    case kF64: matmul_loops<double>(oa, std::move(ob), out, n, k, m); break;
    case kI32: matmul_loops<uint32_t>(oa, std::move(ob), out, n, k, m); break;
    case kI64: matmul_loops<uint64_t>(oa, std::move(ob), out, n, k, m); break;
    default:
      return invalid_argument("matmul: dtype " + std::string(dtype_name(out.dtype)) +
                              " is not supported (f32, f64, i32, i64)");
  }
  return Status::OK();
}

}  // namespace tw::cpu
