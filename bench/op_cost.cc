// The CPU work of one small op, counted in instructions by bench/op_cost.sh under callgrind
// (which counts the same for the same binary and inputs whatever else the machine is doing, so
// the figures compare across commits where timings on this shared VM do not).
//   tw_bench_op_cost local N        N chained 1-element adds on the CPU device, one read at the end
//   tw_bench_op_cost remote URL N   N round trips of a 1-element add and its read (bench-remote a)
// Run twice with different N, the difference divided by the difference of N is the cost of one
// op (or round trip) without start-up.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tensorwire/tensorwire.h"

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "local" && argc == 3) {
    const long n = std::atol(argv[2]);
    tw::Tensor x = tw::full({1}, 0.0, tw::kF32);
    for (long i = 0; i < n; ++i) x = x + 1.0;
    std::printf("%.0f\n", x.item<float>());
    return 0;
  }
  if (mode == "remote" && argc == 4) {
    const long n = std::atol(argv[3]);
    tw::Device d = tw::Device::remote(argv[2]);
    tw::Tensor x = tw::full({1}, 1.0, tw::kF32, d);
    double sum = 0;
    for (long i = 0; i < n; ++i) sum += (x + 1.0).item<float>();
    std::printf("%.0f\n", sum);
    return 0;
  }
  std::fprintf(stderr, "usage: tw_bench_op_cost local N | remote URL N\n");
  return 2;
}
