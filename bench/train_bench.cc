// Time per training step (forward, cross-entropy, backward, Adam), on the local CPU device and on
// a remote device served in-process over loopback, side by side in one run:
//   mlp_b256: MLP 64-512-512-10 (ReLU), batch 256, random data
//   cnn_b64:  the digits CNN of apps/train_digits.cc, batch 64, random 8x8 images
// Rounds alternate the devices (and their order) so that load from elsewhere on the machine hits
// both alike. Reported: the best round (the least disturbed by other processes; the figure the
// targets are judged on), the median round, and the process CPU time per step (the in-process
// server's threads included, so it shows what the remote path costs in total). Before timing, the
// two devices' parameters after the warm-up steps are compared byte for byte (they must be
// identical). Prints a table and, with
// --jsonl PATH, one JSON object per (workload, device) for bench/compare_train.sh. For profiling,
// --workload NAME runs only that workload and --local-only only the local device (no server).
//   tw_bench_train [--rounds N] [--steps N] [--threads N] [--jsonl PATH] [--workload NAME]
//                  [--local-only]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench_models.h"
#include "digits/digits.h"
#include "tensorwire/server.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Workload {
  std::string name;
  int64_t batch;
  std::function<std::shared_ptr<tw::nn::Module>(const tw::nn::Placement&)> make;
  tw::Shape input;  // per sample
};

std::shared_ptr<tw::nn::Module> mlp(const tw::nn::Placement& at) {
  return tw::bench::mlp_64_512_512_10(at);
}

// One device's training state.
struct Trainer {
  tw::Device device;
  std::shared_ptr<tw::nn::Module> model;
  std::unique_ptr<tw::optim::Adam> opt;
  tw::Tensor x, y;

  Trainer(const Workload& w, const tw::Device& d) : device(d) {
    tw::manual_seed(1234);
    model = w.make({d, tw::kF32});
    opt =
        std::make_unique<tw::optim::Adam>(model->parameters(), tw::optim::AdamOptions{.lr = 1e-3});
    tw::Shape xs{w.batch};
    xs.insert(xs.end(), w.input.begin(), w.input.end());
    x = tw::randn(xs, tw::kF32, d);
    y = (tw::rand({w.batch}, tw::kF32, d) * 10.0).floor().to(tw::kI64).clamp(0, 9);
  }
  void step() {
    const tw::Tensor loss = tw::nn::cross_entropy((*model)(x), y);
    opt->zero_grad();
    loss.backward();
    opt->step();
  }
  // Wall and process CPU seconds per step over `steps` steps, waiting for the device at the end.
  std::pair<double, double> time(int steps) {
    device.sync();
    const auto t0 = Clock::now();
    const double c0 = cpu_seconds();
    for (int i = 0; i < steps; ++i) step();
    device.sync();
    return {std::chrono::duration<double>(Clock::now() - t0).count() / steps,
            (cpu_seconds() - c0) / steps};
  }
  static double cpu_seconds() {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}
double best(const std::vector<double>& v) {
  return v.empty() ? 0 : *std::min_element(v.begin(), v.end());
}

struct Times {
  std::vector<double> wall, cpu;
  void add(std::pair<double, double> t) {
    wall.push_back(t.first);
    cpu.push_back(t.second);
  }
};

}  // namespace

int main(int argc, char** argv) {
  int rounds = 15, steps = 10, threads = 2;
  std::string jsonl, only;
  bool local_only = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "tw_bench_train: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--rounds") {
      rounds = std::atoi(next().c_str());
    } else if (a == "--steps") {
      steps = std::atoi(next().c_str());
    } else if (a == "--threads") {
      threads = std::atoi(next().c_str());
    } else if (a == "--jsonl") {
      jsonl = next();
    } else if (a == "--workload") {
      only = next();
    } else if (a == "--local-only") {
      local_only = true;
    } else {
      std::fprintf(stderr,
                   "usage: tw_bench_train [--rounds N] [--steps N] [--threads N] [--jsonl PATH] "
                   "[--workload NAME] [--local-only]\n");
      return 2;
    }
  }
  try {
    tw::set_num_threads(threads);
    std::unique_ptr<tw::Server> server;
    std::optional<tw::Device> remote;
    if (!local_only) {
      server = tw::serve(tw::Device::cpu());
      remote = tw::Device::remote(server->url());
      remote->connect();
    }
    std::vector<Workload> workloads = {
        {"mlp_b256", 256, mlp, {64}},
        {"cnn_b64",
         64,
         [](const tw::nn::Placement& at) {
           return tw::digits::make_model(tw::digits::ModelKind::kCnn, at);
         },
         {1, 8, 8}},
    };
    if (!only.empty()) {
      std::erase_if(workloads, [&](const Workload& w) { return w.name != only; });
      if (workloads.empty()) {
        std::fprintf(stderr, "tw_bench_train: no workload %s\n", only.c_str());
        return 2;
      }
    }
    std::ofstream out;
    if (!jsonl.empty()) out.open(jsonl);
    std::printf(
        "training step (ms): best and median of %d rounds of %d steps; cpu = process CPU time per "
        "step; %d intra-op threads; server %s\n",
        rounds, steps, threads, server ? server->url().c_str() : "(none: --local-only)");
    std::printf("%-10s %10s %10s %10s %10s %10s %10s %13s %s\n", "workload", "local", "remote",
                "local med", "remote med", "local cpu", "remote cpu", "remote/local", "identical");
    for (const Workload& w : workloads) {
      Trainer local(w, tw::Device::cpu());
      std::optional<Trainer> far;
      if (remote) far.emplace(w, *remote);
      for (int i = 0; i < 5; ++i) {
        local.step();
        if (far) far->step();
      }
      bool identical = true;
      if (far) {
        const auto lp = local.model->parameters(), rp = far->model->parameters();
        for (size_t i = 0; i < lp.size(); ++i)
          identical &= lp[i]->value().to_bytes() == rp[i]->value().to_bytes();
      }
      Times tl, tr;
      for (int r = 0; r < rounds; ++r) {
        if (r % 2 == 0 || !far) {
          tl.add(local.time(steps));
          if (far) tr.add(far->time(steps));
        } else {
          tr.add(far->time(steps));
          tl.add(local.time(steps));
        }
      }
      const double bl = best(tl.wall) * 1e3, br = best(tr.wall) * 1e3;
      std::printf("%-10s %10.3f %10.3f %10.3f %10.3f %10.3f %10.3f %13.3f %s\n", w.name.c_str(), bl,
                  br, median(tl.wall) * 1e3, median(tr.wall) * 1e3, median(tl.cpu) * 1e3,
                  median(tr.cpu) * 1e3, far ? br / bl : 0.0,
                  !far        ? "-"
                  : identical ? "yes"
                              : "NO");
      if (out && far) {
        for (const auto& [dev, t] :
             {std::pair<const char*, const Times*>{"local", &tl}, {"remote", &tr}}) {
          out << "{\"workload\": \"" << w.name << "\", \"device\": \"" << dev
              << "\", \"best_ms\": " << best(t->wall) * 1e3
              << ", \"median_ms\": " << median(t->wall) * 1e3
              << ", \"cpu_ms\": " << median(t->cpu) * 1e3
              << ", \"identical\": " << (identical ? "true" : "false") << "}\n";
        }
      }
    }
    return 0;
  } catch (const tw::Error& e) {
    std::fprintf(stderr, "tw_bench_train: %s\n", e.what());
    return 1;
  }
}
