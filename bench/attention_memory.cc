// Peak memory of one attention forward at long T: the fused op (ScaledDotProductAttention, which
// never holds the [T, T] scores) against the composed matmul + softmax + matmul. One variant per
// process, since the peak resident set size (getrusage's ru_maxrss) only grows:
//   tw_bench_attention_memory fused|composed [T] [heads] [d]
// prints the peak RSS before and after the forward and their difference, in MiB.
#include <sys/resource.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tensorwire/tensorwire.h"

namespace {

double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // KiB on Linux
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "fused";
  const int64_t t = argc > 2 ? std::atoll(argv[2]) : 2048;
  const int64_t h = argc > 3 ? std::atoll(argv[3]) : 8;
  const int64_t d = argc > 4 ? std::atoll(argv[4]) : 64;
  if ((mode != "fused" && mode != "composed") || t < 1 || h < 1 || d < 1) {
    std::fprintf(stderr, "usage: tw_bench_attention_memory fused|composed [T] [heads] [d]\n");
    return 2;
  }
  tw::set_num_threads(2);
  tw::manual_seed(1);
  tw::NoGradGuard no_grad;
  tw::Tensor q = tw::randn({1, h, t, d}), k = tw::randn({1, h, t, d}), v = tw::randn({1, h, t, d});
  // A first small run of each kernel, so one-time setup (thread pools, oneDNN) is in the baseline.
  {
    tw::Tensor s = tw::randn({1, 1, 64, d});
    tw::scaled_dot_product_attention(s, s, s, {}, true).to_vector<float>();
    (s.matmul(s.transpose(-2, -1)).softmax(-1).matmul(s)).to_vector<float>();
  }
  const double before = peak_rss_mib();
  tw::Tensor out;
  if (mode == "fused") {
    out = tw::scaled_dot_product_attention(q, k, v, {}, true);
  } else {
    tw::Tensor i = tw::arange(t).reshape({t, 1});
    tw::Tensor s = q.matmul(k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(d)));
    s = s.masked_fill(tw::arange(t).reshape({1, t}) > i, -INFINITY);
    out = s.softmax(-1).matmul(v);
  }
  out.device().sync();
  const double after = peak_rss_mib();
  std::printf(
      "%s T=%lld heads=%lld d=%lld: peak RSS %.1f MiB before, %.1f MiB after, +%.1f MiB "
      "(q, k, v and out are %.1f MiB each)\n",
      mode.c_str(), static_cast<long long>(t), static_cast<long long>(h), static_cast<long long>(d),
      before, after, after - before, static_cast<double>(h * t * d * 4) / (1 << 20));
  return 0;
}
