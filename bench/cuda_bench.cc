// The tensorwire side of the cuda backend's bench rows (scripts/device_check.sh --cuda, beside
// bench/cuda_torch.py on the same GPU): bf16 matmul 8192^3 (bf16 operands, an f32 result:
// docs/lowp.md) and f32 matmul 4096^3 on cuda:0, each the mean of --repeats runs queued
// back to back after a warm-up, in TFLOP/s; attention forward and backward [8,16,2048,128] in
// bf16, not causal and causal (ms, TFLOP/s); a registered graph of
// 200 small elementwise ops run op by op (TW_CUDA_GRAPHS=0) and as a CUDA Graph, in us per run.
// The LM step row prints why it is not run. Without a CUDA device it says so and exits 0.
//   tw_bench_cuda [--repeats N]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/registry.h"
#include "backend/upload.h"
#include "tensorwire/tensorwire.h"

namespace {

using Clock = std::chrono::steady_clock;

// Mean ms of `repeats` products a x b queued back to back and waited for once (the GPU's
// throughput, as torch's side times it), after one warm-up.
double time_matmul(const tw::Tensor& a, const tw::Tensor& b, int repeats) {
  a.matmul(b).device().sync();
  const auto t0 = Clock::now();
  for (int r = 0; r < repeats; ++r) (void)a.matmul(b);
  a.device().sync();
  return 1e3 * std::chrono::duration<double>(Clock::now() - t0).count() / repeats;
}

void row(const tw::Device& d, const char* name, int64_t n, tw::DType dt, int repeats) {
  const tw::Tensor a = tw::randn({n, n}).to(dt).to(d), b = tw::randn({n, n}).to(dt).to(d);
  const double ms = time_matmul(a, b, repeats);
  std::printf("%-28s %9.3f ms  %8.1f TFLOP/s\n", name, ms, 2.0 * n * n * n / (ms * 1e-3) / 1e12);
}

// Attention forward and backward, bf16 [8,16,2048,128] (causal or not), as bench/cuda_torch.py
// times torch's SDPA: ms per step and TFLOP/s counting 3.5 x 4 T^2 D per head (halved causal).
void attention_row(const tw::Device& d, int repeats, bool causal) {
  const int64_t b = 8, h = 16, t = 2048, dh = 128;
  auto make = [&] { return tw::randn({b, h, t, dh}).to(tw::kBF16).to(d).set_requires_grad(); };
  tw::Tensor q = make(), k = make(), v = make();
  auto step = [&] {
    tw::scaled_dot_product_attention(q, k, v, {}, causal).sum().backward();
    q.zero_grad();
    k.zero_grad();
    v.zero_grad();
  };
  step();
  d.sync();
  const auto t0 = Clock::now();
  for (int r = 0; r < repeats; ++r) step();
  d.sync();
  const double ms = 1e3 * std::chrono::duration<double>(Clock::now() - t0).count() / repeats;
  const double flops = 3.5 * 4.0 * b * h * t * t * dh * (causal ? 0.5 : 1.0);
  std::printf("%-28s %9.3f ms  %8.1f TFLOP/s\n",
              causal ? "attention fwd+bwd causal" : "attention fwd+bwd", ms,
              flops / (ms * 1e-3) / 1e12);
}

// A graph of 200 elementwise ops on [4096] f32 (x -> x*1.0001+0.5 alternately), 500 runs, on a
// backend made with TW_CUDA_GRAPHS set to `graphs`: us per run, after 3 warm-up runs.
double graph_us(bool graphs) {
  setenv("TW_CUDA_GRAPHS", graphs ? "1" : "0", 1);
  tw::Result<std::unique_ptr<tw::Backend>> made = tw::make_backend("cuda:0");
  if (!made.ok()) throw std::runtime_error(made.status().message());
  tw::Backend& be = **made;
  tw::ir::Graph g;
  g.input_ids = {1};
  g.inputs = {tw::TensorMeta{tw::Shape{4096}, tw::kF32}};
  tw::ir::TensorId last = 1;
  for (int i = 0; i < 200; ++i) {
    const tw::ir::TensorId out = 2 + static_cast<tw::ir::TensorId>(i);
    g.ops.push_back(
        tw::ir::BinaryScalar{i % 2 ? tw::ir::BinaryKind::kAdd : tw::ir::BinaryKind::kMul,
                             {last},
                             tw::ir::Scalar(i % 2 ? 0.5 : 1.0001),
                             false,
                             {out}});
    last = out;
  }
  g.output_ids = {last};
  tw::Result<tw::ir::GraphId> id = be.register_graph(g);
  if (!id.ok()) throw std::runtime_error(id.status().message());
  std::vector<float> x(4096, 1.f);
  tw::TensorData data;
  data.meta = {tw::Shape{4096}, tw::kF32};
  data.bytes = tw::Buffer::copy_of(x.data(), x.size() * 4);
  (void)be.execute(tw::from_host_of(std::move(data), 1000000));
  const tw::ir::TensorId in[] = {1000000};
  tw::ir::TensorId next = 1;
  auto run = [&] {
    const tw::ir::TensorId out[] = {next};
    const tw::Status st = be.run_graph(*id, in, out);
    if (!st.ok()) throw std::runtime_error(st.message());
    (void)be.drop(next++);
  };
  for (int r = 0; r < 3; ++r) run();
  (void)be.sync();
  const int runs = 500;
  const auto t0 = Clock::now();
  for (int r = 0; r < runs; ++r) run();
  (void)be.sync();
  return 1e6 * std::chrono::duration<double>(Clock::now() - t0).count() / runs;
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--repeats") repeats = std::atoi(argv[i + 1]);
  }
  try {
    const tw::Device d = tw::Device::local("cuda:0");
    std::printf("tensorwire on %s\n", d.str().c_str());
    row(d, "matmul bf16 8192^3 (f32 out)", 8192, tw::kBF16, repeats);
    row(d, "matmul f32 4096^3 (exact)", 4096, tw::kF32, repeats);
    attention_row(d, repeats, false);
    attention_row(d, repeats, true);
    const double eager = graph_us(false), replay = graph_us(true);
    std::printf("%-28s %9.1f us op by op, %9.1f us as a CUDA Graph (%.2fx)\n",
                "graph of 200 small ops", eager, replay, eager / replay);
    std::printf("%-28s not run: the step uses ops the cuda backend refuses (docs/cuda.md)\n",
                "LM step d=768 12 layers");
  } catch (const std::exception& e) {
    std::printf("tw_bench_cuda: %s\n", e.what());
  }
  return 0;
}
