// Reduce (sum, mean, prod, max, min, argmax, argmin) and Cumsum.
//
// Determinism: every reduced value is a function of the data and the reduced extent only, never
// of the thread count or of which parallel path ran. A run of R elements is cut into leaves of
// kLeaf elements; a leaf is reduced with kLanes interleaved accumulators folded pairwise; the
// leaves are combined by a fixed binary tree (split at the largest power of two below the leaf
// count). Whether leaves are computed in one task or spread over the pool, the tree is the same.
// Column (outer-dim) reductions do the same with blocks of kRowBlock rows.
#include <bit>
#include <cstring>

#include "backend/cpu/elementwise.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/tile.h"

namespace tw::cpu {
namespace {

using ir::ReduceKind;

// Leaf of the pairwise tree. Each of the 32 f32 lanes sums at most 512 values in sequence, so
// rounding error grows with log2(R) rather than R; a leaf is long enough that folding its lanes
// costs little next to streaming it (64 KiB of f32).
constexpr int64_t kLeaf = 16384;
// Rows longer than this spread their leaves over the pool instead of taking one task per row.
constexpr int64_t kParallelRow = 4 * kLeaf;
// Rows summed in sequence per column before the pairwise tree takes over (outer reductions).
constexpr int64_t kRowBlock = 128;
// Columns a column-reduction task keeps in its accumulator array (2 KiB of f64 on the stack).
constexpr int64_t kColTile = 256;
// Elements of work per parallel task, at least (see chunk_grain).
constexpr int64_t kReduceGrain = int64_t{1} << 15;
// Cumsum lines at least twice this long are scanned in parallel blocks of this many elements.
constexpr int64_t kScanBlock = int64_t{1} << 15;

// Accumulator lanes per leaf: four AVX2 registers' worth.
template <class A>
constexpr int kLanes = sizeof(A) >= 8 ? 16 : 32;

// The split point of the fixed combine tree over n >= 2 parts.
inline int64_t tree_split(int64_t n) {
  return static_cast<int64_t>(std::bit_floor(static_cast<uint64_t>(n - 1)));
}

// ---- policies: Acc, init(), load(value, index), op(a, b), finish(acc, count) -> Out ----

template <class T, class A, class O>
struct SumP {
  using Acc = A;
  using Out = O;
  static A init() { return A(0); }
  static A load(T v, int64_t) { return static_cast<A>(v); }
  static A op(A a, A b) { return a + b; }  // A is unsigned for integers: wraps
  static O finish(A a, int64_t) { return static_cast<O>(a); }
};

template <class T, class A, class O>
struct ProdP {
  using Acc = A;
  using Out = O;
  static A init() { return A(1); }
  static A load(T v, int64_t) { return static_cast<A>(v); }
  static A op(A a, A b) { return a * b; }
  static O finish(A a, int64_t) { return static_cast<O>(a); }
};

template <class T, class A, class O>
struct MeanP : SumP<T, A, O> {
  static O finish(A a, int64_t n) {
    if constexpr (std::is_floating_point_v<A>) {
      return static_cast<O>(a / static_cast<A>(n));  // n = 0 gives NaN
    } else {  // integral sums: exact in 64 bits, divided in double
      return static_cast<O>(static_cast<double>(static_cast<int64_t>(a)) / static_cast<double>(n));
    }
  }
};

template <class T, bool kMax>
struct ExtremeP {
  using Acc = T;
  using Out = T;
  static T init() {
    if constexpr (std::is_floating_point_v<T>) {
      return kMax ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity();
    } else {
      return kMax ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
    }
  }
  static T load(T v, int64_t) { return v; }
  static T op(T a, T b) { return kMax ? max_nan(a, b) : min_nan(a, b); }
  static T finish(T a, int64_t) { return a; }
};

// (value, index); index -1 is the empty identity. A NaN beats everything; ties and NaN against
// NaN go to the lower index, so the combine is order-free and the first occurrence wins.
template <class T>
struct ArgAcc {
  T v;
  int64_t i;
};

template <class T, bool kMax>
struct ArgP {
  using Extreme = ExtremeP<T, kMax>;  // finds the value first (vectorised), then its index
  using Acc = ArgAcc<T>;
  using Out = int64_t;
  static Acc init() { return {T(0), -1}; }
  static Acc load(T v, int64_t i) { return {v, i}; }
  static bool nan(T v) {
    if constexpr (std::is_floating_point_v<T>) {
      return v != v;
    } else {
      return false;
    }
  }
  static Acc op(Acc a, Acc b) {
    if (a.i < 0) return b;
    if (b.i < 0) return a;
    const bool an = nan(a.v), bn = nan(b.v);
    if (an || bn) {
      if (an && bn) return a.i < b.i ? a : b;
      return an ? a : b;
    }
    if (a.v == b.v) return a.i < b.i ? a : b;
    return (kMax ? b.v > a.v : b.v < a.v) ? b : a;
  }
  static int64_t finish(Acc a, int64_t) { return a.i; }
};

// ---- inner reductions: each output reduces a contiguous run ----

template <class P>
concept ArgPolicy = requires {
  typename P::Extreme;
};

template <class P, class T>
typename P::Acc reduce_leaf(const T* p, int64_t n, int64_t index0) {
  using A = typename P::Acc;
  if constexpr (ArgPolicy<P>) {
    // The extreme value by the vectorised max/min, then the first element equal to it (or the
    // first NaN, when it is NaN): the first occurrence in two quick passes over a cached leaf.
    if (n == 0) return P::init();
    const T best = reduce_leaf<typename P::Extreme>(p, n, 0);
    const bool want_nan = P::nan(best);
    int64_t i = 0;
    while (i + 1 < n && !(want_nan ? P::nan(p[i]) : p[i] == best)) ++i;
    return P::load(p[i], index0 + i);
  } else {
    constexpr int L = kLanes<A>;
    A acc[L];
    for (int j = 0; j < L; ++j) acc[j] = P::init();
    int64_t i = 0;
    for (; i + L <= n; i += L) {
      for (int j = 0; j < L; ++j) acc[j] = P::op(acc[j], P::load(p[i + j], index0 + i + j));
    }
    for (int j = 0; i < n; ++i, ++j) acc[j] = P::op(acc[j], P::load(p[i], index0 + i));
    for (int w = L / 2; w > 0; w /= 2) {
      for (int j = 0; j < w; ++j) acc[j] = P::op(acc[j], acc[j + w]);
    }
    return acc[0];
  }
}

// The same leaf compiled for AVX-512 (the build targets x86-64-v3), used where the CPU has it for
// float sums and means: 512-bit accumulators keep more loads in flight and take a 16M-element
// f32 sum on 2 threads from about 1.15 to 1.05 ms here. Each lane still adds its own elements in
// order and the lanes fold by the same fixed tree (no reassociation: this is not -ffast-math),
// so the result is bit-identical to the AVX2 build's.
template <class P, class T>
__attribute__((target("arch=x86-64-v4,prefer-vector-width=512"), flatten)) typename P::Acc
reduce_leaf_avx512(const T* p, int64_t n, int64_t index0) {
  return reduce_leaf<P>(p, n, index0);
}

template <class P>
constexpr bool kWideLeaf =
    std::is_same_v<P, SumP<float, float, float>> || std::is_same_v<P, MeanP<float, float, float>>;

template <class P, class T>
typename P::Acc reduce_leaf_fast(const T* p, int64_t n, int64_t index0) {
  if constexpr (kWideLeaf<P>) {
    if (cpu_has_avx512()) return reduce_leaf_avx512<P>(p, n, index0);
  }
  return reduce_leaf<P>(p, n, index0);
}

// Leaves [first, first + count) of the run at p (n elements in all), combined by the tree.
template <class P, class T>
typename P::Acc reduce_leaves(const T* p, int64_t n, int64_t first, int64_t count) {
  if (count == 1) {
    const int64_t b = first * kLeaf;
    return reduce_leaf_fast<P>(p + b, std::min(kLeaf, n - b), b);
  }
  const int64_t m = tree_split(count);
  return P::op(reduce_leaves<P>(p, n, first, m), reduce_leaves<P>(p, n, first + m, count - m));
}

template <class P, class T>
typename P::Acc reduce_run(const T* p, int64_t n) {
  if (n == 0) return P::init();
  return reduce_leaves<P>(p, n, 0, (n + kLeaf - 1) / kLeaf);
}

// Folds parts[0..n) in place by the same tree as reduce_leaves; parts[0] holds the result.
template <class P>
void fold_in_place(typename P::Acc* parts, int64_t n, int64_t stride) {
  for (int64_t w = 1; w < n; w *= 2) {
    for (int64_t i = 0; i + w < n; i += 2 * w) {
      parts[i * stride] = P::op(parts[i * stride], parts[(i + w) * stride]);
    }
  }
}

// Where the data of a reduction lies, after merging dims: either rows (kept dims, any strides)
// each reducing a contiguous run of R elements, or [kept_outer..., R (r_stride), C (stride 1)]
// reducing columns.
struct Plan {
  bool columns = false;
  Shape kept_shape;  // rows: all kept dims; columns: the kept dims before R
  Strides kept_strides;
  int64_t R = 1;
  int64_t r_stride = 1;
  int64_t C = 1;
  CpuTensor src;  // the input, or a contiguous copy in [kept..., reduced...] order
};

struct Entry {
  int64_t size, stride;
  bool reduced;
};

Plan make_plan(const CpuTensor& x, const std::vector<bool>& reduced) {
  Plan plan;
  std::vector<Entry> es;
  for (int64_t d = 0; d < x.rank(); ++d) {
    if (x.shape[d] == 1) continue;
    Entry e{x.shape[d], x.strides[d], reduced[d]};
    if (!es.empty() && es.back().reduced == e.reduced && es.back().stride == e.stride * e.size) {
      es.back().size *= e.size;
      es.back().stride = e.stride;
    } else {
      es.push_back(e);
    }
  }
  int n_reduced = 0, ri = -1;
  for (size_t i = 0; i < es.size(); ++i) {
    if (es[i].reduced) ++n_reduced, ri = static_cast<int>(i);
  }
  const int last = static_cast<int>(es.size()) - 1;
  plan.src = x;
  auto keep_all_but = [&](int skip, int end) {
    for (int i = 0; i < end; ++i) {
      if (i == skip) continue;
      plan.kept_shape.push_back(es[i].size);
      plan.kept_strides.push_back(es[i].stride);
    }
  };
  if (n_reduced == 0) {  // only size-1 dims are reduced: each output is one element
    keep_all_but(-1, last + 1);
    return plan;
  }
  if (n_reduced == 1 && ri == last && es[ri].stride == 1) {
    keep_all_but(ri, last + 1);
    plan.R = es[ri].size;
    return plan;
  }
  if (n_reduced == 1 && ri == last - 1 && es[last].stride == 1) {
    plan.columns = true;
    keep_all_but(-1, ri);
    plan.R = es[ri].size;
    plan.r_stride = es[ri].stride;
    plan.C = es[last].size;
    return plan;
  }
  // Anything else: copy into [kept..., reduced...] order, which is a rows plan.
  CpuTensor view = x;
  view.shape.clear();
  view.strides.clear();
  int64_t rows = 1;
  for (int pass = 0; pass < 2; ++pass) {
    for (const Entry& e : es) {
      if (e.reduced != (pass == 1)) continue;
      view.shape.push_back(e.size);
      view.strides.push_back(e.stride);
      if (!e.reduced) rows *= e.size;
    }
  }
  plan.src = alloc_tensor(view.meta());
  copy_to_contiguous(view, plan.src.buffer.data());
  plan.R = numel(view.shape) / rows;
  plan.kept_shape = {rows};
  plan.kept_strides = {plan.R};
  return plan;
}

template <class P, class T>
void reduce_rows(const Plan& plan, typename P::Out* out) {
  using A = typename P::Acc;
  const T* base = plan.src.data<T>();
  const int64_t rows = numel(plan.kept_shape);
  const int64_t R = plan.R;
  const int64_t grain = chunk_grain(rows * R, kReduceGrain);  // in elements
  if (R <= kParallelRow) {
    parallel_chunks(rows, std::max<int64_t>(1, grain / std::max<int64_t>(R, 1)),
                    [&](int64_t, int64_t b, int64_t e) {
                      StridedIter<1> it(plan.kept_shape, {plan.kept_strides});
                      it.seek(b);
                      for (int64_t r = b; r < e; ++r, it.next()) {
                        out[r] = P::finish(reduce_run<P>(base + it.off[0], R), R);
                      }
                    });
    return;
  }
  // Long rows: every (row, leaf) pair is a task; then each row folds its leaves.
  const int64_t leaves = (R + kLeaf - 1) / kLeaf;
  Buffer scratch = Buffer::allocate(static_cast<size_t>(rows * leaves) * sizeof(A));
  A* parts = scratch.as<A>();
  parallel_chunks(
      rows * leaves, std::max<int64_t>(1, grain / kLeaf), [&](int64_t, int64_t b, int64_t e) {
        StridedIter<1> it(plan.kept_shape, {plan.kept_strides});
        for (int64_t t = b; t < e; ++t) {
          const int64_t r = t / leaves, l = t % leaves;
          if (t == b || l == 0) it.seek(r);
          const int64_t start = l * kLeaf;
          parts[t] =
              reduce_leaf_fast<P>(base + it.off[0] + start, std::min(kLeaf, R - start), start);
        }
      });
  parallel_chunks(rows, std::max<int64_t>(1, kReduceGrain / leaves),
                  [&](int64_t, int64_t b, int64_t e) {
                    for (int64_t r = b; r < e; ++r) {
                      fold_in_place<P>(parts + r * leaves, leaves, 1);
                      out[r] = P::finish(parts[r * leaves], R);
                    }
                  });
}

// Column partial: rows [r0, r1) of columns [c0, c0 + w) of outer slice `base`.
template <class P, class T>
void column_block(const T* base, int64_t r_stride, int64_t r0, int64_t r1, int64_t w,
                  typename P::Acc* acc) {
  for (int64_t c = 0; c < w; ++c) acc[c] = P::init();
  for (int64_t r = r0; r < r1; ++r) {
    const T* row = base + r * r_stride;
    for (int64_t c = 0; c < w; ++c) acc[c] = P::op(acc[c], P::load(row[c], r));
  }
}

template <class P, class T>
void reduce_columns(const Plan& plan, typename P::Out* out) {
  using A = typename P::Acc;
  const T* base = plan.src.data<T>();
  const int64_t outer = numel(plan.kept_shape);
  const int64_t R = plan.R, C = plan.C;
  const int64_t tiles = (C + kColTile - 1) / kColTile;
  const int64_t blocks = std::max<int64_t>(1, (R + kRowBlock - 1) / kRowBlock);
  auto slice_base = [&](StridedIter<1>& it, int64_t o) {
    it.seek(o);
    return base + it.off[0];
  };
  if (blocks == 1) {
    const int64_t grain = std::max<int64_t>(1, kReduceGrain / std::max<int64_t>(1, R * kColTile));
    parallel_chunks(outer * tiles, grain, [&](int64_t, int64_t b, int64_t e) {
      StridedIter<1> it(plan.kept_shape, {plan.kept_strides});
      A acc[kColTile];
      for (int64_t t = b; t < e; ++t) {
        const int64_t o = t / tiles, c0 = (t % tiles) * kColTile;
        const int64_t w = std::min(kColTile, C - c0);
        column_block<P>(slice_base(it, o) + c0, plan.r_stride, 0, R, w, acc);
        for (int64_t c = 0; c < w; ++c) out[o * C + c0 + c] = P::finish(acc[c], R);
      }
    });
    return;
  }
  // parts[o][block][c]: each block's partials, then folded over blocks per column.
  Buffer scratch = Buffer::allocate(static_cast<size_t>(outer * blocks * C) * sizeof(A));
  A* parts = scratch.as<A>();
  const int64_t grain = std::max<int64_t>(1, kReduceGrain / (kRowBlock * kColTile));
  parallel_chunks(outer * blocks * tiles, grain, [&](int64_t, int64_t b, int64_t e) {
    StridedIter<1> it(plan.kept_shape, {plan.kept_strides});
    for (int64_t t = b; t < e; ++t) {
      const int64_t o = t / (blocks * tiles), blk = (t / tiles) % blocks;
      const int64_t c0 = (t % tiles) * kColTile;
      const int64_t w = std::min(kColTile, C - c0);
      const int64_t r0 = blk * kRowBlock;
      column_block<P>(slice_base(it, o) + c0, plan.r_stride, r0, std::min(R, r0 + kRowBlock), w,
                      parts + (o * blocks + blk) * C + c0);
    }
  });
  parallel_chunks(outer * C, std::max<int64_t>(1, kReduceGrain / blocks),
                  [&](int64_t, int64_t b, int64_t e) {
                    for (int64_t t = b; t < e; ++t) {
                      const int64_t o = t / C, c = t % C;
                      A* col = parts + o * blocks * C + c;
                      fold_in_place<P>(col, blocks, C);
                      out[t] = P::finish(col[0], R);
                    }
                  });
}

template <class P, class T>
void reduce_with(const Plan& plan, CpuTensor& out) {
  using O = typename P::Out;
  if (plan.columns) {
    reduce_columns<P, T>(plan, out.data<O>());
  } else {
    reduce_rows<P, T>(plan, out.data<O>());
  }
}

DType reduce_out_dtype(ReduceKind k, DType in) {
  switch (k) {
    case ReduceKind::kSum:
    case ReduceKind::kProd: return is_float(in) ? in : kI64;
    case ReduceKind::kMean: return is_float(in) ? in : kF32;
    case ReduceKind::kArgmax:
    case ReduceKind::kArgmin: return kI64;
    default: return in;
  }
}

template <class T>
Status reduce_typed(ReduceKind kind, const Plan& plan, CpuTensor& out) {
  constexpr bool kFloat = std::is_floating_point_v<T>;
  using Wide = std::conditional_t<kFloat, T, uint64_t>;    // accumulator
  using WideOut = std::conditional_t<kFloat, T, int64_t>;  // sum, prod
  using MeanOut = std::conditional_t<kFloat, T, float>;
  switch (kind) {
    case ReduceKind::kSum: reduce_with<SumP<T, Wide, WideOut>, T>(plan, out); break;
    case ReduceKind::kProd: reduce_with<ProdP<T, Wide, WideOut>, T>(plan, out); break;
    // Integral means accumulate in double (docs/ops.md): a 64-bit sum could wrap.
    case ReduceKind::kMean:
      reduce_with<MeanP<T, std::conditional_t<kFloat, T, double>, MeanOut>, T>(plan, out);
      break;
    case ReduceKind::kMax: reduce_with<ExtremeP<T, true>, T>(plan, out); break;
    case ReduceKind::kMin: reduce_with<ExtremeP<T, false>, T>(plan, out); break;
    case ReduceKind::kArgmax: reduce_with<ArgP<T, true>, T>(plan, out); break;
    case ReduceKind::kArgmin: reduce_with<ArgP<T, false>, T>(plan, out); break;
    default: return internal_error("reduce: unknown kind");
  }
  return Status::OK();
}

// Fills an output whose reduction is empty (R = 0) with the kind's identity.
Status fill_empty(ReduceKind kind, const char* name, const CpuTensor& x, CpuTensor& out) {
  const int64_t n = out.numel();
  switch (kind) {
    case ReduceKind::kSum:
    case ReduceKind::kProd: {
      const int64_t v = kind == ReduceKind::kProd ? 1 : 0;
      return visit_compute(out.dtype, name, [&](auto tag) {
        using O = typename decltype(tag)::type;
        std::fill(out.data<O>(), out.data<O>() + n, convert<O>(v));
        return Status::OK();
      });
    }
    case ReduceKind::kMean:
      return visit_float(out.dtype, name, [&](auto tag) {
        using O = typename decltype(tag)::type;
        std::fill(out.data<O>(), out.data<O>() + n, std::numeric_limits<O>::quiet_NaN());
        return Status::OK();
      });
    default:
      return invalid_argument(std::string(name) + ": cannot reduce " + meta_str(x.meta()) +
                              " over an empty dimension (" + name + " of nothing is undefined)");
  }
}

}  // namespace

Status run(const ir::Reduce& op, KernelContext& ctx) {
  const char* name = ir::kind_name(op.kind);
  const CpuTensor& x = ctx.in(op.x);
  TW_RETURN_NOT_OK(check_out_dtype(name, ctx.meta(op.out), reduce_out_dtype(op.kind, x.dtype)));
  const int64_t rank = x.rank();
  std::vector<bool> reduced(static_cast<size_t>(rank), op.dims.empty());
  for (int64_t d : op.dims) {
    TW_ASSIGN_OR_RETURN(int64_t nd, normalize_dim(d, rank, name));
    if (rank > 0) reduced[static_cast<size_t>(nd)] = true;
  }
  int64_t count = 1;
  for (int64_t d = 0; d < rank; ++d) {
    if (reduced[d]) count *= x.shape[d];
  }
  CpuTensor& out = ctx.alloc(op.out);
  if (out.numel() == 0) return Status::OK();
  if (count == 0) return fill_empty(op.kind, name, x, out);
  const Plan plan = make_plan(x, reduced);
  return visit_compute(x.dtype, name, [&](auto tag) {
    return reduce_typed<typename decltype(tag)::type>(op.kind, plan, out);
  });
}

// ---- Cumsum ----

template <class T, class A, class O>
void cumsum_typed(const CpuTensor& x, int64_t dim, O* out) {
  const T* in = x.data<T>();
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= x.shape[d];
  for (int64_t d = dim + 1; d < x.rank(); ++d) inner *= x.shape[d];
  const int64_t L = x.rank() == 0 ? 1 : x.shape[dim];
  if (outer * L * inner == 0) return;
  if (inner > 1) {
    // Columns scanned side by side: vectorises across the inner dim.
    const int64_t tiles = (inner + kColTile - 1) / kColTile;
    const int64_t grain = std::max<int64_t>(1, kReduceGrain / (L * kColTile));
    parallel_chunks(outer * tiles, grain, [&](int64_t, int64_t b, int64_t e) {
      A acc[kColTile];
      for (int64_t t = b; t < e; ++t) {
        const int64_t o = t / tiles, c0 = (t % tiles) * kColTile;
        const int64_t w = std::min(kColTile, inner - c0);
        std::fill(acc, acc + w, A(0));
        for (int64_t l = 0; l < L; ++l) {
          const int64_t at = (o * L + l) * inner + c0;
          for (int64_t c = 0; c < w; ++c) {
            acc[c] += static_cast<A>(in[at + c]);
            out[at + c] = static_cast<O>(acc[c]);
          }
        }
      }
    });
    return;
  }
  auto scan = [&](const T* p, O* o, int64_t n, A acc) {
    for (int64_t i = 0; i < n; ++i) {
      acc += static_cast<A>(p[i]);
      o[i] = static_cast<O>(acc);
    }
    return acc;
  };
  if (L < 2 * kScanBlock) {
    parallel_chunks(outer, std::max<int64_t>(1, kReduceGrain / L),
                    [&](int64_t, int64_t b, int64_t e) {
                      for (int64_t o = b; o < e; ++o) scan(in + o * L, out + o * L, L, A(0));
                    });
    return;
  }
  // Long lines: block sums in parallel, their prefix in order, then every block rescanned from
  // its offset. The blocks depend on L only.
  const int64_t blocks = (L + kScanBlock - 1) / kScanBlock;
  Buffer scratch = Buffer::allocate(static_cast<size_t>(outer * blocks) * sizeof(A));
  A* sums = scratch.as<A>();
  auto block_range = [&](int64_t t, int64_t& at, int64_t& n) {
    const int64_t o = t / blocks, blk = t % blocks;
    at = o * L + blk * kScanBlock;
    n = std::min(kScanBlock, L - blk * kScanBlock);
  };
  parallel_chunks(outer * blocks, 1, [&](int64_t, int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      int64_t at, n;
      block_range(t, at, n);
      A s = A(0);
      for (int64_t i = 0; i < n; ++i) s += static_cast<A>(in[at + i]);
      sums[t] = s;
    }
  });
  for (int64_t o = 0; o < outer; ++o) {
    A run = A(0);
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const A s = sums[o * blocks + blk];
      sums[o * blocks + blk] = run;
      run += s;
    }
  }
  parallel_chunks(outer * blocks, 1, [&](int64_t, int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      int64_t at, n;
      block_range(t, at, n);
      scan(in + at, out + at, n, sums[t]);
    }
  });
}

Status run(const ir::Cumsum& op, KernelContext& ctx) {
  const CpuTensor& x0 = ctx.in(op.x);
  const DType out_dtype = is_float(x0.dtype) ? x0.dtype : kI64;
  TW_RETURN_NOT_OK(check_out_dtype("cumsum", ctx.meta(op.out), out_dtype));
  TW_ASSIGN_OR_RETURN(int64_t dim, normalize_dim(op.dim, x0.rank(), "cumsum"));
  const CpuTensor x = contiguous(x0);
  CpuTensor& out = ctx.alloc(op.out);
  return visit_compute(x.dtype, "cumsum", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<T>) {
      // f32 accumulates in double (as PyTorch's CPU cumsum): a long running sum in f32 drifts.
      cumsum_typed<T, double, T>(x, dim, out.data<T>());
    } else {
      // Integers accumulate in 64-bit two's complement: unsigned arithmetic wraps.
      cumsum_typed<T, uint64_t, int64_t>(x, dim, out.data<int64_t>());
    }
    return Status::OK();
  });
}

}  // namespace tw::cpu
