// The session's graph table (protocol 2) driven with no socket: registration replies, quotas,
// runs equal to the same ops sent one by one, bad runs poisoning their outputs, and the buffer
// planner (intermediates share arena blocks, and runs after the first take no fresh memory).
#include <gtest/gtest.h>

#include <cstring>

#include "protocol/messages.h"
#include "server/session.h"
#include "support/frames.h"
#include "support/helpers.h"
#include "support/session_replies.h"

namespace tw::server {
namespace {

namespace proto = protocol;

using testing::binary;
using testing::full_op;
using testing::Replies;

// Encodes the batch as a client would and runs it as the server does.
void run(Session& s, proto::BatchWriter& b, Replies& out) {
  std::vector<uint8_t> bytes = testing::flatten(b.take());
  std::vector<proto::Task> tasks;
  Status decoded = proto::decode_batch(Buffer::copy_of(bytes.data(), bytes.size()), tasks);
  ASSERT_TRUE(decoded.ok()) << decoded.message();
  s.run(tasks, decoded, out);
}

std::unique_ptr<Session> open_cpu(SessionTotals& totals, uint64_t quota = uint64_t{1} << 30,
                                  uint64_t max_graph_ops = 1000) {
  auto s = Session::open(7, "cpu", quota, totals, max_graph_ops);
  EXPECT_TRUE(s.ok()) << s.status().message();
  return std::move(s).value();
}

// x -> tanh(x * x + x) chained `steps` times over [n] f32: intermediates of one size class.
ir::Graph chain(int64_t n, int steps) {
  ir::Graph g;
  g.input_ids = {1};
  g.inputs = {{{n}, kF32}};
  ir::TensorId x = 1, next = 2;
  for (int i = 0; i < steps; ++i) {
    const ir::TensorId sq = next++, sum = next++, y = next++;
    g.ops.push_back(binary(ir::BinaryKind::kMul, x, x, sq));
    g.ops.push_back(binary(ir::BinaryKind::kAdd, sq, x, sum));
    ir::Unary t;
    t.kind = ir::UnaryKind::kTanh;
    t.x = {sum};
    t.out = {y};
    g.ops.push_back(t);
    x = y;
  }
  g.output_ids = {x};
  return g;
}

// The graph result of the last reply, checked to be one.
Result<ir::GraphId> graph_reply(const Replies& r) {
  if (r.got.empty() || r.got.back().kind != proto::ServerMsg::kGraphResult) {
    return internal_error("no graph result");
  }
  if (!r.got.back().status().ok()) return r.got.back().status();
  return r.got.back().graph.result.value();
}

Result<TensorData> read(Session& s, ir::TensorId id) {
  proto::BatchWriter b;
  b.add_read(99, id);
  Replies r;
  run(s, b, r);
  if (r.got.size() != 1) return internal_error("no read reply");
  if (!r.got[0].status().ok()) return r.got[0].status();
  return r.got[0].read.result.value();
}

Result<ir::GraphId> register_graph(Session& s, const ir::Graph& g) {
  proto::BatchWriter b;
  b.add_register_graph(5, g);
  Replies r;
  run(s, b, r);
  EXPECT_EQ(r.got.size(), 1u);
  if (!r.got.empty()) {
    EXPECT_EQ(r.got[0].request_id(), 5u);
  }
  return graph_reply(r);
}

TEST(SessionGraphs, RunEqualsTheSameOpsSentOneByOneBitForBit) {
  SessionTotals totals;
  auto s = open_cpu(totals);
  const ir::Graph g = chain(1000, 5);
  auto id = register_graph(*s, g);
  ASSERT_TRUE(id.ok()) << id.status().message();
  EXPECT_EQ(s->graph_count(), 1u);
  EXPECT_EQ(s->graph_ops(), g.ops.size());

  proto::BatchWriter b;
  ir::RandNormal in;
  in.out = {10};
  in.shape = {1000};
  in.seed = 3;
  b.add_op(in);
  b.add_run_graph(*id, {10}, {11});
  // The same ops, eagerly, with ids shifted past the run's.
  for (ir::Op op : g.ops) {
    ir::remap_op(op, [](ir::TensorId t) { return t == 1 ? ir::TensorId{10} : t + 1000; });
    b.add_op(op);
  }
  Replies r;
  run(*s, b, r);
  auto graph_out = read(*s, 11);
  auto eager_out = read(*s, g.output_ids[0] + 1000);
  ASSERT_TRUE(graph_out.ok()) << graph_out.status().message();
  ASSERT_TRUE(eager_out.ok()) << eager_out.status().message();
  ASSERT_EQ(graph_out->bytes.size(), 4000u);
  EXPECT_EQ(std::memcmp(graph_out->bytes.data(), eager_out->bytes.data(), 4000), 0);
  // A run counts its ops in the server's figures.
  EXPECT_EQ(totals.ops_executed.load(), 1 + 2 * g.ops.size());
}

TEST(SessionGraphs, AnInvalidGraphIsRefusedNamingTheOpAndNotKept) {
  SessionTotals totals;
  auto s = open_cpu(totals);
  ir::Graph g;
  g.input_ids = {1, 2};
  g.inputs = {{{2, 3}, kF32}, {{4, 5}, kF32}};
  g.ops.push_back(binary(ir::BinaryKind::kAdd, 1, 1, 3));
  ir::MatMul mm;
  mm.a = {3};
  mm.b = {2};
  mm.out = {4};
  g.ops.push_back(mm);
  g.output_ids = {4};
  auto id = register_graph(*s, g);
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), StatusCode::kInvalidArgument) << id.status().message();
  EXPECT_NE(id.status().message().find("graph op 1 (matmul)"), std::string::npos)
      << id.status().message();
  EXPECT_EQ(s->graph_count(), 0u);
  EXPECT_EQ(s->graph_ops(), 0u);
}

TEST(SessionGraphs, GraphsOverTheOpQuotaAreRefused) {
  SessionTotals totals;
  auto s = open_cpu(totals, uint64_t{1} << 30, /*max_graph_ops=*/20);
  ASSERT_TRUE(register_graph(*s, chain(4, 5)).ok());  // 15 ops
  auto second = register_graph(*s, chain(4, 2));      // 6 more: 21
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(second.status().message().find("--max-graph-ops"), std::string::npos)
      << second.status().message();
  EXPECT_EQ(s->graph_ops(), 15u);
  EXPECT_TRUE(register_graph(*s, chain(4, 1)).ok());  // 18: still fits
}

TEST(SessionGraphs, GraphsOverTheMemoryQuotaAreRefused) {
  SessionTotals totals;
  // A chain over 1 MiB tensors plans two 1 MiB blocks: over a 1.5 MiB quota.
  auto s = open_cpu(totals, uint64_t{3} << 19);
  auto id = register_graph(*s, chain(1 << 18, 3));
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(id.status().message().find("--session-memory"), std::string::npos)
      << id.status().message();
  EXPECT_EQ(s->graph_count(), 0u);
  // Constants count too: a FromHost of 2 MiB inside a graph.
  ir::Graph g;
  ir::FromHost up;
  up.out = {1};
  up.shape = {1 << 19};
  up.data.data = Buffer::zeros(size_t{2} << 20);
  g.ops.push_back(up);
  g.output_ids = {1};
  id = register_graph(*s, g);
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.status().message().find("constants"), std::string::npos) << id.status().message();
}

// Graphs draw on the server-wide budget too: planned buffers past what it has free and
// constants past it are refused naming --max-memory, what a registered graph holds counts once
// (constants reserved, planned buffers settled), and the session's end gives it all back.
TEST(SessionGraphs, GraphsCountInTheServerWideBudget) {
  SessionTotals totals;
  totals.memory.set_limit(uint64_t{4} << 20);
  {
    auto s = open_cpu(totals);  // its own quota, 1 GiB, is far off
    // A chain over 4 MiB tensors plans two 4 MiB blocks: over the server's 4 MiB.
    auto id = register_graph(*s, chain(1 << 20, 3));
    ASSERT_FALSE(id.ok());
    EXPECT_EQ(id.status().code(), StatusCode::kResourceExhausted);
    EXPECT_NE(id.status().message().find("--max-memory"), std::string::npos)
        << id.status().message();
    EXPECT_EQ(totals.memory.used(), 0u);
    EXPECT_EQ(s->graph_count(), 0u);

    auto constant = [](int64_t n) {
      ir::Graph g;
      ir::FromHost up;
      up.out = {1};
      up.shape = {n};
      up.data.data = Buffer::zeros(static_cast<size_t>(n) * 4);
      g.ops.push_back(up);
      g.output_ids = {1};
      return g;
    };
    id = register_graph(*s, constant(1 << 18));  // 1 MiB of constants
    ASSERT_TRUE(id.ok()) << id.status().message();
    auto mem = s->graph_memory(*id);
    ASSERT_TRUE(mem.ok());
    const uint64_t holds = (uint64_t{1} << 20) + mem->planned_bytes;
    EXPECT_EQ(totals.memory.used(), holds);
    EXPECT_EQ(s->held(), holds);

    auto over = register_graph(*s, constant(1 << 20));  // 4 MiB more: over the server's 4 MiB
    ASSERT_FALSE(over.ok());
    EXPECT_NE(over.status().message().find("server memory limit"), std::string::npos)
        << over.status().message();
    EXPECT_EQ(totals.memory.used(), holds) << "a refused registration keeps nothing reserved";
    EXPECT_EQ(s->graph_count(), 1u);
  }
  EXPECT_EQ(totals.memory.used(), 0u);
  EXPECT_EQ(totals.bytes_held.load(), 0);
}

TEST(SessionGraphs, PlannedBuffersAreSharedAcrossOpsAndReusedAcrossRuns) {
  SessionTotals totals;
  auto s = open_cpu(totals);
  // 300 ops over 64 KiB tensors; at most three intermediates live at once (x*x and x*x+x while
  // x is still read), so the plan holds three blocks, not 299.
  const ir::Graph g = chain(1 << 14, 100);
  auto id = register_graph(*s, g);
  ASSERT_TRUE(id.ok()) << id.status().message();
  auto mem = s->graph_memory(*id);
  ASSERT_TRUE(mem.ok());
  const uint64_t block = BufferPool::size_class(size_t{1} << 16);
  EXPECT_EQ(mem->planned_bytes, 3 * block);
  // The plan is held by the session from registration on.
  proto::BatchWriter stats;
  stats.add_sync(1);
  Replies ignored;
  run(*s, stats, ignored);
  EXPECT_EQ(s->held(), 3 * block);

  proto::BatchWriter b;
  b.add_op(full_op(1000, {1 << 14}, kF32, 0.25));
  Replies r;
  run(*s, b, r);
  std::vector<float> first;
  for (ir::TensorId out = 2000; out < 2050; ++out) {
    b.add_run_graph(*id, {1000}, {out});
    run(*s, b, r);
    auto v = read(*s, out);
    ASSERT_TRUE(v.ok()) << v.status().message();
    if (first.empty()) {
      first.resize(1 << 14);
      std::memcpy(first.data(), v->bytes.data(), v->bytes.size());
    } else {
      ASSERT_EQ(std::memcmp(first.data(), v->bytes.data(), v->bytes.size()), 0);
    }
    b.add_drop({out});
    run(*s, b, r);
  }
  mem = s->graph_memory(*id);
  ASSERT_TRUE(mem.ok());
  // Every intermediate came from the arena, and none needed memory the plan had not reserved:
  // each step's x * x takes a block, and x * x + x and tanh write over the operand they are the
  // last to read (the cpu backend's in-place elementwise ops), so a run takes 100 blocks.
  EXPECT_EQ(mem->allocations, 50 * g.ops.size() / 3);
  EXPECT_EQ(mem->fresh_allocations, 0u);
  // Once a run is over the intermediates are gone: the session holds its input and the plan.
  EXPECT_EQ(s->held(), 3 * block + block);
}

TEST(SessionGraphs, AnOutputThatViewsAnIntermediateLeavesTheArena) {
  SessionTotals totals;
  auto s = open_cpu(totals);
  ir::Graph g;
  g.input_ids = {1};
  g.inputs = {{{6}, kF32}};
  g.ops.push_back(binary(ir::BinaryKind::kAdd, 1, 1, 2));
  ir::Reshape rs;
  rs.x = {2};
  rs.shape = {2, 3};
  rs.out = {3};
  g.ops.push_back(rs);  // a view of the intermediate %2
  g.output_ids = {3};
  auto id = register_graph(*s, g);
  ASSERT_TRUE(id.ok()) << id.status().message();
  proto::BatchWriter b;
  b.add_op(full_op(10, {6}, kF32, 1.5));
  b.add_run_graph(*id, {10}, {11});
  b.add_run_graph(*id, {10}, {12});  // reuses the arena block the first output must not share
  b.add_op(ir::BinaryScalar{ir::BinaryKind::kMul, {10}, ir::Scalar(int64_t{2}), false, {20}});
  b.add_run_graph(*id, {20}, {13});
  Replies r;
  run(*s, b, r);
  auto a = read(*s, 11);
  auto c = read(*s, 13);
  ASSERT_TRUE(a.ok() && c.ok());
  std::vector<float> va(6), vc(6);
  std::memcpy(va.data(), a->bytes.data(), 24);
  std::memcpy(vc.data(), c->bytes.data(), 24);
  EXPECT_EQ(va, std::vector<float>(6, 3.0f));
  EXPECT_EQ(vc, std::vector<float>(6, 6.0f));
  EXPECT_EQ(a->meta.shape, (Shape{2, 3}));
  // Had an output kept the arena block, the runs after the first would have needed fresh ones.
  auto mem = s->graph_memory(*id);
  ASSERT_TRUE(mem.ok());
  EXPECT_EQ(mem->allocations, 3u);
  EXPECT_EQ(mem->fresh_allocations, 0u);
}

TEST(SessionGraphs, BadRunsPoisonTheirOutputsWithTheReason) {
  SessionTotals totals;
  auto s = open_cpu(totals);
  auto id = register_graph(*s, chain(4, 1));
  ASSERT_TRUE(id.ok());
  proto::BatchWriter b;
  b.add_op(full_op(1, {5}, kF32, 1.0));  // the graph takes [4]
  b.add_run_graph(*id, {1}, {2});
  b.add_run_graph(*id + 1, {1}, {3});
  b.add_run_graph(*id, {1, 1}, {4});
  Replies r;
  run(*s, b, r);
  EXPECT_TRUE(r.got.empty());  // runs are fire and forget
  auto wrong_shape = read(*s, 2);
  ASSERT_FALSE(wrong_shape.ok());
  EXPECT_NE(wrong_shape.status().message().find("the graph takes f32[4]"), std::string::npos)
      << wrong_shape.status().message();
  auto unknown = read(*s, 3);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_NE(unknown.status().message().find("unknown graph"), std::string::npos);
  auto arity = read(*s, 4);
  ASSERT_FALSE(arity.ok());
  EXPECT_NE(arity.status().message().find("takes 1 inputs"), std::string::npos)
      << arity.status().message();
}

TEST(SessionGraphs, GraphsArePerSession) {
  SessionTotals totals;
  auto a = open_cpu(totals);
  auto b = open_cpu(totals);
  auto id = register_graph(*a, chain(4, 1));
  ASSERT_TRUE(id.ok());
  proto::BatchWriter w;
  w.add_op(full_op(1, {4}, kF32, 1.0));
  w.add_run_graph(*id, {1}, {2});
  Replies r;
  run(*b, w, r);
  auto out = read(*b, 2);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("unknown graph"), std::string::npos);
  EXPECT_EQ(b->graph_count(), 0u);
}

TEST(SessionGraphs, ClosingASessionFreesItsGraphs) {
  SessionTotals totals;
  {
    auto s = open_cpu(totals);
    ASSERT_TRUE(register_graph(*s, chain(1 << 14, 2)).ok());
    proto::BatchWriter b;
    b.add_sync(1);
    Replies r;
    run(*s, b, r);
    EXPECT_GT(totals.bytes_held.load(), 0);
  }
  EXPECT_EQ(totals.bytes_held.load(), 0);
}

// Protocol 11: graphs named by the client (RegisterGraphAs) answer nothing; their runs use the
// client's ids, a refusal is read in the runs' outputs, and misuse (id 0, an id in use, the two
// kinds of registration mixed) is a session error that changes nothing.
TEST(SessionGraphs, ClientNamedGraphsRunByTheirIdsAndKeepTheirRefusals) {
  SessionTotals totals;
  auto s = open_cpu(totals, uint64_t{1} << 30, /*max_graph_ops=*/20);
  proto::BatchWriter b;
  ir::RandNormal in;
  in.out = {10};
  in.shape = {4};
  in.seed = 3;
  b.add_op(in);
  b.add_register_graph_as(41, chain(4, 5));  // 15 ops
  b.add_register_graph_as(42, chain(4, 2));  // 6 more: over the quota of 20
  b.add_run_graph(41, {10}, {11});
  b.add_run_graph(42, {10}, {12});
  b.add_run_graph(43, {10}, {13});  // never registered
  Replies r;
  run(*s, b, r);
  EXPECT_TRUE(r.got.empty());  // nothing answers
  EXPECT_EQ(s->graph_count(), 1u);
  ASSERT_TRUE(read(*s, 11).ok());
  auto refused = read(*s, 12);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("register_graph of graph 42"), std::string::npos)
      << refused.status().message();
  EXPECT_NE(refused.status().message().find("--max-graph-ops"), std::string::npos)
      << refused.status().message();
  auto unknown = read(*s, 13);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("unknown graph 43"), std::string::npos)
      << unknown.status().message();

  // Misuse: each is a session error, and the graph table stays as it was.
  for (const ir::GraphId id : {ir::GraphId{0}, ir::GraphId{41}, ir::GraphId{42}}) {
    proto::BatchWriter bad;
    bad.add_register_graph_as(id, chain(4, 1));
    Replies e;
    run(*s, bad, e);
    ASSERT_EQ(e.got.size(), 1u) << "graph id " << id;
    EXPECT_EQ(e.got[0].kind, proto::ServerMsg::kSessionError);
  }
  auto mixed = register_graph(*s, chain(4, 1));
  ASSERT_FALSE(mixed.ok());
  EXPECT_NE(mixed.status().message().find("not mixed"), std::string::npos)
      << mixed.status().message();
  EXPECT_EQ(s->graph_count(), 1u);
  EXPECT_EQ(s->graph_ops(), 15u);
}

// The other way round: a session that registered by RegisterGraph refuses RegisterGraphAs.
TEST(SessionGraphs, ServerNamedGraphsRefuseClientNamedOnes) {
  SessionTotals totals;
  auto s = open_cpu(totals);
  ASSERT_TRUE(register_graph(*s, chain(4, 1)).ok());
  proto::BatchWriter b;
  b.add_register_graph_as(5, chain(4, 1));
  Replies e;
  run(*s, b, e);
  ASSERT_EQ(e.got.size(), 1u);
  EXPECT_EQ(e.got[0].kind, proto::ServerMsg::kSessionError);
  EXPECT_EQ(s->graph_count(), 1u);
}

}  // namespace
}  // namespace tw::server
