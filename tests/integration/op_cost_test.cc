// Issue 52 §1, against real server processes: an op whose estimated cost is over --max-op-cost is
// refused naming the op, its cost and the flag (eagerly and at graph registration), and the
// session goes on; clients that send O(T^2) attention in a small frame and disconnect leave the
// server answering handshakes and other sessions, and their abandoned work stops; a session
// parked for resume runs none of its queued ops; and the costliest shapes the default limit
// admits leave the server responsive. Coarse bounds (seconds) only: the timing targets are bench
// rows (bench/remote_bench.cc, row x).
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "integration/raw_client.h"
#include "ir/cost.h"
#include "server/session.h"
#include "support/abandon.h"
#include "support/helpers.h"
#include "support/server_process.h"
#include "tensorwire/tensorwire.h"

namespace tw {
namespace {

namespace proto = protocol;
using testing::contains;
using testing::RawClient;
using testing::ServerProcess;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::unique_ptr<RawClient> raw_session(const std::string& url) {
  auto c = std::make_unique<RawClient>(url, 30000);
  auto w = c->hello();
  if (!w.ok() || w->kind != proto::ServerMsg::kWelcome) return nullptr;
  return c;
}

// Polls the server's session count (as `c` sees it) until it is `n`, for at most `limit`
// seconds; the seconds it took, or a negative number when it never was.
double wait_for_sessions(RawClient& c, uint32_t n, double limit) {
  const auto t0 = Clock::now();
  for (uint64_t req = 100; seconds_since(t0) < limit; ++req) {
    if (testing::server_stats(c, req).sessions == n) return seconds_since(t0);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return -1;
}

TEST(OpCost, AnOpOverTheLimitIsRefusedNamingItsCostAndTheFlag) {
  ServerProcess server;  // the default limit: about one second of work
  Device d = Device::remote(server.url());
  Tensor x = full({1, 262144, 4}, 1.0, kF32, d);
  Tensor y = scaled_dot_product_attention(x, x, x);
  const std::string e = testing::read_error(y);
  EXPECT_TRUE(contains(e, "scaled_dot_product_attention: estimated cost")) << e;
  EXPECT_TRUE(contains(e, "transcendentals")) << e;
  EXPECT_TRUE(contains(e, "tensorwire-server --max-op-cost")) << e;
  testing::expect_healthy(d, 3);  // the session goes on

  // A graph holding such an op is refused at registration, naming the op by its index.
  auto c = raw_session(server.url());
  ASSERT_TRUE(c);
  ir::Graph g;
  g.input_ids = {1};
  g.inputs = {TensorMeta{{1, 262144, 4}, kF32}};
  g.ops.push_back(ir::ScaledDotProductAttention{.query = {1},
                                                .key = {1},
                                                .value = {1},
                                                .mask = {},
                                                .causal = false,
                                                .scale = 0.5,
                                                .out = {2}});
  g.output_ids = {2};
  proto::BatchWriter b;
  b.add_register_graph(7, g);
  ASSERT_TRUE(c->send_frame(b.take()));
  auto m = c->read_message();
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_EQ(m->kind, proto::ServerMsg::kGraphResult);
  ASSERT_FALSE(m->graph.result.ok());
  const std::string ge = m->graph.result.status().message();
  EXPECT_TRUE(contains(ge, "graph op 0 (scaled_dot_product_attention)")) << ge;
  EXPECT_TRUE(contains(ge, "--max-op-cost")) << ge;
  EXPECT_EQ(m->graph.result.status().code(), StatusCode::kResourceExhausted);
}

// Four clients each send the 119-byte frame with attention over T = 131072 (about 1.7e10
// scores: tens of seconds of work here, admitted by --max-op-cost 0) and disconnect. New
// handshakes and an existing session are answered meanwhile, and with --resume-grace 0 the
// abandoned work stops: the sessions end (which they do only once their work has returned).
TEST(OpCost, AbandonedAttentionStopsAndTheServerStaysResponsive) {
  ServerProcess server({"--max-op-cost", "0", "--resume-grace", "0", "--workers", "2"});
  auto watch = raw_session(server.url());
  ASSERT_TRUE(watch);
  Device light = Device::remote(server.url());
  Tensor one = full({1}, 1.0, kF32, light);
  ASSERT_EQ((one + 1.0).item<float>(), 2.0f);
  ASSERT_EQ(testing::server_stats(*watch, 1).sessions, 2u);
  std::vector<std::thread> hostile;
  for (int i = 0; i < 4; ++i) {
    hostile.emplace_back(
        [&] { testing::send_and_go(server.url(), {testing::attention_frame(131072)}); });
  }
  for (std::thread& t : hostile) t.join();
  const auto closed = Clock::now();
  for (int i = 0; i < 5; ++i) {
    auto t0 = Clock::now();
    RawClient c(server.url(), 10000);
    auto w = c.hello();
    ASSERT_TRUE(w.ok()) << "a new connection got no Welcome: " << w.status().message();
    EXPECT_EQ(w->kind, proto::ServerMsg::kWelcome);
    EXPECT_LT(seconds_since(t0), 3.0) << "a handshake waited for the abandoned work";
    t0 = Clock::now();
    EXPECT_EQ((one + static_cast<double>(i)).item<float>(), 1.0f + static_cast<float>(i));
    EXPECT_LT(seconds_since(t0), 3.0) << "the light session waited for the abandoned work";
  }
  const double stopped = wait_for_sessions(*watch, 2, 10.0);
  EXPECT_GE(stopped, 0) << "the abandoned sessions' work did not stop";
  EXPECT_LT(seconds_since(closed), 12.0);
  testing::expect_healthy(light, 4);
}

// With the default grace, a resumable session whose connection drops is parked: the op running
// then finishes, and the batch queued behind it does not run (it waits for a resume).
TEST(OpCost, AParkedSessionRunsNoQueuedOp) {
  ServerProcess server({"--max-op-cost", "0"});
  auto watch = raw_session(server.url());
  ASSERT_TRUE(watch);
  const uint64_t ops_before = testing::server_stats(*watch, 1).ops_executed;
  proto::BatchWriter queued;  // ten ops: had it run, the count would show them
  for (ir::TensorId id = 10; id < 20; ++id) queued.add_op(testing::full_op(id, {4}, kF32, 2.0));
  queued.add_sync(2);
  // Attention over T = 16384 (2.7e8 scores, a fraction of a second): long enough for the second
  // frame to be queued behind it when the connection drops.
  testing::send_and_go(server.url(), {testing::attention_frame(16384), queued.take()},
                       /*resumable=*/true);
  ASSERT_GE(wait_for_sessions(*watch, 1, 30.0), 0) << "the session was not parked";
  // The first frame's Full and attention at most (what had started before the close was seen).
  EXPECT_LE(testing::server_stats(*watch, 2).ops_executed - ops_before, 2u)
      << "the parked session ran its queued frame";
}

// The costliest attention and matmul the default limit admits (shapes found from the cost
// model itself, just under one second of estimated work) run to the end, within a bound that
// says the estimate is not far below the truth, and a light session is served meanwhile; the
// next size up is refused.
TEST(OpCost, CostliestAdmittedShapesLeaveTheServerResponsive) {
  ServerProcess server;
  Device heavy = Device::remote(server.url());
  Device light = Device::remote(server.url());
  Tensor one = full({1}, 1.0, kF32, light);
  const ir::DeviceRate rate = server::device_rate("cpu");
  auto estimate = [&](const ir::Op& op, const std::vector<TensorMeta>& ins) {
    const ir::MetaLookup lookup = [&](ir::TensorId id) -> Result<TensorMeta> {
      return ins.at(static_cast<size_t>(id - 1));
    };
    Result<std::vector<TensorMeta>> outs = ir::infer(op, lookup);
    EXPECT_TRUE(outs.ok()) << outs.status().message();
    return ir::cost_seconds(ir::op_cost(op, lookup, *outs), rate);
  };
  // The largest size (a multiple of `step`) whose op is estimated under `limit` seconds.
  auto largest = [](int64_t step, double limit, const std::function<double(int64_t)>& secs) {
    int64_t n = step;
    while (secs(n * 2) < limit) n *= 2;
    for (int64_t s = n / 2; s >= step; s /= 2)
      if (secs(n + s) < limit) n += s;
    return n;
  };
  const ir::Op attn = ir::ScaledDotProductAttention{.query = {1},
                                                    .key = {1},
                                                    .value = {1},
                                                    .mask = {},
                                                    .causal = false,
                                                    .scale = 0.5,
                                                    .out = {2}};
  const int64_t t = largest(64, 0.95, [&](int64_t n) {
    return estimate(attn, {TensorMeta{{1, n, 4}, kF32}});
  });
  const ir::Op mm = ir::MatMul{.a = {1}, .b = {1}, .out = {2}};
  const int64_t n = largest(16, 0.95, [&](int64_t k) {
    return estimate(mm, {TensorMeta{{k, k}, kF32}});
  });
  struct Case {
    std::string what;
    std::function<Tensor(int64_t)> run;
    int64_t size;
  };
  const std::vector<Case> cases = {{"attention",
                                    [&](int64_t s) {
                                      Tensor x = full({1, s, 4}, 1.0, kF32, heavy);
                                      return scaled_dot_product_attention(x, x, x, {}, false, 0.5);
                                    },
                                    t},
                                   {"matmul",
                                    [&](int64_t s) {
                                      Tensor a = full({s, s}, 0.5, kF32, heavy);
                                      return a.matmul(a);
                                    },
                                    n}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what + " of size " + std::to_string(c.size));
    const auto t0 = Clock::now();
    Tensor y = c.run(c.size);
    heavy.flush();
    for (int i = 0; i < 3; ++i) {
      const auto r0 = Clock::now();
      EXPECT_EQ((one + 1.0).item<float>(), 2.0f);
      EXPECT_LT(seconds_since(r0), 2.0) << "the light session waited for the heavy op";
    }
    EXPECT_EQ(testing::read_error(y), "(no error)");
    EXPECT_LT(seconds_since(t0), 20.0) << "the cost model is far below what the op takes";
    Tensor over = c.run(c.size * 2);
    EXPECT_TRUE(contains(testing::read_error(over), "--max-op-cost"));
  }
}

}  // namespace
}  // namespace tw
