// Time per training step (forward, cross-entropy, backward, Adam), on the local CPU device and on
// a remote device (a tensorwire-server child process on 127.0.0.1, the topology of a real
// deployment; --in-process serves it from a thread of this process), side by side in one run:
//   mlp_b256: MLP 64-512-512-10 (ReLU), batch 256, random data
//   cnn_b64:  the digits CNN of apps/train_digits.cc, batch 64, random 8x8 images
// Rounds alternate the devices (and their order) so that load from elsewhere on the machine hits
// both alike. Reported: the best round (the least disturbed by other processes; the figure the
// targets are judged on), the median round, and the CPU time per step (for the remote device,
// this process's and the server's together, so it shows what the remote path costs in total).
// Before timing, the two devices' parameters after the warm-up steps are compared byte for byte
// (they must be identical). Prints a table and, with
// --jsonl PATH, one JSON object per (workload, device) for bench/compare_train.sh. For profiling,
// --workload NAME runs only that workload and --local-only only the local device (no server).
//   tw_bench_train [--rounds N] [--steps N] [--threads N] [--jsonl PATH] [--workload NAME]
//                  [--local-only] [--in-process]
// An in-process server makes two threads of the process start OpenMP work, and libgomp then
// puts its threads to sleep after every parallel kernel (tw::release_idle_threads says more):
// both columns run slower than in their own processes.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench_models.h"
#include "digits/digits.h"
#include "support/server_process.h"
#include "tensorwire/remote.h"
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

constexpr auto kSettle = std::chrono::milliseconds(40);

// One device's training state.
struct Trainer {
  tw::Device device;
  pid_t server_pid = 0;  // a server child process whose CPU time counts with this process's
  std::shared_ptr<tw::nn::Module> model;
  std::unique_ptr<tw::optim::Adam> opt;
  tw::Tensor x, y;

  Trainer(const Workload& w, const tw::Device& d, pid_t server = 0)
      : device(d), server_pid(server) {
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
  // First a pause, so that the round starts on a quiet machine: after its last parallel kernel
  // an OpenMP thread spins up to ~15 ms before it sleeps (libgomp's default), which would take a
  // core from the other device's round that follows at once (the remote round after a local one,
  // the server's threads during a local one).
  std::pair<double, double> time(int steps) {
    device.sync();
    std::this_thread::sleep_for(kSettle);
    const auto t0 = Clock::now();
    const double c0 = cpu_seconds();
    for (int i = 0; i < steps; ++i) step();
    device.sync();
    return {std::chrono::duration<double>(Clock::now() - t0).count() / steps,
            (cpu_seconds() - c0) / steps};
  }
  double cpu_seconds() const {
    double s = seconds_of(CLOCK_PROCESS_CPUTIME_ID);
    clockid_t server_clock{};
    if (server_pid > 0 && clock_getcpuclockid(server_pid, &server_clock) == 0) {
      s += seconds_of(server_clock);
    }
    return s;
  }
  static double seconds_of(clockid_t clock) {
    timespec t{};
    clock_gettime(clock, &t);
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
  bool local_only = false, in_process = false;
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
    } else if (a == "--in-process") {
      in_process = true;
    } else {
      std::fprintf(stderr,
                   "usage: tw_bench_train [--rounds N] [--steps N] [--threads N] [--jsonl PATH] "
                   "[--workload NAME] [--local-only] [--in-process]\n");
      return 2;
    }
  }
  try {
    tw::set_num_threads(threads);
    std::unique_ptr<tw::Server> server;
    std::unique_ptr<tw::testing::ServerProcess> child;
    std::optional<tw::Device> remote;
    std::string where = "(none: --local-only)";
    if (!local_only && in_process) {
      server = tw::serve(tw::Device::cpu());
      where = server->url() + " (in this process)";
    } else if (!local_only) {
      child = std::make_unique<tw::testing::ServerProcess>(
          std::vector<std::string>{"--threads", std::to_string(threads)});
      where = child->url() + " (tensorwire-server child process)";
    }
    if (!local_only) {
      remote = tw::Device::remote(server ? server->url() : child->url());
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
        rounds, steps, threads, where.c_str());
    std::printf("%-10s %10s %10s %10s %10s %10s %10s %13s %s\n", "workload", "local", "remote",
                "local med", "remote med", "local cpu", "remote cpu", "remote/local", "identical");
    for (const Workload& w : workloads) {
      Trainer local(w, tw::Device::cpu());
      std::optional<Trainer> far;
      if (remote) far.emplace(w, *remote, child ? child->pid() : 0);
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
