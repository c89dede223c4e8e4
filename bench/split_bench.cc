// One model over several servers (tensorwire/split.h, issue 51), against one server, each row's
// ratio measured side by side in one run. Every server is a tensorwire-server child process
// pinned to its own core (taskset -a -p -c K, with --threads 1 --workers 1): two one-core
// "machines" on this host; the client runs beside them, unpinned.
//   (P) pipelined training step (GPipe, --micro-batches M) over 2 servers vs 1 server, same
//       model and global batch, eager and as graphs (Pipeline::set_graph_training); target >= 1.6x
//   (F) prefill: the forward of --batch sequences of --context tokens, pipelined vs 1 server;
//       and the prefill of one --prefill-token prompt (PipelineGenerator: the prompt in
//       --prefill-chunks chunks over 2 servers, in one chunk on 1); target >= 1.6x
//   --shaped: the servers in a network namespace of their own behind a link shaped to
//       --rate and --rtt-us (tests/support/shaped_link.h, needs root), the client in another:
//       every client-server byte crosses the shaped link; the servers, both behind their relays
//       in that namespace, reach each other through the relays (the delay, not the rate limit)
//   (T) tensor-parallel training step and prefill over 2 servers vs 1; target >= 1.4x
//   (G) generation tokens/s: 1 server, pipeline over 2, tensor-parallel over 2; and the wire
//       bytes through the client per generated token (activations never pass through it)
//   (S) re-upload of --store-mib MiB of weights (tensors of 8 MiB) after a server restart with
//       --store: bytes on the wire per tensor (target <= 1 KiB) and the time against the first
//       upload (target >= 20x faster; over loopback here, not a 1 Gbit/s link)
// The model defaults to a small GPT (--layers 4 --embd 256 --heads 4 --context 128) so a run
// takes a minute on a busy machine; --gpt2-small gives the (12 layers, d=768, context
// 512). Measures, never asserts. `make bench-split` runs it.
// Usage: tw_bench_split [--gpt2-small] [--layers N] [--embd N] [--heads N] [--context N]
//        [--batch N] [--micro-batches M] [--steps N] [--gen N] [--store-mib N] [--cores A,B]
//        [--prefill N] [--prefill-chunks N] [--shaped] [--rate 1gbit] [--rtt-us 2000]
//        [--only PFTGS]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "support/server_process.h"
#include "support/shaped_link.h"
#include "tensorwire/remote.h"
#include "tensorwire/tensorwire.h"

namespace {

using Clock = std::chrono::steady_clock;
using tw::testing::ServerProcess;

struct Opts {
  int64_t layers = 4, embd = 256, heads = 4, context = 128, vocab = 256, batch = 8, micro = 4;
  int64_t steps = 3, gen = 32, store_mib = 256, prefill = 0, prefill_chunks = 0;
  bool shaped = false;
  std::string rate = "1gbit";
  uint32_t rtt_us = 2000;
  int cores[2] = {0, 1};
  std::string only = "PFTGS";
};

double secs_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

uint16_t port_of(const std::string& url) {
  return static_cast<uint16_t>(std::stoi(url.substr(url.rfind(':') + 1)));
}

std::unique_ptr<ServerProcess> pinned(int core, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"--threads", "1", "--workers", "1"};
  args.insert(args.end(), extra.begin(), extra.end());
  auto p = std::make_unique<ServerProcess>(args);
  const std::string cmd =
      "taskset -a -p -c " + std::to_string(core) + " " + std::to_string(p->pid()) + " > /dev/null";
  if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "warning: %s failed\n", cmd.c_str());
  return p;
}

tw::Tensor batch_tokens(const Opts& o, int seed) {
  std::vector<int64_t> v(static_cast<size_t>(o.batch * o.context));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<int64_t>((i * 2654435761u + static_cast<size_t>(seed) * 97) % 251);
  return tw::from_vector<int64_t>(v, {o.batch, o.context});
}

tw::nn::GPTConfig config(const Opts& o) {
  return {.vocab_size = o.vocab,
          .context = o.context,
          .n_layer = o.layers,
          .n_head = o.heads,
          .n_embd = o.embd};
}

void sync_all(const std::vector<tw::Device>& ds) {
  for (const tw::Device& d : ds) d.sync();
}

// Seconds per training step (after one warm-up step) of `step`.
template <class F>
double time_steps(const Opts& o, const std::vector<tw::Device>& ds, F step) {
  step(0);
  sync_all(ds);
  const auto t = Clock::now();
  for (int64_t s = 1; s <= o.steps; ++s) step(static_cast<int>(s));
  sync_all(ds);
  return secs_since(t) / static_cast<double>(o.steps);
}

void row(const char* id, const char* what, double one, double split, const char* target) {
  std::printf("%-3s %-44s %10.1f ms %10.1f ms   %5.2fx   (target %s)\n", id, what, one * 1e3,
              split * 1e3, one / split, target);
}

}  // namespace

int main(int argc, char** argv) {
  Opts o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> int64_t {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return std::atoll(argv[++i]);
    };
    if (a == "--gpt2-small") {
      o.layers = 12, o.embd = 768, o.heads = 12, o.context = 512, o.batch = 4;
    } else if (a == "--layers") {
      o.layers = next();
    } else if (a == "--embd") {
      o.embd = next();
    } else if (a == "--heads") {
      o.heads = next();
    } else if (a == "--context") {
      o.context = next();
    } else if (a == "--batch") {
      o.batch = next();
    } else if (a == "--micro-batches") {
      o.micro = next();
    } else if (a == "--steps") {
      o.steps = next();
    } else if (a == "--gen") {
      o.gen = next();
    } else if (a == "--store-mib") {
      o.store_mib = next();
    } else if (a == "--prefill") {
      o.prefill = next();
    } else if (a == "--prefill-chunks") {
      o.prefill_chunks = next();
    } else if (a == "--shaped") {
      o.shaped = true;
    } else if (a == "--rate" && i + 1 < argc) {
      o.rate = argv[++i];
    } else if (a == "--rtt-us") {
      o.rtt_us = static_cast<uint32_t>(next());
    } else if (a == "--only" && i + 1 < argc) {
      o.only = argv[++i];
    } else if (a == "--cores" && i + 1 < argc) {
      if (std::sscanf(argv[++i], "%d,%d", &o.cores[0], &o.cores[1]) != 2) return 2;
    } else {
      std::fprintf(stderr, "unknown flag %s (see bench/split_bench.cc)\n", a.c_str());
      return 2;
    }
  }
  auto has = [&](char c) { return o.only.find(c) != std::string::npos; };
  try {
    std::printf(
        "tw_bench_split: GPT %lld layers, d=%lld, %lld heads, context %lld, batch %lld "
        "(%lld micro-batches); servers pinned to cores %d and %d, 1 thread each\n",
        static_cast<long long>(o.layers), static_cast<long long>(o.embd),
        static_cast<long long>(o.heads), static_cast<long long>(o.context),
        static_cast<long long>(o.batch), static_cast<long long>(o.micro), o.cores[0], o.cores[1]);
    std::printf("%-3s %-44s %13s %13s %8s\n", "row", "what", "1 server", "2 servers", "ratio");
    std::unique_ptr<tw::testing::ShapedLink> link;
    std::string url0, url1;
    std::unique_ptr<ServerProcess> s0, s1;
    if (o.shaped) {
      std::string why;
      link = tw::testing::ShapedLink::open({.rtt_us = o.rtt_us, .rate = o.rate}, &why);
      if (!link) {
        std::fprintf(stderr, "tw_bench_split: --shaped: %s\n", why.c_str());
        return 1;
      }
      s0 = link->in_server([&] { return pinned(o.cores[0]); });
      s1 = link->in_server([&] { return pinned(o.cores[1]); });
      url0 = link->relay_to(port_of(s0->url()));
      url1 = link->relay_to(port_of(s1->url()));
      std::printf("shaped link: %s, %u us round trip (client in its own namespace)\n",
                  o.rate.c_str(), o.rtt_us);
    } else {
      s0 = pinned(o.cores[0]);
      s1 = pinned(o.cores[1]);
      url0 = s0->url();
      url1 = s1->url();
    }
    const tw::Device d0 = tw::Device::remote(url0), d1 = tw::Device::remote(url1);
    const tw::Device d0b = tw::Device::remote(url0);  // a second session on server 0
    if (link) link->in_client([&] { d0.connect(), d0b.connect(), d1.connect(); });
    const tw::nn::GPTConfig cfg = config(o);
    const tw::Tensor x = batch_tokens(o, 1), y = batch_tokens(o, 2);

    tw::manual_seed(0);
    tw::nn::GPT one(cfg);
    tw::nn::Pipeline pone(one, tw::nn::place(one, {d0}), o.micro);
    tw::optim::Adam opt_one(one.parameters());
    tw::manual_seed(0);
    tw::nn::GPT two(cfg);
    tw::nn::Pipeline ptwo(two, tw::nn::place(two, {d0b, d1}), o.micro);
    tw::optim::Adam opt_two(two.parameters());
    const std::vector<tw::Device> all = {d0, d0b, d1};
    // Generation first, while both models still hold the same (initial) weights.
    if (has('G')) {
      const std::vector<int64_t> prompt = {1, 2, 3, 4};
      auto wire = [&]() {
        uint64_t b = 0;
        for (const tw::Device& d : all) {
          const tw::WireCounters w = tw::wire_counters(d);
          b += w.bytes_out + w.bytes_in;
        }
        return b;
      };
      tw::nn::PipelineGenerator g1(pone), g2(ptwo);
      sync_all(all);  // the parameters' uploads, sent in the background, are not the tokens'
      uint64_t w = wire();
      auto t = Clock::now();
      const auto a = g1.generate(prompt, o.gen, {.temperature = 0});
      const double ta = secs_since(t);
      const double ba = static_cast<double>(wire() - w) / static_cast<double>(a.size() + 3);
      w = wire();
      t = Clock::now();
      const auto b = g2.generate(prompt, o.gen, {.temperature = 0});
      const double tb = secs_since(t);
      const double bb = static_cast<double>(wire() - w) / static_cast<double>(b.size() + 3);
      std::printf(
          "G   generation tokens/s: 1 server %.1f, pipeline over 2 %.1f (same tokens: %s)\n",
          static_cast<double>(a.size()) / ta, static_cast<double>(b.size()) / tb,
          a == b ? "yes" : "NO");
      std::printf(
          "G   client wire bytes per token: 1 server %.0f B, 2 servers %.0f B "
          "(activations: %lld B per token per layer boundary)\n",
          ba, bb, static_cast<long long>(o.embd * 4));
    }
    if (has('P')) {
      const double a = time_steps(o, all, [&](int) {
        opt_one.zero_grad();
        (void)pone.forward_backward(x, y);
        opt_one.step();
      });
      const double b = time_steps(o, all, [&](int) {
        opt_two.zero_grad();
        (void)ptwo.forward_backward(x, y);
        opt_two.step();
      });
      row("P", "pipelined training step", a, b, ">= 1.6x");
      // The same with each server's part as registered graphs (the backward re-materialised).
      ptwo.set_graph_training(true);
      auto graph_step = [&](int) {
        opt_two.zero_grad();
        (void)ptwo.forward_backward(x, y);
        opt_two.step();
      };
      graph_step(0);  // eager; time_steps' warm-up records, its steps replay
      const double c = time_steps(o, all, graph_step);
      ptwo.set_graph_training(false);
      row("P", "pipelined training step, graphs", a, c, ">= 1.6x");
    }
    if (has('F')) {
      tw::NoGradGuard ng;
      const double a = time_steps(o, all, [&](int) { (void)pone.forward(x); });
      const double b = time_steps(o, all, [&](int) { (void)ptwo.forward(x); });
      row("F", "pipelined prefill (batch forward)", a, b, ">= 1.6x");
      std::vector<int64_t> prompt(static_cast<size_t>(o.prefill > 0 ? o.prefill : o.context));
      for (size_t i = 0; i < prompt.size(); ++i)
        prompt[i] = static_cast<int64_t>((i * 31 + 7) % static_cast<size_t>(o.vocab));
      // One server's best: the whole prompt as one chunk; split: the chunks pipelined.
      tw::nn::PipelineGenerator g1(pone, 1), g2(ptwo, o.prefill_chunks);
      const double c = time_steps(o, all, [&](int) { (void)g1.generate(prompt, 0); });
      const double e = time_steps(o, all, [&](int) { (void)g2.generate(prompt, 0); });
      char what[64];
      std::snprintf(what, sizeof what, "prefill of a %zu-token prompt (generator)", prompt.size());
      row("F", what, c, e, ">= 1.6x");
    }
    if (has('T')) {
      tw::manual_seed(0);
      tw::nn::GPT src(cfg);
      tw::nn::TensorParallelGPT tp(src, {d0b, d1});
      tw::optim::Adam opt_tp(tp.parameters());
      tw::nn::Pipeline ref(one, tw::nn::place(one, {d0}), 1);
      const double a = time_steps(o, all, [&](int) {
        opt_one.zero_grad();
        (void)ref.forward_backward(x, y);
        opt_one.step();
      });
      const double b = time_steps(o, all, [&](int) {
        opt_tp.zero_grad();
        tw::Tensor l = tp.loss(x, y);
        l.backward();
        tp.reduce_grads();
        opt_tp.step();
      });
      row("T", "tensor-parallel training step", a, b, ">= 1.4x");
      tw::NoGradGuard ng;
      const double c = time_steps(o, all, [&](int) { (void)one.forward(x.to(d0)); });
      const double e = time_steps(o, all, [&](int) { (void)tp.forward(x); });
      row("T", "tensor-parallel prefill", c, e, ">= 1.4x");
      if (has('G')) {
        const std::vector<int64_t> prompt = {1, 2, 3, 4};
        const auto t = Clock::now();
        const auto out = tp.generate(prompt, o.gen, {.temperature = 0});
        std::printf("G   tensor-parallel generation: %.1f tokens/s (%zu tokens)\n",
                    static_cast<double>(out.size()) / secs_since(t), out.size());
      }
    }
    if (has('S')) {
      const std::string dir =
          (std::filesystem::temp_directory_path() / ("tw_split_store_" + std::to_string(getpid())))
              .string();
      const int64_t n = o.store_mib / 8;  // tensors of 8 MiB
      std::vector<std::vector<float>> w(static_cast<size_t>(n));
      for (int64_t k = 0; k < n; ++k) {
        w[static_cast<size_t>(k)].resize(size_t{2} << 20);
        for (size_t i = 0; i < w[static_cast<size_t>(k)].size(); ++i)
          w[static_cast<size_t>(k)][i] =
              static_cast<float>((i * 7919 + static_cast<size_t>(k)) % 1000);
      }
      // Uploads tensor(k) for k < count to a fresh server on `dir` twice (the second after a
      // restart): seconds and client bytes out of each.
      double times[2] = {0, 0}, stimes[2] = {0, 0};
      uint64_t bytes[2] = {0, 0}, sbytes[2] = {0, 0};
      auto twice = [&](int64_t count, auto tensor, double* secs, uint64_t* out) {
        for (int run = 0; run < 2; ++run) {
          auto srv = pinned(o.cores[0], {"--store", dir});
          const tw::Device d = tw::Device::remote(srv->url());
          d.connect();
          const tw::WireCounters before = tw::wire_counters(d);
          const auto t = Clock::now();
          std::vector<tw::Tensor> ts;
          for (int64_t k = 0; k < count; ++k) ts.push_back(tensor(k, d));
          d.sync();
          secs[run] = secs_since(t);
          out[run] = tw::wire_counters(d).bytes_out - before.bytes_out;
        }
      };
      twice(
          n,
          [&](int64_t k, const tw::Device& d) {
            return tw::from_vector<float>(std::vector<float>(w[static_cast<size_t>(k)]),
                                          {int64_t{2} << 20}, d);
          },
          times, bytes);
      // Small weights (a GPT-2-small LayerNorm's 3 KiB) with the client asking for them too.
      const int64_t ns = 200;
      ::setenv("TW_DEDUP_MIN_BYTES", "1024", 1);
      twice(
          ns,
          [&](int64_t k, const tw::Device& d) {
            std::vector<float> v(768);
            for (size_t i = 0; i < v.size(); ++i)
              v[i] = static_cast<float>((i * 131 + static_cast<size_t>(k) * 7) % 977);
            return tw::from_vector<float>(std::move(v), {768}, d);
          },
          stimes, sbytes);
      ::unsetenv("TW_DEDUP_MIN_BYTES");
      std::filesystem::remove_all(dir);
      std::printf(
          "S   %lld tensors of 3 KiB, --store, TW_DEDUP_MIN_BYTES=1024, server restarted: first "
          "upload %.1f ms (%.0f B/tensor), re-upload %.1f ms (%.0f B/tensor)\n",
          static_cast<long long>(ns), stimes[0] * 1e3,
          static_cast<double>(sbytes[0]) / static_cast<double>(ns), stimes[1] * 1e3,
          static_cast<double>(sbytes[1]) / static_cast<double>(ns));
      std::printf(
          "S   %lld MiB in %lld tensors, --store, server restarted: first upload %.1f ms "
          "(%.0f B/tensor), re-upload %.1f ms (%.0f B/tensor): %.1fx (target <= 1 KiB "
          "per tensor, >= 20x at 1 Gbit/s; loopback here)\n",
          static_cast<long long>(o.store_mib), static_cast<long long>(n), times[0] * 1e3,
          static_cast<double>(bytes[0]) / static_cast<double>(n), times[1] * 1e3,
          static_cast<double>(bytes[1]) / static_cast<double>(n), times[0] / times[1]);
    }
  } catch (const tw::Error& e) {
    std::fprintf(stderr, "tw_bench_split: %s\n", e.what());
    return 1;
  }
  return 0;
}
