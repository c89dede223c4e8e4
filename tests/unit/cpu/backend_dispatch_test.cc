// The cpu backend's op dispatch (cpu_backend.cc, cpu_tensor.cc): one KernelContext reused for
// every op, tensor handles recycled, contiguous elementwise operands run as one flat run, and
// registered graphs replayed from slots that are all empty between runs. Each test checks values
// or lifetimes that a stale entry, a wrong flat step or a slot left holding a tensor would break.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/registry.h"
#include "core/tensor_data.h"
#include "ir/graph.h"
#include "ir/ops.h"
#include "support/helpers.h"

namespace tw {
namespace {

ir::Op from_values(ir::TensorId id, const Shape& shape, const std::vector<float>& v) {
  return from_host_of(TensorData::from<float>(shape, v), id);
}

ir::Op transpose(ir::TensorId x, ir::TensorId out) { return ir::Permute{{x}, {1, 0}, {out}}; }

using testing::binary;

// i64 zeros of `n` elements as `id` (the divisor of the tests' failing integer remainder).
ir::Op zeros_i64(ir::TensorId id, int64_t n) { return testing::full_op(id, {n}, kI64, int64_t{0}); }

// A graph over inputs 1 and 2 of these metas; the ops to be added.
ir::Graph graph_of(TensorMeta a, TensorMeta b) {
  ir::Graph g;
  g.input_ids = {1, 2};
  g.inputs = {std::move(a), std::move(b)};
  return g;
}

std::vector<float> values(Backend& b, ir::TensorId id) {
  Result<TensorData> d = b.read(id);
  EXPECT_TRUE(d.ok()) << d.status().to_string();
  if (!d.ok()) return {};
  const auto v = d->values<float>();
  return {v.begin(), v.end()};
}

TEST(CpuDispatch, AFailedOpLeavesNothingBehindForTheNextOps) {
  auto b = make_cpu_backend();
  ASSERT_TRUE(b->execute(zeros_i64(1, 3)).ok());
  // Integer remainder by zero fails inside the kernel, after its context was filled.
  EXPECT_FALSE(b->execute(binary(ir::BinaryKind::kRemainder, 1, 1, 2)).ok());
  EXPECT_FALSE(b->read(2).ok()) << "the failed op's output is poisoned";
  ASSERT_TRUE(b->execute(from_values(3, {2, 2}, {1, 2, 3, 4})).ok());
  ASSERT_TRUE(b->execute(from_values(4, {2, 2}, {10, 20, 30, 40})).ok());
  ASSERT_TRUE(b->execute(binary(ir::BinaryKind::kSub, 4, 3, 5)).ok());
  ASSERT_TRUE(b->execute(binary(ir::BinaryKind::kMul, 5, 3, 6)).ok());
  EXPECT_EQ(values(*b, 5), (std::vector<float>{9, 18, 27, 36}));
  EXPECT_EQ(values(*b, 6), (std::vector<float>{9, 36, 81, 144}));
}

// Operands the flat run takes (contiguous, one element) beside ones it must leave to the general
// driver (a row broadcast, a transposed view), with recycled handles of other ranks in between.
TEST(CpuDispatch, FlatAndStridedOperandsGiveTheSameValues) {
  auto b = make_cpu_backend();
  ASSERT_TRUE(b->execute(from_values(1, {2, 3}, {1, 2, 3, 4, 5, 6})).ok());
  ASSERT_TRUE(b->execute(from_values(2, {1, 1}, {100})).ok());
  ASSERT_TRUE(b->execute(from_values(3, {3}, {10, 20, 30})).ok());
  ASSERT_TRUE(b->execute(from_values(4, {1}, {7})).ok());
  ASSERT_TRUE(b->execute(binary(ir::BinaryKind::kAdd, 1, 2, 10)).ok());  // [2,3] + one element
  ASSERT_TRUE(b->execute(binary(ir::BinaryKind::kSub, 2, 1, 11)).ok());  // one element - [2,3]
  ASSERT_TRUE(b->execute(binary(ir::BinaryKind::kAdd, 1, 3, 12)).ok());  // a row broadcast
  ASSERT_TRUE(b->execute(binary(ir::BinaryKind::kMul, 4, 4, 13)).ok());  // one by one element
  ASSERT_TRUE(b->drop(12).ok());  // its handle is recycled into the next output
  ASSERT_TRUE(b->execute(transpose(1, 14)).ok());
  ASSERT_TRUE(b->execute(from_values(15, {3, 2}, {0, 0, 0, 0, 0, 0})).ok());
  ASSERT_TRUE(b->execute(binary(ir::BinaryKind::kAdd, 14, 15, 16)).ok());  // transposed
  ASSERT_TRUE(b->execute(binary(ir::BinaryKind::kAdd, 1, 3, 17)).ok());
  EXPECT_EQ(values(*b, 10), (std::vector<float>{101, 102, 103, 104, 105, 106}));
  EXPECT_EQ(values(*b, 11), (std::vector<float>{99, 98, 97, 96, 95, 94}));
  EXPECT_EQ(values(*b, 13), (std::vector<float>{49}));
  EXPECT_EQ(values(*b, 16), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(values(*b, 17), (std::vector<float>{11, 22, 33, 14, 25, 36}));
  Result<TensorMeta> m = b->meta(16);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->shape, (Shape{3, 2}));
}

// A transposed view read back (copy_to_contiguous: 8x8 register blocks for 4-byte elements,
// buffered tiles for the others, element by element at the edges) gives exactly the transposed
// bytes, whatever they encode (random f32 bits include NaNs with payloads).
TEST(CpuDispatch, TransposedMatricesReadBackExactly) {
  auto b = make_cpu_backend();
  ir::TensorId next = 1;
  for (DType dtype : {kU8, DType::kF16, kF32, kI32, kF64}) {
    for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{
             {2, 2}, {7, 9}, {8, 8}, {13, 21}, {64, 40}, {9, 512}, {33, 17}}) {
      const size_t es = dtype_size(dtype);
      const size_t bytes = static_cast<size_t>(rows * cols) * es;
      std::vector<uint8_t> src(bytes);
      uint64_t x = 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(rows * 131 + cols);
      for (uint8_t& v : src) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        v = static_cast<uint8_t>(x >> 24);
      }
      TensorData d;
      d.meta = {{rows, cols}, dtype};
      const std::string what = meta_str(d.meta);
      d.bytes = Buffer::copy_of(src.data(), bytes);
      const ir::TensorId in = next++, t = next++;
      ASSERT_TRUE(b->execute(from_host_of(std::move(d), in)).ok());
      ASSERT_TRUE(b->execute(transpose(in, t)).ok());
      Result<TensorData> got = b->read(t);
      ASSERT_TRUE(got.ok()) << got.status().to_string();
      std::vector<uint8_t> want(bytes);
      for (int64_t r = 0; r < cols; ++r) {
        for (int64_t c = 0; c < rows; ++c) {
          std::memcpy(&want[static_cast<size_t>(r * rows + c) * es],
                      &src[static_cast<size_t>(c * cols + r) * es], es);
        }
      }
      ASSERT_EQ(got->bytes.size(), bytes);
      EXPECT_EQ(std::memcmp(got->bytes.data(), want.data(), bytes), 0) << what << " transposed";
    }
  }
}

// Permuted views of rank 3 and 4 whose last dim is not the one lying contiguously (a batch of
// transposed matrices, NCHW read as NHWC, the stride-1 dim first) read back exactly: 4-byte
// elements go through transpose_slabs (8x8 blocks, edges element by element), others element by
// element.
TEST(CpuDispatch, PermutedBatchesReadBackExactly) {
  auto b = make_cpu_backend();
  ir::TensorId next = 1;
  struct Case {
    Shape shape;
    std::vector<int64_t> dims;
  };
  const std::vector<Case> cases = {{{3, 13, 21}, {0, 2, 1}},
                                   {{2, 16, 24}, {0, 2, 1}},
                                   {{2, 9, 16, 24}, {0, 2, 3, 1}},
                                   {{5, 8, 17}, {2, 0, 1}},
                                   {{4, 3, 8, 8}, {1, 3, 0, 2}}};
  for (DType dtype : {kF32, kI32, kU8, kF64}) {
    for (const Case& c : cases) {
      const size_t es = dtype_size(dtype);
      const int64_t n = numel(c.shape);
      std::vector<uint8_t> src(static_cast<size_t>(n) * es);
      uint64_t x = 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(n);
      for (uint8_t& v : src) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        v = static_cast<uint8_t>(x >> 24);
      }
      TensorData d;
      d.meta = {c.shape, dtype};
      const std::string what = meta_str(d.meta);
      d.bytes = Buffer::copy_of(src.data(), src.size());
      const ir::TensorId in = next++, t = next++;
      ASSERT_TRUE(b->execute(from_host_of(std::move(d), in)).ok());
      Shape out_shape;
      for (int64_t k : c.dims) out_shape.push_back(c.shape[static_cast<size_t>(k)]);
      ASSERT_TRUE(b->execute(ir::Permute{{in}, c.dims, {t}}).ok());
      Result<TensorData> got = b->read(t);
      ASSERT_TRUE(got.ok()) << got.status().to_string();
      // want[o] = src[the element at the permuted index], o running row-major over out_shape.
      const Strides in_strides = contiguous_strides(c.shape);
      std::vector<uint8_t> want(src.size());
      std::vector<int64_t> idx(out_shape.size(), 0);
      for (int64_t o = 0; o < n; ++o) {
        int64_t off = 0;
        for (size_t k = 0; k < idx.size(); ++k)
          off += idx[k] * in_strides[static_cast<size_t>(c.dims[k])];
        std::memcpy(&want[static_cast<size_t>(o) * es], &src[static_cast<size_t>(off) * es], es);
        for (size_t k = idx.size(); k-- > 0;) {
          if (++idx[k] < out_shape[k]) break;
          idx[k] = 0;
        }
      }
      ASSERT_EQ(got->bytes.size(), want.size());
      EXPECT_EQ(std::memcmp(got->bytes.data(), want.data(), want.size()), 0) << what << " permuted";
    }
  }
}

// x_{i+1} = x_i + one, n times, as a graph.
ir::Graph chain_of_adds(int n) {
  ir::Graph g = graph_of({{1}, kF32}, {{1}, kF32});
  for (int i = 0; i < n; ++i) {
    g.ops.push_back(binary(ir::BinaryKind::kAdd, i == 0 ? 1 : static_cast<ir::TensorId>(i + 2), 2,
                           static_cast<ir::TensorId>(i + 3)));
  }
  g.output_ids = {static_cast<ir::TensorId>(n + 2)};
  return g;
}

TEST(CpuDispatch, GraphRunsHoldNoTensorOnceTheyEnd) {
  auto b = make_cpu_backend();
  Result<ir::GraphId> g = b->register_graph(chain_of_adds(1000));
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  // The inputs' storage is borrowed: once every reference to it is gone, `alive` expires.
  auto x0 = std::make_shared<float>(0.5f), one = std::make_shared<float>(1.0f);
  std::weak_ptr<float> alive = x0;
  ASSERT_TRUE(b->execute(ir::FromHost{{10}, {1}, kF32, {Buffer::wrap(x0.get(), 4, x0)}}).ok());
  ASSERT_TRUE(b->execute(ir::FromHost{{11}, {1}, kF32, {Buffer::wrap(one.get(), 4, one)}}).ok());
  x0.reset();
  for (ir::TensorId out = 20; out < 23; ++out) {
    const std::vector<ir::TensorId> ins = {10, 11}, outs = {out};
    ASSERT_TRUE(b->run_graph(*g, ins, outs).ok());
    EXPECT_EQ(values(*b, out), (std::vector<float>{1000.5f})) << "run " << out - 20;
  }
  Result<Backend::GraphMemory> mem = b->graph_memory(*g);
  ASSERT_TRUE(mem.ok());
  EXPECT_EQ(mem->fresh_allocations, 0u) << "runs take their intermediates from the arena";
  // Only the first add takes a block: each later one writes over the sum it is the last reader
  // of (the last writes the graph's output, outside the arena).
  EXPECT_EQ(mem->allocations, 3u);
  EXPECT_FALSE(alive.expired()) << "the table's tensor still uses the borrowed storage";
  ASSERT_TRUE(b->drop(10).ok());
  EXPECT_TRUE(alive.expired()) << "a finished run keeps no reference to its inputs";
}

// y = x + one; v = reshape(y) (a view of y's storage, a graph output); z = y + one. The add
// making z is y's last reader, but y's storage is not y's alone, so z must not be written over
// it: v keeps x + 1.
TEST(CpuDispatch, AnInputSharedWithAViewIsNotWrittenOver) {
  auto b = make_cpu_backend();
  ir::Graph g = graph_of({{2}, kF32}, {{2}, kF32});
  g.ops.push_back(binary(ir::BinaryKind::kAdd, 1, 2, 3));
  g.ops.push_back(ir::Reshape{{3}, {2, 1}, {4}});
  g.ops.push_back(binary(ir::BinaryKind::kAdd, 3, 2, 5));
  g.ops.push_back(binary(ir::BinaryKind::kMul, 5, 5, 6));
  g.output_ids = {4, 6};
  Result<ir::GraphId> id = b->register_graph(g);
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  ASSERT_TRUE(b->execute(from_values(10, {2}, {1, 2})).ok());
  ASSERT_TRUE(b->execute(from_values(11, {2}, {1, 1})).ok());
  for (ir::TensorId out = 20; out < 24; out += 2) {
    const std::vector<ir::TensorId> ins = {10, 11}, outs = {out, out + 1};
    ASSERT_TRUE(b->run_graph(*id, ins, outs).ok());
    EXPECT_EQ(values(*b, out), (std::vector<float>{2, 3}));
    EXPECT_EQ(values(*b, out + 1), (std::vector<float>{9, 16}));
  }
}

// A transposed intermediate read only by elementwise ops is handed over as a contiguous copy from
// the arena; the results must equal the same ops run eagerly (where the ops read the view), and
// the copies stay within the plan.
TEST(CpuDispatch, ATransposedIntermediateReadByElementwiseOpsEqualsEager) {
  constexpr int64_t kRows = 72, kCols = 90;
  std::vector<float> xs(kRows * kCols);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i % 97) * 0.37f - 11.0f;
  ir::Graph g = graph_of({{kRows, kCols}, kF32}, {{1}, kF32});
  g.ops.push_back(binary(ir::BinaryKind::kMul, 1, 2, 3));
  g.ops.push_back(transpose(3, 4));
  g.ops.push_back(binary(ir::BinaryKind::kSub, 4, 2, 5));
  ir::Unary sq;
  sq.kind = ir::UnaryKind::kSquare;
  sq.x = {4};
  sq.out = {6};
  g.ops.push_back(sq);
  g.ops.push_back(binary(ir::BinaryKind::kDiv, 5, 6, 7));
  g.output_ids = {7, 6};

  auto eager = make_cpu_backend();
  ASSERT_TRUE(eager->execute(from_values(1, {kRows, kCols}, xs)).ok());
  ASSERT_TRUE(eager->execute(from_values(2, {1}, {1.5f})).ok());
  for (const ir::Op& op : g.ops) ASSERT_TRUE(eager->execute(op).ok());

  auto b = make_cpu_backend();
  Result<ir::GraphId> id = b->register_graph(g);
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  ASSERT_TRUE(b->execute(from_values(10, {kRows, kCols}, xs)).ok());
  ASSERT_TRUE(b->execute(from_values(11, {1}, {1.5f})).ok());
  for (ir::TensorId out = 20; out < 24; out += 2) {
    const std::vector<ir::TensorId> ins = {10, 11}, outs = {out, out + 1};
    ASSERT_TRUE(b->run_graph(*id, ins, outs).ok());
    EXPECT_EQ(b->read(out)->bytes.size(), eager->read(7)->bytes.size());
    EXPECT_EQ(values(*b, out), values(*eager, 7));
    EXPECT_EQ(values(*b, out + 1), values(*eager, 6));
  }
  Result<Backend::GraphMemory> mem = b->graph_memory(*id);
  ASSERT_TRUE(mem.ok());
  EXPECT_EQ(mem->fresh_allocations, 0u);
}

}  // namespace
}  // namespace tw

namespace tw {
namespace {

// execute_inferred (a device of this process, whose emit() inferred the metas already): the same
// values as execute(), and an op on a poisoned input is poisoned with that input's error, as
// execute() does; the metas given are what the output gets.
TEST(CpuDispatch, ExecuteInferredRunsAsExecuteWithTheCallersMetas) {
  auto b = make_cpu_backend();
  ASSERT_TRUE(b->execute(from_values(1, {2, 2}, {1, 2, 3, 4})).ok());
  ASSERT_TRUE(b->execute(from_values(2, {2}, {10, 20})).ok());
  const std::vector<TensorMeta> sum_meta = {TensorMeta{{2, 2}, kF32}};
  ASSERT_TRUE(b->execute_inferred(binary(ir::BinaryKind::kAdd, 1, 2, 3), sum_meta).ok());
  ASSERT_TRUE(b->execute(binary(ir::BinaryKind::kAdd, 1, 2, 4)).ok());
  EXPECT_EQ(values(*b, 3), (std::vector<float>{11, 22, 13, 24}));
  EXPECT_EQ(values(*b, 3), values(*b, 4));
  EXPECT_EQ(b->meta(3)->shape, (Shape{2, 2}));

  ASSERT_TRUE(b->execute(zeros_i64(5, 2)).ok());
  EXPECT_FALSE(b->execute(binary(ir::BinaryKind::kRemainder, 5, 5, 6)).ok());
  const Status poisoned = b->read(6).status();
  ASSERT_FALSE(poisoned.ok());
  EXPECT_FALSE(
      b->execute_inferred(binary(ir::BinaryKind::kAdd, 6, 6, 7), {TensorMeta{{2}, kI64}}).ok());
  EXPECT_EQ(b->read(7).status().message(), poisoned.message());
}

}  // namespace
}  // namespace tw
