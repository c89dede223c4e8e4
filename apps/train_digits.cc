// `make run`: trains a small CNN (or an MLP) on the UCI handwritten digits, on a remote device
// served by a compute server this process hosts on an ephemeral loopback port (or on an external
// server, or locally), then checks that the same epoch from the same seed gives bit-identical
// parameters on the local CPU device and on the remote device.
//
//   train_digits [--model cnn|mlp] [--device remote|cpu] [--server tcp://host:port]
//                [--epochs N] [--batch N] [--lr X] [--seed N] [--report-every N] [--data PATH]
//                [--no-graph]
//   train_digits --servers N [--server URL]...   (data-parallel over N servers)
//   train_digits --checkpoint DIR --checkpoint-every N [--server A [--server B ... --failover]]
//
// With --checkpoint it saves a tw::Checkpoint every N steps into DIR and, when DIR already holds
// one, resumes from the newest (the same final parameters as an uninterrupted run, bit for bit).
// With --failover too, when a server dies or drains, training moves to the next --server and
// resumes there from the last checkpoint (tw::run_with_failover). Either way it prints the
// final parameters' hash, for comparing runs.
//
// With --servers N (or --server given more than once) it trains data-parallel: one replica per
// server (N servers it hosts itself on loopback ports when no --server is given), each batch
// split over them and the gradients summed with tw::dist::all_reduce (Gloo between the
// servers); after training it checks that every replica's parameters are bit-identical and
// prints the step time beside the same training on one server.
//
// The training step runs through tw::graph::Step: recorded once, then replayed as one trace per
// step (--no-graph issues every op of every step instead).
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "common/cli.h"
#include "digits/digits.h"
#include "tensorwire/remote.h"
#include "tensorwire/server.h"

namespace {

using tw::digits::ModelKind;

struct Args {
  ModelKind model = ModelKind::kCnn;
  std::string device = "remote";
  std::string backend = "cpu";       // the device that computes: served in-process, or local
  std::string server;                // empty: host one in-process
  std::vector<std::string> servers;  // every --server, in order
  int parallel = 0;                  // --servers N
  int epochs = 0;                    // 0: the model's default
  int64_t batch = 64;
  double lr = 0;  // 0: the model's default
  uint64_t seed = 7;
  int64_t report_every = 4;
  std::string data;
  bool graph = true;
  std::string checkpoint;  // --checkpoint DIR
  int64_t checkpoint_every = 0;
  bool failover = false;
};

[[noreturn]] void usage(const std::string& problem) {
  std::fprintf(
      stderr,
      "train_digits: %s\n"
      "usage: train_digits [--model cnn|mlp] [--device remote|cpu] [--backend cpu|vulkan[:N]]\n"
      "                    [--server tcp://host:port]\n"
      "                    [--epochs N] [--batch N] [--lr X] [--seed N] [--report-every N] [--data "
      "PATH]\n"
      "                    [--no-graph] [--checkpoint DIR --checkpoint-every N]\n"
      "       train_digits --checkpoint DIR --checkpoint-every N --server A --server B "
      "--failover\n"
      "       train_digits --servers N [--server URL]... [--model ...] [--epochs N] ...\n",
      problem.c_str());
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  tw::apps::Flags f(argc, argv, usage);
  while (f.next()) {
    if (f.is("--model")) {
      const std::string m = f.value();
      if (m == "cnn") {
        a.model = ModelKind::kCnn;
      } else if (m == "mlp") {
        a.model = ModelKind::kMlp;
      } else {
        usage("--model takes cnn or mlp, got '" + m + "'");
      }
    } else if (f.is("--device")) {
      a.device = f.value();
      if (a.device != "remote" && a.device != "cpu")
        usage("--device takes remote or cpu, got '" + a.device + "'");
    } else if (f.is("--backend")) {
      a.backend = f.value();  // cpu, vulkan, vulkan:0, torch: checked by Device::local
    } else if (f.is("--server")) {
      a.server = f.value();
      a.servers.push_back(a.server);
    } else if (f.is("--servers")) {
      a.parallel = static_cast<int>(f.number());
      if (a.parallel < 1 || a.parallel > 64) usage("--servers takes 1 to 64");
    } else if (f.is("--epochs")) {
      a.epochs = static_cast<int>(f.number());
      if (a.epochs < 1) usage("--epochs must be >= 1");
    } else if (f.is("--batch")) {
      a.batch = static_cast<int64_t>(f.number());
      if (a.batch < 1) usage("--batch must be >= 1");
    } else if (f.is("--lr")) {
      a.lr = f.number();
      if (!(a.lr > 0)) usage("--lr must be > 0");
    } else if (f.is("--seed")) {
      a.seed = static_cast<uint64_t>(f.number());
    } else if (f.is("--report-every")) {
      a.report_every = static_cast<int64_t>(f.number());
    } else if (f.is("--data")) {
      a.data = f.value();
    } else if (f.is("--no-graph")) {
      a.graph = false;
    } else if (f.is("--checkpoint")) {
      a.checkpoint = f.value();
    } else if (f.is("--checkpoint-every")) {
      a.checkpoint_every = static_cast<int64_t>(f.number());
      if (a.checkpoint_every < 1) usage("--checkpoint-every must be >= 1");
    } else if (f.is("--failover")) {
      a.failover = true;
    } else if (f.is("--help") || f.is("-h")) {
      usage("trains a digit classifier on a remote device");
    } else {
      usage("unknown flag " + f.flag());
    }
  }
  if (a.epochs == 0) a.epochs = a.model == ModelKind::kCnn ? 8 : 10;
  if (a.lr == 0) a.lr = a.model == ModelKind::kCnn ? 3e-3 : 2e-3;
  if (!a.server.empty() && a.device == "cpu")
    usage("--server names a remote device; drop --device cpu");
  if (a.failover && a.checkpoint.empty())
    usage("--failover resumes from checkpoints: give --checkpoint DIR");
  if (a.checkpoint_every > 0 && a.checkpoint.empty())
    usage("--checkpoint-every needs --checkpoint DIR");
  if (!a.checkpoint.empty() && a.checkpoint_every == 0) a.checkpoint_every = 20;
  if (!a.checkpoint.empty() && a.parallel > 0)
    usage("--checkpoint trains on one device; drop --servers");
  if (a.failover) return a;  // every --server is a failover target, not a replica
  if (a.servers.size() > 1 && a.parallel == 0) a.parallel = static_cast<int>(a.servers.size());
  if (a.parallel > 0 && !a.servers.empty() && a.servers.size() != static_cast<size_t>(a.parallel)) {
    usage("--servers " + std::to_string(a.parallel) + " with " + std::to_string(a.servers.size()) +
          " --server URLs: give N URLs, or none to host N servers here");
  }
  if (a.parallel > 0 && a.device == "cpu")
    usage("--servers trains on remote devices; drop --device cpu");
  return a;
}

std::string bytes_str(uint64_t b) {
  char buf[32];
  if (b >= (uint64_t{1} << 20)) {
    std::snprintf(buf, sizeof(buf), "%.1f MiB", static_cast<double>(b) / (1 << 20));
  } else if (b >= 1024) {
    std::snprintf(buf, sizeof(buf), "%.1f KiB", static_cast<double>(b) / 1024);
  } else {
    std::snprintf(buf, sizeof(buf), "%" PRIu64 " B", b);
  }
  return buf;
}

void print_progress(const tw::digits::Progress& p) {
  constexpr int kWidth = 24;
  const int filled = static_cast<int>(kWidth * p.step / std::max<int64_t>(p.steps, 1));
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(kWidth, '.');
  std::printf("\repoch %d/%d [%s] %3" PRId64 "/%" PRId64 "  loss %.4f  acc %5.1f%%  %6.1f steps/s",
              p.epoch, p.epochs, bar.c_str(), p.step, p.steps, p.loss, 100 * p.accuracy,
              p.seconds > 0 ? static_cast<double>(p.step) / p.seconds : 0.0);
  if (p.step == p.steps) std::printf("\n");
  std::fflush(stdout);
}

struct Run {
  std::shared_ptr<tw::nn::Sequential> model;
  double seconds = 0;
  int64_t steps = 0;
  int64_t eager = 0, recorded = 0, replayed = 0;  // the step cache's counts (graph mode)
};

// Trains a fresh model from `seed` on `device` for `epochs` epochs.
Run train(const Args& a, const tw::digits::Dataset& train_set, const tw::Device& device, int epochs,
          bool verbose) {
  tw::manual_seed(a.seed);
  Run r;
  r.model = tw::digits::make_model(a.model, {device, tw::kF32});
  tw::optim::Adam opt(r.model->parameters(), {.lr = a.lr});
  const tw::digits::DeviceData data = tw::digits::upload(train_set, a.model, device);
  tw::digits::Trainer trainer(*r.model, opt, data, a.batch, a.graph);
  const auto start = std::chrono::steady_clock::now();
  for (int e = 1; e <= epochs; ++e) {
    // Returns without waiting: the lines print as their values arrive (later steps, finish()).
    trainer.run_epoch(e, epochs, a.seed, verbose ? a.report_every : 0,
                      verbose ? print_progress : nullptr);
    r.steps += trainer.steps_per_epoch();
  }
  trainer.finish();  // the last lines
  if (const tw::graph::Step* step = trainer.step()) {
    r.eager = step->eager_calls();
    r.recorded = step->recordings();
    r.replayed = step->replays();
  }
  device.sync();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

// Data-parallel training over `devices` for `epochs` epochs; the step time in ms.
double train_parallel(const Args& a, const tw::digits::Dataset& train_set,
                      const std::vector<tw::Device>& devices, int epochs,
                      std::unique_ptr<tw::digits::DataParallelTrainer>& out, bool verbose) {
  out = std::make_unique<tw::digits::DataParallelTrainer>(a.model, devices, train_set, a.batch,
                                                          a.lr, a.seed);
  for (const tw::Device& d : devices) d.sync();
  const auto start = std::chrono::steady_clock::now();
  int64_t steps = 0;
  for (int e = 1; e <= epochs; ++e) {
    out->run_epoch(e, epochs, a.seed, verbose ? a.report_every : 0,
                   verbose ? print_progress : nullptr);
    steps += out->steps_per_epoch();
  }
  out->finish();  // every replica done, the last lines printed
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return 1e3 * s / static_cast<double>(steps);
}

int main_parallel(const Args& a, const tw::digits::Dataset& train_set,
                  const tw::digits::Dataset& test_set) {
  std::vector<std::unique_ptr<tw::Server>> hosted;
  std::vector<std::string> urls = a.servers;
  if (urls.empty()) {
    for (int i = 0; i < a.parallel; ++i) {
      hosted.push_back(tw::serve(tw::Device::cpu()));
      urls.push_back(hosted.back()->url());
    }
  }
  std::vector<tw::Device> devices;
  for (const std::string& u : urls) {
    devices.push_back(tw::Device::remote(u));
    devices.back().connect();
    std::printf("replica %zu: %s%s\n", devices.size() - 1, devices.back().str().c_str(),
                hosted.empty() ? "" : " (a server hosted in-process)");
  }
  std::unique_ptr<tw::digits::DataParallelTrainer> trainer;
  const double ms = train_parallel(a, train_set, devices, a.epochs, trainer, true);
  const tw::digits::DeviceData test = tw::digits::upload(test_set, a.model, devices[0]);
  const double acc = tw::digits::accuracy(trainer->model(0), test);
  constexpr double kTarget = 0.95;
  std::printf("test accuracy: %.1f%% (%" PRId64 "/%" PRId64 "), target >= %.0f%%: %s\n", 100 * acc,
              static_cast<int64_t>(acc * static_cast<double>(test.n) + 0.5), test.n, 100 * kTarget,
              acc >= kTarget ? "met" : "MISSED");
  const std::vector<std::string> differ = trainer->differing_parameters();
  for (const std::string& d : differ) std::printf("        %s differs\n", d.c_str());
  std::printf("replicas: %zu, parameters bit-identical on all of them: %s\n", devices.size(),
              differ.empty() ? "OK" : "FAILED");
  // The same loop on the first server alone, one epoch, for the step time beside it.
  std::unique_ptr<tw::digits::DataParallelTrainer> one;
  const double ms1 = train_parallel(a, train_set, {devices[0]}, 1, one, false);
  std::printf("time per step: %.2f ms on %zu servers, %.2f ms on 1 server (batch %" PRId64
              ", the same loop)\n",
              ms, devices.size(), ms1, a.batch);
  return acc >= kTarget && differ.empty() ? 0 : 1;
}

// A 64-bit FNV-1a hash of every parameter's bytes, in order: equal hashes, equal parameters.
uint64_t params_hash(const tw::nn::Module& model) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const auto& [name, p] : model.named_parameters())
    for (uint8_t b : p->value().to_bytes()) h = (h ^ b) * 0x100000001b3ull;
  return h;
}

// --checkpoint (and --failover): checkpointed training, resumed when DIR holds a checkpoint.
int main_checkpointed(const Args& a, const tw::digits::Dataset& train_set,
                      const tw::digits::Dataset& test_set) {
  tw::digits::ResumableOptions o;
  o.kind = a.model;
  o.epochs = a.epochs;
  o.batch = a.batch;
  o.lr = a.lr;
  o.seed = a.seed;
  o.graph = a.graph;
  o.checkpoint_dir = a.checkpoint;
  o.checkpoint_every = a.checkpoint_every;
  o.report_every = a.report_every;
  o.on_progress = print_progress;
  std::unique_ptr<tw::Server> hosted;
  std::vector<std::string> urls = a.servers;
  if (a.device == "remote" && urls.empty()) {
    hosted = tw::serve(tw::Device::cpu());
    urls.push_back(hosted->url());
  }
  tw::digits::ResumableRun run;
  double accuracy = 0;
  auto work = [&](const tw::Device& device) {
    std::printf("device: %s\n", device.str().c_str());
    run = tw::digits::train_resumable(train_set, device, o);
    if (run.resumed_from > 0)
      std::printf("resumed from the checkpoint at step %" PRId64 "\n", run.resumed_from);
    accuracy = tw::digits::accuracy(*run.model, tw::digits::upload(test_set, a.model, device));
  };
  int64_t redone = 0;
  if (a.device == "cpu") {
    work(tw::Device::cpu());
  } else if (a.failover) {
    tw::FailoverOptions f;
    int64_t last_step = 0;
    o.after_step = [&](int64_t step) { last_step = step; };
    f.on_failover = [&](const std::string& from, const std::string& to, const std::string& why) {
      std::printf("\nfailover: %s is gone (%s); resuming on %s\n", from.c_str(), why.c_str(),
                  to.c_str());
      const auto latest = tw::Checkpoint(a.checkpoint).latest();
      redone += last_step - (latest ? latest->step : 0);
    };
    tw::run_with_failover(urls, work, f);
  } else {
    work(tw::Device::remote(urls.front()));
  }
  std::printf("steps: %" PRId64 " run here of %" PRId64 ", %" PRId64
              " checkpoints saved into %s every %" PRId64 " steps\n",
              run.steps_run, run.total_steps, run.checkpoints, a.checkpoint.c_str(),
              a.checkpoint_every);
  if (a.failover) std::printf("failover: %" PRId64 " steps redone\n", redone);
  constexpr double kTarget = 0.95;
  std::printf("test accuracy: %.1f%%, target >= %.0f%%: %s\n", 100 * accuracy, 100 * kTarget,
              accuracy >= kTarget ? "met" : "MISSED");
  std::printf("final parameters: hash %016" PRIx64 "\n", params_hash(*run.model));
  return accuracy >= kTarget ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  try {
    const std::string path = a.data.empty() ? tw::digits::default_path() : a.data;
    const tw::digits::Dataset all = tw::digits::load(path);
    constexpr int64_t kTest = 360;
    const auto [train_set, test_set] = tw::digits::split(all, kTest, a.seed);
    std::printf("tensorwire: training a %s on handwritten digits\n",
                tw::digits::model_name(a.model));
    std::printf("data:   %s: %" PRId64 " images of 8x8 pixels, %" PRId64 " to train, %" PRId64
                " to test\n",
                path.c_str(), all.n, train_set.n, test_set.n);
    std::printf("        %s\n", tw::digits::kAttribution);
    if (a.parallel > 0) return main_parallel(a, train_set, test_set);
    if (!a.checkpoint.empty()) return main_checkpointed(a, train_set, test_set);

    std::unique_ptr<tw::Server> server;
    std::optional<tw::Device> remote;
    // --backend: the device the in-process server hosts, or the local device (--device cpu).
    const tw::Device backend =
        a.backend == "cpu" ? tw::Device::cpu() : tw::Device::local(a.backend);
    tw::Device device = backend;
    if (a.device == "remote") {
      std::string url = a.server;
      if (url.empty()) {
        server = tw::serve(backend);
        url = server->url();
      }
      remote = tw::Device::remote(url);
      remote->connect();
      device = *remote;
      std::printf("device: %s%s\n", device.str().c_str(),
                  server ? (", served in-process (" + server->limits_summary() + ")").c_str() : "");
    } else {
      std::printf("device: %s (local, %d intra-op threads)\n", device.str().c_str(),
                  tw::get_num_threads());
    }

    const tw::WireCounters wire0 = remote ? tw::wire_counters(*remote) : tw::WireCounters{};
    Run run = train(a, train_set, device, a.epochs, true);
    const tw::digits::DeviceData test = tw::digits::upload(test_set, a.model, device);
    const double acc = tw::digits::accuracy(*run.model, test);
    int64_t n_params = 0;
    for (const auto& p : run.model->parameters()) n_params += p->value().numel();
    std::printf("model:  %s, %" PRId64 " parameters, Adam lr %g, batch %" PRId64 "\n",
                tw::digits::model_name(a.model), n_params, a.lr, a.batch);
    constexpr double kTarget = 0.95;
    std::printf("test accuracy: %.1f%% (%" PRId64 "/%" PRId64 "), target >= %.0f%%: %s\n",
                100 * acc, static_cast<int64_t>(acc * static_cast<double>(test.n) + 0.5), test.n,
                100 * kTarget, acc >= kTarget ? "met" : "MISSED");
    std::printf("time per step: %.2f ms (%" PRId64 " steps in %.2f s)\n",
                1e3 * run.seconds / static_cast<double>(run.steps), run.steps, run.seconds);
    if (a.graph) {
      std::printf("graph:  training step cached: %" PRId64 " eager, %" PRId64 " recorded, %" PRId64
                  " replayed (--no-graph: every op of every step)\n",
                  run.eager, run.recorded, run.replayed);
    } else {
      std::printf("graph:  off (--no-graph)\n");
    }
    if (remote) {
      const tw::WireCounters w = tw::wire_counters(*remote);
      const double steps = static_cast<double>(run.steps);
      std::printf("wire:   %" PRIu64 " ops in %" PRIu64 " frames out (%s), %" PRIu64
                  " frames in (%s), %" PRIu64 " round trips\n",
                  w.ops - wire0.ops, w.frames_out - wire0.frames_out,
                  bytes_str(w.bytes_out - wire0.bytes_out).c_str(), w.frames_in - wire0.frames_in,
                  bytes_str(w.bytes_in - wire0.bytes_in).c_str(),
                  w.round_trips - wire0.round_trips);
      std::printf(
          "        per step: %.0f ops, %.2f frames out (%s), %.2f frames in (%s), %.2f round "
          "trips (data and parameters stay on the server)\n",
          static_cast<double>(w.ops - wire0.ops) / steps,
          static_cast<double>(w.frames_out - wire0.frames_out) / steps,
          bytes_str(
              static_cast<uint64_t>(static_cast<double>(w.bytes_out - wire0.bytes_out) / steps))
              .c_str(),
          static_cast<double>(w.frames_in - wire0.frames_in) / steps,
          bytes_str(static_cast<uint64_t>(static_cast<double>(w.bytes_in - wire0.bytes_in) / steps))
              .c_str(),
          static_cast<double>(w.round_trips - wire0.round_trips) / steps);
    }

    // Determinism: one epoch from the same seed, locally and remotely.
    bool identical = true;
    if (remote) {
      Run local = train(a, train_set, tw::Device::cpu(), 1, false);
      Run far = train(a, train_set, *remote, 1, false);
      const auto lp = local.model->named_parameters(), rp = far.model->named_parameters();
      int same = 0;
      for (size_t i = 0; i < lp.size(); ++i) {
        if (lp[i].second->value().to_bytes() == rp[i].second->value().to_bytes()) {
          ++same;
        } else {
          identical = false;
          std::printf("        %s differs\n", lp[i].first.c_str());
        }
      }
      std::printf("determinism: one epoch from seed %" PRIu64
                  " on cpu and on %s: %d/%zu parameters "
                  "bit-identical: %s\n",
                  a.seed, remote->str().c_str(), same, lp.size(), identical ? "OK" : "FAILED");
    }
    return acc >= kTarget && identical ? 0 : 1;
  } catch (const tw::Error& e) {
    std::fprintf(stderr, "\ntrain_digits: %s\n", e.what());
    return 1;
  }
}
