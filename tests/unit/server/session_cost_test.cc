// Issue 52 §1 on a server::Session driven with no socket: the op cost estimate (ir/cost.h) against
// --max-op-cost, long work handed to the output and the session parked meanwhile, and a
// cancelled long op's outputs poisoned.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "core/cancel.h"
#include "ir/cost.h"
#include "protocol/messages.h"
#include "server/session.h"
#include "support/frames.h"
#include "support/helpers.h"
#include "support/session_replies.h"

namespace tw::server {
namespace {

namespace proto = protocol;
using testing::contains;
using testing::full_op;

ir::Op attention(ir::TensorId x, ir::TensorId out) {
  return ir::ScaledDotProductAttention{.query = {x},
                                       .key = {x},
                                       .value = {x},
                                       .mask = {},
                                       .causal = false,
                                       .scale = 0.5,
                                       .out = {out}};
}

// What a server's Session does with a batch.
void run(Session& s, proto::BatchWriter& b, server::SessionOutput& out) {
  std::vector<uint8_t> bytes = testing::flatten(b.take());
  std::vector<proto::Task> tasks;
  Status st = proto::decode_batch(Buffer::copy_of(bytes.data(), bytes.size()), tasks);
  ASSERT_TRUE(st.ok()) << st.message();
  s.run(tasks, st, out);
}

std::unique_ptr<Session> open(SessionTotals& totals, double max_seconds) {
  auto s = Session::open(1, "cpu", uint64_t{1} << 30, totals, uint64_t{1} << 18,
                         OpLimits{max_seconds, device_rate("cpu")});
  EXPECT_TRUE(s.ok()) << s.status().message();
  return std::move(s).value();
}

// Keeps the long work it is handed instead of running it (a connection posts it to LongWork).
struct Deferring : testing::Replies {
  std::vector<std::function<void()>> work;
  bool runs_long() const override { return true; }
  void run_long(std::function<void()> w) override { work.push_back(std::move(w)); }
};

TEST(OpCost, EstimatesCountWhatTheKernelsDo) {
  const std::vector<TensorMeta> ins = {TensorMeta{{1, 1000, 4}, kF32}, TensorMeta{{30, 40}, kF32},
                                       TensorMeta{{40, 50}, kF32}};
  const ir::MetaLookup lookup = [&](ir::TensorId id) -> Result<TensorMeta> {
    return ins.at(static_cast<size_t>(id - 1));
  };
  auto cost = [&](const ir::Op& op) {
    Result<std::vector<TensorMeta>> outs = ir::infer(op, lookup);
    EXPECT_TRUE(outs.ok()) << outs.status().message();
    return ir::op_cost(op, lookup, *outs);
  };
  // Attention: one exp per score (1000 x 1000), and 2 (d + dv) flops a score at least.
  const ir::OpCost a = cost(attention(1, 9));
  EXPECT_EQ(a.transcendentals, 1e6);
  EXPECT_GE(a.flops, 1e6 * 2 * (4 + 4));
  // Matmul: 2 M N K.
  EXPECT_EQ(cost(testing::matmul(2, 3, 9)).flops, 2.0 * 30 * 50 * 40);
  // Exp evaluates one transcendental per element, neg none; both read and write 4 bytes each.
  const ir::OpCost e = cost(testing::unary(ir::UnaryKind::kExp, 2, 9));
  EXPECT_EQ(e.transcendentals, 1200);
  EXPECT_EQ(e.bytes, 2 * 1200 * 4);
  EXPECT_EQ(cost(testing::unary(ir::UnaryKind::kNeg, 2, 9)).transcendentals, 0);
  // O(T^2) from O(T): twice the keys, four times the exps.
  const std::vector<TensorMeta> twice = {TensorMeta{{1, 2000, 4}, kF32}};
  const ir::MetaLookup lookup2 = [&](ir::TensorId) -> Result<TensorMeta> { return twice[0]; };
  const ir::Op op2 = attention(1, 9);
  EXPECT_EQ(ir::op_cost(op2, lookup2, *ir::infer(op2, lookup2)).transcendentals, 4e6);
}

TEST(OpCost, AnOpOverTheLimitIsRefusedAndTheSessionGoesOn) {
  SessionTotals totals;
  auto s = open(totals, 1e-6);  // a microsecond: 100,000 f32 elements are over it
  testing::Replies out;
  proto::BatchWriter b;
  b.add_op(full_op(1, {100000}, kF32, 1.0));
  b.add_read(5, 1);
  b.add_op(full_op(2, {4}, kF32, 2.0));
  b.add_read(6, 2);
  run(*s, b, out);
  ASSERT_EQ(out.got.size(), 2u);
  const Status& refused = out.got[0].status();
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(contains(refused.message(), "full: estimated cost")) << refused.message();
  EXPECT_TRUE(contains(refused.message(), "tensorwire-server --max-op-cost")) << refused.message();
  EXPECT_TRUE(out.got[1].status().ok()) << out.got[1].status().message();
  EXPECT_EQ(totals.metrics.errors(ErrorKind::kOverCost), 1u);
  // A graph holding such an op is refused at registration.
  ir::Graph g;
  g.input_ids = {1};
  g.inputs = {TensorMeta{{4}, kF32}};
  g.ops.push_back(full_op(3, {100000}, kF32, 1.0));
  g.output_ids = {3};
  b.add_register_graph(7, g);
  run(*s, b, out);
  ASSERT_EQ(out.got.size(), 3u);
  EXPECT_TRUE(contains(out.got[2].status().message(), "register_graph: graph op 0 (full)"))
      << out.got[2].status().message();
}

TEST(OpCost, LongWorkParksTheSessionUntilItHasRun) {
  SessionTotals totals;
  auto s = open(totals, 0);
  Deferring out;
  proto::BatchWriter b;
  b.add_op(full_op(1, {1, 4096, 4}, kF32, 1.0));
  b.add_op(attention(1, 2));  // 1.7e7 scores: well over OpLimits::kLongSeconds
  b.add_read(5, 2);
  std::vector<uint8_t> bytes = testing::flatten(b.take());
  Batch batch;
  batch.frame = Buffer::copy_of(bytes.data(), bytes.size());
  batch.decoder = proto::BatchDecoder(batch.frame);
  EXPECT_FALSE(s->run(batch, out, Session::Clock::time_point::max()));
  EXPECT_TRUE(s->parked());
  ASSERT_EQ(out.work.size(), 1u);
  EXPECT_TRUE(out.got.empty());  // the read waits for the attention
  out.work[0]();
  s->finish_long();
  EXPECT_FALSE(s->parked());
  EXPECT_TRUE(s->run(batch, out, Session::Clock::time_point::max()));
  ASSERT_EQ(out.got.size(), 1u);
  EXPECT_TRUE(out.got[0].status().ok()) << out.got[0].status().message();
}

TEST(OpCost, ACancelledLongOpIsPoisoned) {
  SessionTotals totals;
  auto s = open(totals, 0);
  Deferring out;
  proto::BatchWriter b;
  b.add_op(full_op(1, {1, 4096, 4}, kF32, 1.0));
  b.add_op(attention(1, 2));
  b.add_read(5, 2);
  std::vector<uint8_t> bytes = testing::flatten(b.take());
  Batch batch;
  batch.frame = Buffer::copy_of(bytes.data(), bytes.size());
  batch.decoder = proto::BatchDecoder(batch.frame);
  EXPECT_FALSE(s->run(batch, out, Session::Clock::time_point::max()));
  ASSERT_EQ(out.work.size(), 1u);
  std::atomic<bool> cancel{true};
  {
    const CancelScope scope(&cancel);
    out.work[0]();
  }
  s->finish_long();
  EXPECT_TRUE(s->run(batch, out, Session::Clock::time_point::max()));
  ASSERT_EQ(out.got.size(), 1u);
  EXPECT_TRUE(contains(out.got[0].status().message(), "scaled_dot_product_attention: cancelled"))
      << out.got[0].status().message();
}

}  // namespace
}  // namespace tw::server
