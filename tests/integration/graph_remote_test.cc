// Graphs on a real server process (protocol 2): registered through the remote sink, run by id,
// compared with the same ops sent eagerly; refusals at registration, per-session visibility,
// the graph-op quota, and a server killed in the middle of a long run.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <future>
#include <thread>

#include "api/sink.h"
#include "ir/ops.h"
#include "support/helpers.h"
#include "support/server_process.h"
#include "tensorwire/remote.h"
#include "tensorwire/tensorwire.h"

namespace tw {
namespace {

using testing::contains;
using testing::matmul;
using testing::ServerProcess;
using testing::unary;
using Clock = std::chrono::steady_clock;

ir::Op rand_normal(ir::TensorId out, Shape shape, uint64_t seed) {
  ir::RandNormal r;
  r.out = {out};
  r.shape = std::move(shape);
  r.seed = seed;
  return r;
}

// A two-layer MLP forward and a sum: x[32, 64], w1[64, 128], w2[128, 10] -> y[32, 10], s[].
ir::Graph mlp() {
  ir::Graph g;
  g.input_ids = {1, 2, 3};
  g.inputs = {{{32, 64}, kF32}, {{64, 128}, kF32}, {{128, 10}, kF32}};
  g.ops.push_back(matmul(1, 2, 4));
  g.ops.push_back(unary(ir::UnaryKind::kRelu, 4, 5));
  g.ops.push_back(matmul(5, 3, 6));
  g.ops.push_back(unary(ir::UnaryKind::kTanh, 6, 7));
  ir::Reduce sum;
  sum.kind = ir::ReduceKind::kSum;
  sum.x = {7};
  sum.out = {8};
  g.ops.push_back(sum);
  g.output_ids = {7, 8};
  return g;
}

std::vector<uint8_t> bytes_of(const TensorData& d) {
  const auto* p = d.bytes.as<const uint8_t>();
  return {p, p + d.bytes.size()};
}

TEST(GraphRemote, RegisterAndRunEqualsTheSameOpsEagerlyBitForBit) {
  ServerProcess server;
  Device d = Device::remote(server.url());
  auto& sink = *d.sink();
  ASSERT_EQ(sink.kind(), Device::Kind::kRemote);
  const ir::TensorId x = sink.new_id(), w1 = sink.new_id(), w2 = sink.new_id();
  ASSERT_TRUE(sink.submit(rand_normal(x, {32, 64}, 1)).ok());
  ASSERT_TRUE(sink.submit(rand_normal(w1, {64, 128}, 2)).ok());
  ASSERT_TRUE(sink.submit(rand_normal(w2, {128, 10}, 3)).ok());
  const ir::Graph g = mlp();
  auto id = sink.register_graph(g);
  ASSERT_TRUE(id.ok()) << id.status().message();
  // Two runs (the second on the arena the first handed back), and the ops one by one.
  std::vector<ir::TensorId> runs[2];
  for (auto& outs : runs) {
    outs = {sink.new_id(), sink.new_id()};
    const std::vector<ir::TensorId> ins = {x, w1, w2};
    ASSERT_TRUE(sink.run_graph(*id, ins, outs).ok());
  }
  std::unordered_map<ir::TensorId, ir::TensorId> eager = {{1, x}, {2, w1}, {3, w2}};
  for (ir::Op op : g.ops) {
    ir::remap_op(op, [&](ir::TensorId t) {
      auto [it, fresh] = eager.emplace(t, 0);
      if (fresh) it->second = sink.new_id();
      return it->second;
    });
    ASSERT_TRUE(sink.submit(op).ok());
  }
  for (size_t k = 0; k < 2; ++k) {
    auto want = sink.read(eager.at(g.output_ids[k]));
    ASSERT_TRUE(want.ok()) << want.status().message();
    for (auto& outs : runs) {
      auto got = sink.read(outs[k]);
      ASSERT_TRUE(got.ok()) << got.status().message();
      EXPECT_EQ(got->meta, want->meta);
      EXPECT_EQ(bytes_of(*got), bytes_of(*want)) << "output " << k;
    }
  }
  // One task per run, whatever the op count: the stats say the server ran every op.
  EXPECT_GE(remote_stats(d).ops_executed, 3 + 3 * g.ops.size());
}

TEST(GraphRemote, ABadGraphIsRefusedAtRegistrationNamingTheOp) {
  ServerProcess server;
  Device d = Device::remote(server.url());
  ir::Graph g = mlp();
  g.inputs[2] = {{100, 10}, kF32};  // w2 no longer fits relu(x w1) [32, 128]
  auto id = d.sink()->register_graph(g);
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(id.status().message(), "graph op 2 (matmul)")) << id.status().message();
  // The session goes on.
  EXPECT_EQ((ones({3}, kF32, d) * 2.0).sum().item<float>(), 6.0f);
}

TEST(GraphRemote, AGraphIsInvisibleToAnotherSession) {
  ServerProcess server;
  Device a = Device::remote(server.url());
  Device b = Device::remote(server.url());
  auto id = a.sink()->register_graph(mlp());
  ASSERT_TRUE(id.ok()) << id.status().message();
  auto& sb = *b.sink();
  const std::vector<ir::TensorId> ins = {sb.new_id(), sb.new_id(), sb.new_id()};
  ASSERT_TRUE(sb.submit(rand_normal(ins[0], {32, 64}, 1)).ok());
  ASSERT_TRUE(sb.submit(rand_normal(ins[1], {64, 128}, 2)).ok());
  ASSERT_TRUE(sb.submit(rand_normal(ins[2], {128, 10}, 3)).ok());
  const std::vector<ir::TensorId> outs = {sb.new_id(), sb.new_id()};
  ASSERT_TRUE(sb.run_graph(*id, ins, outs).ok());  // fire and forget
  auto r = sb.read(outs[0]);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(contains(r.status().message(), "unknown graph")) << r.status().message();
}

// The three inputs of mlp(), made on `sink`.
std::vector<ir::TensorId> mlp_inputs(detail::Sink& sink) {
  const std::vector<ir::TensorId> ins = {sink.new_id(), sink.new_id(), sink.new_id()};
  EXPECT_TRUE(sink.submit(rand_normal(ins[0], {32, 64}, 1)).ok());
  EXPECT_TRUE(sink.submit(rand_normal(ins[1], {64, 128}, 2)).ok());
  EXPECT_TRUE(sink.submit(rand_normal(ins[2], {128, 10}, 3)).ok());
  return ins;
}

// Protocol 11: a refusal only the server can make (its graph-op quota) comes back in the outputs
// of the runs that name the graph (the registration did not wait), naming the limit and its
// flag; the session goes on, and the graph registered before still runs.
TEST(GraphRemote, AGraphOverTheOpQuotaIsRefusedInItsRunsOutputs) {
  ServerProcess server({"--max-graph-ops", "8"});
  Device d = Device::remote(server.url());
  auto& sink = *d.sink();
  auto first = sink.register_graph(mlp());   // 5 ops
  auto second = sink.register_graph(mlp());  // 10
  ASSERT_TRUE(first.ok() && second.ok());
  const std::vector<ir::TensorId> ins = mlp_inputs(sink);
  const std::vector<ir::TensorId> refused = {sink.new_id(), sink.new_id()};
  const std::vector<ir::TensorId> ran = {sink.new_id(), sink.new_id()};
  ASSERT_TRUE(sink.run_graph(*second, ins, refused).ok());
  ASSERT_TRUE(sink.run_graph(*first, ins, ran).ok());
  auto r = sink.read(refused[1]);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(contains(r.status().message(), "--max-graph-ops")) << r.status().message();
  EXPECT_TRUE(contains(r.status().message(), "limit of 8")) << r.status().message();
  EXPECT_TRUE(contains(r.status().message(), "register_graph of graph " + std::to_string(*second)))
      << r.status().message();
  EXPECT_TRUE(sink.read(ran[1]).ok());
  EXPECT_EQ((ones({3}, kF32, d) * 2.0).sum().item<float>(), 6.0f);
}

// Protocol 11: registering a graph costs no round trip; the registration and the runs after it
// travel together, and the runs compute what the graph says.
TEST(GraphRemote, RegistrationIsPipelinedWithTheRunsAfterIt) {
  ServerProcess server;
  Device d = Device::remote(server.url());
  auto& sink = *d.sink();
  const std::vector<ir::TensorId> ins = mlp_inputs(sink);
  d.sync();
  const WireCounters before = wire_counters(d);
  std::vector<std::vector<ir::TensorId>> outs;
  for (int i = 0; i < 3; ++i) {  // three graphs, each registered and run at once
    auto id = sink.register_graph(mlp());
    ASSERT_TRUE(id.ok()) << id.status().message();
    outs.push_back({sink.new_id(), sink.new_id()});
    ASSERT_TRUE(sink.run_graph(*id, ins, outs.back()).ok());
  }
  const WireCounters after = wire_counters(d);
  EXPECT_EQ(after.round_trips, before.round_trips);
  auto want = sink.read(outs[0][1]);
  ASSERT_TRUE(want.ok()) << want.status().message();
  for (const auto& o : outs) {
    auto got = sink.read(o[1]);
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_EQ(bytes_of(*got), bytes_of(*want));
  }
  EXPECT_GE(remote_stats(d).ops_executed, 3 + 3 * mlp().ops.size());
}

TEST(GraphRemote, AServerKilledDuringALongRunFailsTheWaiterPromptly) {
  auto server = std::make_unique<ServerProcess>();
  const std::string url = server->url();
  Device d = Device::remote(url);
  auto& sink = *d.sink();
  // 2,000 chained 512x512 matmuls: seconds of work in one run, even on a fast idle machine
  // (256x256 ones can finish within the 300 ms the waiter is given).
  ir::Graph g;
  g.input_ids = {1};
  g.inputs = {{{512, 512}, kF32}};
  for (ir::TensorId i = 1; i <= 2000; ++i) g.ops.push_back(matmul(i, 1, i + 1));
  g.output_ids = {2001};
  auto id = sink.register_graph(g);
  ASSERT_TRUE(id.ok()) << id.status().message();
  const ir::TensorId x = sink.new_id(), y = sink.new_id();
  ASSERT_TRUE(sink.submit(rand_normal(x, {512, 512}, 1)).ok());
  const std::vector<ir::TensorId> ins = {x}, outs = {y};
  ASSERT_TRUE(sink.run_graph(*id, ins, outs).ok());
  auto waiter = std::async(std::launch::async, [&] { return sink.read(y).status(); });
  ASSERT_EQ(waiter.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout)
      << "the run finished before the server could be killed";
  const auto killed = Clock::now();
  server->kill_hard();
  ASSERT_EQ(waiter.wait_for(std::chrono::seconds(2)), std::future_status::ready)
      << "the waiter hangs after the server died";
  const Status st = waiter.get();
  EXPECT_LT(Clock::now() - killed, std::chrono::seconds(2));
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.message();
  EXPECT_TRUE(contains(st.message(), url) && contains(st.message(), "closed")) << st.message();
}

}  // namespace
}  // namespace tw
