// The server's counters and their Prometheus text, without a server: what a scrape reads.
#include "server/metrics.h"

#include <gtest/gtest.h>

#include <thread>

namespace tw::server {
namespace {

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos;
}

TEST(ServerMetrics, HistogramBucketsAreCumulativeWithTheCountInInf) {
  ServerMetrics m;
  m.op_ran(ir::OpCode::kMatMul, 1'000);          // on the 1 µs bound: its bucket (le is inclusive)
  m.op_ran(ir::OpCode::kMatMul, 1'500);          // the 2 µs bucket
  m.op_ran(ir::OpCode::kMatMul, 3'000'000'000);  // past every bound: +Inf only
  std::string t = metrics_text({}, m);
  EXPECT_TRUE(has_line(t, "# TYPE tensorwire_op_latency_seconds histogram")) << t;
  EXPECT_TRUE(has_line(t, "tensorwire_op_latency_seconds_bucket{op=\"MatMul\",le=\"1e-06\"} 1"))
      << t;
  EXPECT_TRUE(has_line(t, "tensorwire_op_latency_seconds_bucket{op=\"MatMul\",le=\"2e-06\"} 2"))
      << t;
  EXPECT_TRUE(has_line(t, "tensorwire_op_latency_seconds_bucket{op=\"MatMul\",le=\"1\"} 2")) << t;
  EXPECT_TRUE(has_line(t, "tensorwire_op_latency_seconds_bucket{op=\"MatMul\",le=\"+Inf\"} 3"))
      << t;
  EXPECT_TRUE(has_line(t, "tensorwire_op_latency_seconds_count{op=\"MatMul\"} 3")) << t;
  EXPECT_EQ(t.find("op=\"Conv2d\""), std::string::npos) << "an op never run has no series";
}

TEST(ServerMetrics, OpTimerTimesOnlyWhenEnabledAndCountsFailures) {
  ServerMetrics m;
  ir::Op op = ir::Softmax{};
  {
    OpTimer off(m);
    EXPECT_TRUE(off.run(op, [] { return Status::OK(); }).ok());
  }
  EXPECT_EQ(m.latency(ir::OpCode::kSoftmax).count, 0u) << "timing is off until enabled";
  m.enable_timing();
  OpTimer on(m);
  (void)on.run(op, [] {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return Status::OK();
  });
  EXPECT_EQ(m.latency(ir::OpCode::kSoftmax).count, 0u)
      << "kept by the timer until a reply or the batch's end";
  on.interrupt();
  EXPECT_EQ(m.latency(ir::OpCode::kSoftmax).count, 1u) << "a task of another kind hands them over";
  (void)on.run(op, [] { return resource_exhausted("quota"); });
  (void)on.run(op, [] { return invalid_argument("bad"); });
  (void)on.run(ir::Op(ir::MatMul{}), [] { return Status::OK(); });
  on.flush();
  EXPECT_EQ(m.latency(ir::OpCode::kMatMul).count, 1u);
  ServerMetrics::Latency l = m.latency(ir::OpCode::kSoftmax);
  EXPECT_EQ(l.count, 3u);
  EXPECT_GE(l.sum_ns, 2'000'000u) << "the sleeping op's 2 ms, on the calibrated clock";
  EXPECT_LT(l.sum_ns, 1'000'000'000u);
  EXPECT_EQ(m.errors(ErrorKind::kOverQuota), 1u);
  EXPECT_EQ(m.errors(ErrorKind::kOpFailed), 1u);
}

// A session's timer times a fast op kind one run in OpSampling::kEvery and counts the runs
// between in the last timed run's bucket; a slow kind is timed every run. Every run counts.
TEST(ServerMetrics, FastOpsAreTimedOneRunInSeveralAndAllCounted) {
  ServerMetrics m;
  m.enable_timing();
  OpSampling sampling;
  const ir::Op fast = ir::Unary{}, slow = ir::Softmax{};
  const auto sleep_1ms = [] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return Status::OK();
  };
  {
    OpTimer timer(m, &sampling);
    (void)timer.run(fast, [] { return Status::OK(); });  // timed: fast, so the next are not
    for (uint32_t i = 1; i < OpSampling::kEvery; ++i) (void)timer.run(fast, sleep_1ms);
  }
  ServerMetrics::Latency l = m.latency(ir::OpCode::kUnary);
  EXPECT_EQ(l.count, OpSampling::kEvery);
  EXPECT_LT(l.sum_ns, 1'000'000u) << "the runs after a fast one were timed";
  {
    OpTimer timer(m, &sampling);       // (the sampling carries over to the next batch)
    (void)timer.run(fast, sleep_1ms);  // timed again: slow now, so the next is timed too
    (void)timer.run(fast, sleep_1ms);
  }
  l = m.latency(ir::OpCode::kUnary);
  EXPECT_EQ(l.count, OpSampling::kEvery + 2);
  EXPECT_GE(l.sum_ns, 2'000'000u) << "the two runs that slept were not both timed";
  {
    OpTimer timer(m, &sampling);
    for (int i = 0; i < 3; ++i) (void)timer.run(slow, sleep_1ms);
  }
  l = m.latency(ir::OpCode::kSoftmax);
  EXPECT_EQ(l.count, 3u);
  EXPECT_GE(l.sum_ns, 3'000'000u) << "a slow kind is timed every run";
}

TEST(ServerMetrics, SessionsDevicesAndFeatureCountersAreExposed) {
  ServerMetrics m;
  m.graph_registered();
  m.graph_run();
  m.graph_run();
  m.transfer(Direction::kOut, 4096);
  m.pull_retried(300, 0);
  m.pull_retried(0, 700);
  m.error(error_kind_of(protocol::RefuseReason::kUnauthorized));
  ServerView v;
  v.stats.sessions = 1;
  v.devices = {{"cpu:0", "cpu", 1024, 0}};
  v.sessions = {{5, 0, 640, 12, 3}};
  std::string t = metrics_text(v, m);
  EXPECT_TRUE(has_line(t, "tensorwire_sessions 1")) << t;
  EXPECT_TRUE(has_line(t,
                       "tensorwire_device_session_memory_limit_bytes{device=\"0\",name=\"cpu:0\","
                       "backend=\"cpu\"} 1024"))
      << t;
  EXPECT_TRUE(has_line(t, "tensorwire_session_memory_bytes{device=\"0\",session=\"5\"} 640")) << t;
  EXPECT_TRUE(has_line(t, "tensorwire_session_ops_total{device=\"0\",session=\"5\"} 12")) << t;
  EXPECT_TRUE(has_line(t, "tensorwire_session_queued_batches{device=\"0\",session=\"5\"} 3")) << t;
  EXPECT_TRUE(has_line(t, "tensorwire_graphs_registered_total 1")) << t;
  EXPECT_TRUE(has_line(t, "tensorwire_graph_runs_total 2")) << t;
  EXPECT_TRUE(has_line(t, "tensorwire_transfer_bytes_total{direction=\"out\"} 4096")) << t;
  EXPECT_TRUE(has_line(t, "tensorwire_errors_total{kind=\"refused_unauthorized\"} 1")) << t;
  EXPECT_TRUE(has_line(t, "tensorwire_pull_retries_total 2")) << t;
  EXPECT_TRUE(has_line(t, "tensorwire_pull_bytes_kept_total 300")) << t;
  EXPECT_TRUE(has_line(t, "tensorwire_pull_bytes_refetched_total 700")) << t;
}

}  // namespace
}  // namespace tw::server
