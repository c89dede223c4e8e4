// Graphs against eager execution (docs/trace.md), one row per workload: name, eager, graph,
// ratio (graph / eager).
//   cnn_remote_bytes_out   client->server bytes per digits-CNN training step (b64)
//   cnn_remote_frames_out  client->server frames per step
//   cnn_remote_step_ms     remote step time with graphs / local eager step time
//   mlp_remote_step_ms     the same for the MLP 64-512-512-10, batch 256
//   adds_200k_remote       200k chained one-element adds on a remote device, ops/s effective
//                          (eager: sent op by op; graph: a replay of the registered trace by id
//                          and the read of its result; the registering first replay is shown)
//   mlp_local_step_ms      local CPU graph replay / local eager, MLP step
// The training steps run through tw::graph::Step (recorded once, then replayed); every graph
// row first checks the replayed parameters equal eager ones byte for byte. A remote row prints
// "n/a (server lacks graphs)" when the server refuses graph registration (the replay then falls
// back to sending every op, which is what the eager column measures already).
//   tw_bench_graph [--steps N] [--rounds N] [--server URL]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench_models.h"
#include "digits/digits.h"
#include "support/server_process.h"
#include "tensorwire/graph.h"
#include "tensorwire/remote.h"
#include "tensorwire/server.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Workload {
  std::string name;
  int64_t batch;
  tw::Shape input;  // per sample
  bool cnn;
};

std::shared_ptr<tw::nn::Module> make(const Workload& w, const tw::nn::Placement& at) {
  if (w.cnn) return tw::digits::make_model(tw::digits::ModelKind::kCnn, at);
  return tw::bench::mlp_64_512_512_10(at);
}

// One training setup on a device, stepping eagerly or through a graph::Step.
struct Trainer {
  tw::Device device;
  std::shared_ptr<tw::nn::Module> model;
  std::unique_ptr<tw::optim::Adam> opt;
  std::unique_ptr<tw::graph::Step> cached;
  tw::Tensor x, y;

  Trainer(const Workload& w, const tw::Device& d, bool graph) : device(d) {
    tw::manual_seed(1234);
    model = make(w, {d, tw::kF32});
    opt =
        std::make_unique<tw::optim::Adam>(model->parameters(), tw::optim::AdamOptions{.lr = 1e-3});
    tw::Shape xs{w.batch};
    xs.insert(xs.end(), w.input.begin(), w.input.end());
    x = tw::randn(xs, tw::kF32, d);
    y = (tw::rand({w.batch}, tw::kF32, d) * 10.0).floor().to(tw::kI64).clamp(0, 9);
    if (graph) {
      cached = std::make_unique<tw::graph::Step>(
          [this](const std::vector<tw::Tensor>& a) {
            return std::vector<tw::Tensor>{eager(a[0], a[1])};
          },
          tw::graph::state_slots(*opt));
    }
  }
  tw::Tensor eager(const tw::Tensor& xb, const tw::Tensor& yb) {
    const tw::Tensor loss = tw::nn::cross_entropy((*model)(xb), yb);
    opt->zero_grad();
    loss.backward();
    opt->step();
    return loss.detach();
  }
  void step() {
    if (cached) {
      (void)(*cached)({x, y});
    } else {
      (void)eager(x, y);
    }
  }
  double seconds_per_step(int steps) {
    device.sync();
    const auto t0 = Clock::now();
    for (int i = 0; i < steps; ++i) step();
    device.sync();
    return std::chrono::duration<double>(Clock::now() - t0).count() / steps;
  }
  std::vector<std::vector<uint8_t>> params() const {
    std::vector<std::vector<uint8_t>> out;
    for (const auto& p : model->parameters()) out.push_back(p->value().to_bytes());
    return out;
  }
};

void row(const std::string& name, double eager, double graph, const char* unit) {
  std::printf("%-24s %14.4g %14.4g %8.3f   (%s)\n", name.c_str(), eager, graph, graph / eager,
              unit);
}
void row_na(const std::string& name, double eager, const char* unit) {
  std::printf("%-24s %14.4g %14s %8s   (%s)\n", name.c_str(), eager, "n/a", "-", unit);
  std::printf("%-24s   n/a (server lacks graphs)\n", "");
}

double best_of(int rounds, const std::function<double()>& f) {
  double b = 1e300;
  for (int r = 0; r < rounds; ++r) b = std::min(b, f());
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 10, rounds = 5;
  std::string url;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "usage: tw_bench_graph [--steps N] [--rounds N] [--server URL]\n");
      return 2;
    }
    const std::string v = argv[++i];
    if (a == "--steps") {
      steps = std::max(1, std::atoi(v.c_str()));
    } else if (a == "--rounds") {
      rounds = std::max(1, std::atoi(v.c_str()));
    } else if (a == "--server") {
      url = v;
    } else {
      std::fprintf(stderr, "usage: tw_bench_graph [--steps N] [--rounds N] [--server URL]\n");
      return 2;
    }
  }
  try {
    // Without --server: a tensorwire-server child process (the topology of a deployment; a server
    // on a thread of this process would share libgomp with the local rows, see tw_bench_train).
    std::unique_ptr<tw::testing::ServerProcess> server;
    if (url.empty()) {
      server = std::make_unique<tw::testing::ServerProcess>();
      url = server->url();
    }
    const tw::Device remote = tw::Device::remote(url);
    remote.connect();
    const tw::Device cpu = tw::Device::cpu();
    std::printf("%-24s %14s %14s %8s\n", "name", "eager", "graph", "ratio");

    // Does this server run graphs? A one-op trace answers it.
    bool server_graphs = false;
    {
      tw::graph::Capture cap(remote);
      const tw::Tensor a = cap.input(tw::ones({1}, tw::kF32, remote));
      const tw::Tensor b = a + 1.0;
      const tw::graph::Trace t = cap.finish({b});
      (void)t.replay(remote, {tw::ones({1}, tw::kF32, remote)});
      server_graphs = t.runs_as_graph(remote);
    }

    const Workload cnn{"cnn", 64, {1, 8, 8}, true}, mlp{"mlp", 256, {64}, false};
    // Wire per step, digits CNN.
    {
      Trainer e(cnn, remote, false), g(cnn, remote, true);
      // Until the graph is registered and replayed (the Step's third call): the registration,
      // sent once, is reported apart from the steady per-step traffic.
      uint64_t registration = 0;
      while (g.cached->replays() < 2) {
        e.step();
        const tw::WireCounters r0 = tw::wire_counters(remote);
        g.step();
        if (g.cached->replays() == 1)
          registration = tw::wire_counters(remote).bytes_out - r0.bytes_out;
      }
      if (e.params() != g.params()) throw tw::Error("cnn: graph and eager parameters differ");
      auto per_step = [&](Trainer& t) {
        t.device.sync();
        const tw::WireCounters w0 = tw::wire_counters(remote);
        for (int i = 0; i < steps; ++i) t.step();
        t.device.sync();
        const tw::WireCounters w1 = tw::wire_counters(remote);
        return std::pair<double, double>{
            static_cast<double>(w1.bytes_out - w0.bytes_out) / steps,
            static_cast<double>(w1.frames_out - w0.frames_out) / steps};
      };
      const auto we = per_step(e), wg = per_step(g);
      if (server_graphs) {
        row("cnn_remote_bytes_out", we.first, wg.first, "bytes/step, target <= 0.05");
        std::printf("%-24s   (the graph's registration, once: %llu bytes with its first replay)\n",
                    "", static_cast<unsigned long long>(registration));
        row("cnn_remote_frames_out", we.second, wg.second, "frames/step, target graph <= 1.05");
      } else {
        row_na("cnn_remote_bytes_out", we.first, "bytes/step");
        row_na("cnn_remote_frames_out", we.second, "frames/step");
      }
    }
    // Remote step with graphs against local eager.
    for (const Workload* w : {&cnn, &mlp}) {
      Trainer local(*w, cpu, false), far(*w, remote, true);
      for (int i = 0; i < 3; ++i) {
        local.step();
        far.step();
      }
      if (local.params() != far.params())
        throw tw::Error(w->name + ": remote graph and local eager differ");
      const double le = best_of(rounds, [&] { return local.seconds_per_step(steps); });
      const std::string name = w->name + "_remote_step_ms";
      if (server_graphs) {
        const double rg = best_of(rounds, [&] { return far.seconds_per_step(steps); });
        row(name, 1e3 * le, 1e3 * rg, "eager: local cpu; graph: remote; target <= 0.95");
      } else {
        row_na(name, 1e3 * le, "eager: local cpu");
      }
    }
    // 200k chained one-element adds.
    {
      constexpr int kAdds = 200000;
      tw::graph::Capture cap(remote);
      tw::Tensor x = cap.input(tw::zeros({1}, tw::kF32, remote));
      for (int i = 0; i < kAdds; ++i) x = x + 1.0;
      const tw::graph::Trace t = cap.finish({x});
      x = tw::Tensor();
      const tw::Tensor start = tw::zeros({1}, tw::kF32, remote);
      remote.sync();
      auto t0 = Clock::now();
      tw::Tensor y = start;
      for (int i = 0; i < kAdds; ++i) y = y + 1.0;
      remote.sync();
      const double eager_rate = kAdds / std::chrono::duration<double>(Clock::now() - t0).count();
      // The first replay registers the graph (sends, validates and plans it once); the rate is
      // that of the replays after it, by id, each read back.
      t0 = Clock::now();
      std::vector<tw::Tensor> out = t.replay(remote, {start});
      (void)out.at(0).to_bytes();
      const double first_s = std::chrono::duration<double>(Clock::now() - t0).count();
      const double graph_rate = kAdds / best_of(rounds, [&] {
                                  const auto r0 = Clock::now();
                                  out = t.replay(remote, {start});
                                  (void)out.at(0).to_bytes();
                                  return std::chrono::duration<double>(Clock::now() - r0).count();
                                });
      if (out.at(0).to_bytes() != y.to_bytes()) throw tw::Error("adds: graph and eager differ");
      if (t.runs_as_graph(remote)) {
        const std::string unit =
            "ops/s, replay + read of the registered graph (the first, which "
            "registered it, took " +
            std::to_string(first_s) + " s), target graph >= 5e6";
        row("adds_200k_remote", eager_rate, graph_rate, unit.c_str());
      } else {
        row_na("adds_200k_remote", eager_rate, "ops/s");
      }
    }
    // Local graph replay against local eager, MLP.
    {
      Trainer e(mlp, cpu, false), g(mlp, cpu, true);
      for (int i = 0; i < 3; ++i) {
        e.step();
        g.step();
      }
      if (e.params() != g.params()) throw tw::Error("mlp: graph and eager parameters differ");
      const double te = best_of(rounds, [&] { return e.seconds_per_step(steps); });
      const double tg = best_of(rounds, [&] { return g.seconds_per_step(steps); });
      row("mlp_local_step_ms", 1e3 * te, 1e3 * tg, "local cpu, target <= 0.85");
    }
    return 0;
  } catch (const tw::Error& e) {
    std::fprintf(stderr, "tw_bench_graph: %s\n", e.what());
    return 1;
  }
}
