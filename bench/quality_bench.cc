// Issue 53's quality rows (`make bench-lowp`, bench/lowp_bench.sh; docs/lowp.md): the KJV
// character model of apps/train_lm.cc trained on the first 90% of the text, then
//  - its held-out perplexity (the last 10%, never trained on) in f32 and with its Linear weights
//    packed as Q8_0 and Q4_0 (tw::nn::quantize, weight-only), against the targets q8 within 2%,
//    q4 within 10% of f32's;
//  - the same model trained from the same initial parameters and batches under
//    tw::autocast(kBF16): step time against f32 in interleaved rounds (each side --round-steps
//    steps per round, the order swapped every round; per side the median of its per-step times,
//    and the median of the per-round ratios), and the loss after --steps steps (the mean of the
//    last 10) against f32's, with its own held-out perplexity beside.
//
//   tw_bench_quality [--threads N] [--steps N] [--round-steps N] [--layers N] [--embd N]
//                    [--heads N] [--batch N] [--context N] [--data PATH]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/dnnl_util.h"
#include "lm/lm.h"

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// exp(mean cross-entropy) over every position of the non-overlapping windows of `tokens`
// (context + 1 tokens each: inputs and next-token targets), 32 windows a forward.
double perplexity(tw::nn::GPT& model, const std::vector<int64_t>& tokens, int64_t context) {
  tw::NoGradGuard no_grad;
  model.eval();
  const int64_t windows = (static_cast<int64_t>(tokens.size()) - 1) / context;
  double sum = 0;  // of per-position losses
  constexpr int64_t kBatch = 32;
  for (int64_t w0 = 0; w0 < windows; w0 += kBatch) {
    const int64_t b = std::min(kBatch, windows - w0);
    std::vector<int64_t> x, y;
    for (int64_t w = w0; w < w0 + b; ++w) {
      x.insert(x.end(), tokens.begin() + w * context, tokens.begin() + (w + 1) * context);
      y.insert(y.end(), tokens.begin() + w * context + 1, tokens.begin() + (w + 1) * context + 1);
    }
    const tw::Tensor loss = model.loss(tw::from_vector<int64_t>(x, {b, context}),
                                       tw::from_vector<int64_t>(y, {b, context}));
    sum += static_cast<double>(loss.item<float>()) * static_cast<double>(b * context);
  }
  model.train();
  return std::exp(sum / static_cast<double>(windows * context));
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2;
  int64_t steps = 600, round_steps = 20, layers = 4, embd = 192, heads = 4, batch = 16,
          context = 128;
  std::string data;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i], v = argv[i + 1];
    const int64_t n = std::atoll(v.c_str());
    if (f == "--threads") {
      threads = static_cast<int>(std::max<int64_t>(1, n));
    } else if (f == "--steps") {
      steps = std::max<int64_t>(10, n);
    } else if (f == "--round-steps") {
      round_steps = std::max<int64_t>(1, n);
    } else if (f == "--layers") {
      layers = std::max<int64_t>(1, n);
    } else if (f == "--embd") {
      embd = std::max<int64_t>(32, n);
    } else if (f == "--heads") {
      heads = std::max<int64_t>(1, n);
    } else if (f == "--batch") {
      batch = std::max<int64_t>(1, n);
    } else if (f == "--context") {
      context = std::max<int64_t>(2, n);
    } else if (f == "--data") {
      data = v;
    } else {
      std::fprintf(stderr,
                   "usage: tw_bench_quality [--threads N] [--steps N] [--round-steps N] "
                   "[--layers N] [--embd N] [--heads N] [--batch N] [--context N] "
                   "[--data PATH]\n");
      return 2;
    }
  }
  try {
    tw::set_num_threads(threads);
    const std::string path = data.empty() ? tw::lm::default_path() : data;
    const std::string text = tw::lm::load_text(path);
    const tw::lm::Vocab vocab(text);
    const std::vector<int64_t> all = vocab.encode(text);
    const auto cut = static_cast<int64_t>(all.size()) * 9 / 10;
    const std::vector<int64_t> train(all.begin(), all.begin() + cut);
    const std::vector<int64_t> held(all.begin() + cut, all.end());
    const tw::nn::GPTConfig cfg{.vocab_size = vocab.size(),
                                .context = context,
                                .n_layer = layers,
                                .n_head = heads,
                                .n_embd = embd};
    constexpr uint64_t kSeed = 1;
    constexpr double kLr = 1e-3;
    auto make = [&] {
      tw::manual_seed(kSeed);  // the same initial parameters for every model
      return std::make_unique<tw::nn::GPT>(cfg);
    };
    auto f32 = make(), bf16 = make();
    tw::lm::Trainer tf(*f32, kLr, train, batch, kSeed), tb(*bf16, kLr, train, batch, kSeed);

    // Interleaved rounds: round r runs steps [r * round_steps, (r + 1) * round_steps) on each
    // side, f32 first in even rounds. Each step's loss is read (a sync) as it ends.
    std::vector<double> loss_f(static_cast<size_t>(steps)), loss_b(static_cast<size_t>(steps));
    std::vector<double> ms_f, ms_b, ratio;
    auto run = [&](tw::lm::Trainer& t, bool autocast, std::vector<double>& losses, int64_t s0,
                   int64_t s1) {
      const auto t0 = Clock::now();
      for (int64_t s = s0; s < s1; ++s) {
        if (autocast) {
          auto amp = tw::autocast(tw::kBF16);
          losses[static_cast<size_t>(s)] = t.step(s).item<float>();
        } else {
          losses[static_cast<size_t>(s)] = t.step(s).item<float>();
        }
      }
      return 1e3 * std::chrono::duration<double>(Clock::now() - t0).count() /
             static_cast<double>(s1 - s0);
    };
    const auto start = Clock::now();
    for (int64_t r = 0; r * round_steps < steps; ++r) {
      const int64_t s0 = r * round_steps, s1 = std::min(steps, s0 + round_steps);
      double f = 0, b = 0;
      if (r % 2 == 0) {
        f = run(tf, false, loss_f, s0, s1);
        b = run(tb, true, loss_b, s0, s1);
      } else {
        b = run(tb, true, loss_b, s0, s1);
        f = run(tf, false, loss_f, s0, s1);
      }
      if (r == 0) continue;  // the first round records the graphs: not timed
      ms_f.push_back(f);
      ms_b.push_back(b);
      ratio.push_back(f / b);
    }
    const double train_s = std::chrono::duration<double>(Clock::now() - start).count();
    auto last_mean = [&](const std::vector<double>& l, int64_t at) {
      const int64_t from = std::max<int64_t>(0, at - 10);
      double s = 0;
      for (int64_t i = from; i < at; ++i) s += l[static_cast<size_t>(i)];
      return s / static_cast<double>(at - from);
    };

    // Held-out perplexity: f32, and copies of the f32 model with packed weights.
    std::map<std::string, tw::Tensor> state;
    for (const auto& [name, t] : f32->state_dict()) state.emplace(name, t);
    auto packed = [&](const char* scheme) {
      auto m = std::make_unique<tw::nn::GPT>(cfg);
      m->load_state_dict(state);
      const int n = tw::nn::quantize(*m, scheme);
      return std::make_pair(std::move(m), n);
    };
    const double ppl_f = perplexity(*f32, held, context);
    auto [q8, n8] = packed("q8");
    auto [q4, n4] = packed("q4");
    const double ppl_8 = perplexity(*q8, held, context);
    const double ppl_4 = perplexity(*q4, held, context);
    const double ppl_b = perplexity(*bf16, held, context);

    double load[1] = {0};
    getloadavg(load, 1);
    int64_t n_params = 0;
    for (const auto& p : f32->parameters()) n_params += p->value().numel();
    std::printf(
        "bench-quality: GPT %lld layers, d=%lld, %lld heads, context %lld, vocab %lld, %lld "
        "parameters; Adam lr %g, batch %lld, seed %llu; %d threads, load average %.2f\n",
        static_cast<long long>(layers), static_cast<long long>(embd), static_cast<long long>(heads),
        static_cast<long long>(context), static_cast<long long>(vocab.size()),
        static_cast<long long>(n_params), kLr, static_cast<long long>(batch),
        static_cast<unsigned long long>(kSeed), threads, load[0]);
    std::printf(
        "text: %s, %zu characters: trained on the first %lld, perplexity on the last %zu "
        "(%lld windows of %lld)\n",
        path.c_str(), text.size(), static_cast<long long>(cut), held.size(),
        static_cast<long long>((static_cast<int64_t>(held.size()) - 1) / context),
        static_cast<long long>(context));
    std::printf("%lld steps each for f32 and bf16 autocast, %.0f s in all; bf16 compute: %s\n\n",
                static_cast<long long>(steps), train_s,
                tw::cpu::bf16_native() ? "oneDNN's AVX512_BF16 kernels"
                                       : "through f32 (no AVX512_BF16 on this CPU)");
    std::printf("| row | f32 | other | ratio | target | met |\n|---|---|---|---|---|---|\n");
    auto rel = [](double a, double b) { return a / b - 1; };
    std::printf(
        "| held-out perplexity, Q8_0 weights (%d Linear layers packed) | %.4f | %.4f | "
        "%+.2f%% | within 2%% | %s |\n",
        n8, ppl_f, ppl_8, 100 * rel(ppl_8, ppl_f),
        std::fabs(rel(ppl_8, ppl_f)) <= 0.02 ? "yes" : "NO");
    std::printf(
        "| held-out perplexity, Q4_0 weights (%d Linear layers packed) | %.4f | %.4f | "
        "%+.2f%% | within 10%% | %s |\n",
        n4, ppl_f, ppl_4, 100 * rel(ppl_4, ppl_f),
        std::fabs(rel(ppl_4, ppl_f)) <= 0.10 ? "yes" : "NO");
    const double sp = median(ratio);
    std::printf(
        "| training step, bf16 autocast, ms (median of %zu rounds of %lld steps) | %.1f | "
        "%.1f | f32/bf16 %.2f (rounds %.2f-%.2f) | >= 1.3 | %s |\n",
        ratio.size(), static_cast<long long>(round_steps), median(ms_f), median(ms_b), sp,
        ratio.empty() ? 0 : *std::min_element(ratio.begin(), ratio.end()),
        ratio.empty() ? 0 : *std::max_element(ratio.begin(), ratio.end()),
        sp >= 1.3 ? "yes" : "NO");
    const int64_t at200 = std::min<int64_t>(200, steps);
    const double lf200 = last_mean(loss_f, at200), lb200 = last_mean(loss_b, at200);
    std::printf(
        "| loss after %lld steps (mean of the last 10), bf16 autocast | %.4f | %.4f | %+.2f%% | "
        "within 2%% | %s |\n",
        static_cast<long long>(at200), lf200, lb200, 100 * rel(lb200, lf200),
        std::fabs(rel(lb200, lf200)) <= 0.02 ? "yes" : "NO");
    const double lf = last_mean(loss_f, steps), lb = last_mean(loss_b, steps);
    std::printf("| loss after %lld steps, bf16 autocast | %.4f | %.4f | %+.2f%% | | |\n",
                static_cast<long long>(steps), lf, lb, 100 * rel(lb, lf));
    std::printf(
        "| held-out perplexity, the bf16-autocast-trained model (f32 inference) | %.4f | %.4f | "
        "%+.2f%% | | |\n",
        ppl_f, ppl_b, 100 * rel(ppl_b, ppl_f));
    return 0;
  } catch (const tw::Error& e) {
    std::fprintf(stderr, "tw_bench_quality: %s\n", e.what());
    return 1;
  }
}
