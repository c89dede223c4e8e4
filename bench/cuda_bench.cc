// The tensorwire side of the cuda backend's bench rows (scripts/device_check.sh --cuda, beside
// bench/cuda_torch.py on the same GPU): bf16 matmul 8192^3 (bf16 operands, an f32 result:
// docs/lowp.md) and f32 matmul 4096^3 on cuda:0, each the mean of --repeats runs queued
// back to back after a warm-up, in TFLOP/s. Rows whose ops the backend does not run yet (attention,
// the LM step) print the refusal instead of a number. Without a CUDA device it says so and exits 0.
//   tw_bench_cuda [--repeats N]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

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
    std::printf(
        "%-28s not run: ScaledDotProductAttention is not supported by the cuda backend "
        "yet (docs/cuda.md)\n",
        "attention [8,16,2048,128]");
    std::printf("%-28s not run: the step uses ops the cuda backend refuses (docs/cuda.md)\n",
                "LM step d=768 12 layers");
  } catch (const std::exception& e) {
    std::printf("tw_bench_cuda: %s\n", e.what());
  }
  return 0;
}
