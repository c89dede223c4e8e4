// The tensorwire side of `make bench-lm` (bench/lm_bench.sh): the language model of
// apps/train_lm.cc trained for a fixed number of steps from one seed on the local CPU device and
// on a remote device served in-process (each step one replayed graph), timed; their parameters
// compared byte for byte; generation with the key/value cache timed on both; and a per-op profile
// of the step (eager ops on a server with op timing on). It writes the initial parameters as
// safetensors and the results as JSON for bench/lm_torch.py, which runs PyTorch on the same init
// and batches and prints the table.
//
//   tw_bench_lm OUT_DIR [--steps N] [--batch N] [--profile-steps N]
//   tw_bench_lm OUT_DIR --gen-serve 1
// The second form serves bench/lm_torch.py's interleaved generation rounds: it builds the model
// from the seed on the local device and on a remote device served in-process, generates once on
// each (recording their graphs), prints "ready", then answers each line "local" or "remote" on
// stdin with the tokens per second of one generation there.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>

#include "lm/lm.h"
#include "tensorwire/remote.h"
#include "tensorwire/server.h"

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Setup {
  int64_t steps = 50, batch = 16, profile_steps = 4;
  int64_t timed_from = 5;  // steps before this one are warm-up (eager, recording)
  int64_t gen_tokens = 127, gen_repeats = 3;
  double lr = 1e-3;
  uint64_t seed = 1;
  tw::nn::GPTConfig cfg;
};

struct Trained {
  std::unique_ptr<tw::nn::GPT> model;
  std::vector<double> losses;
  double step_ms = 0;  // median over steps timed_from..
};

// `s.steps` steps from the seed on each of `devs`, in lockstep (step i on every device, then
// step i + 1), so that a drift in the machine's speed weighs on all of them alike; every step's
// time waits for its loss (a read), so the steps' times are whole.
std::vector<Trained> train(const Setup& s, const std::vector<int64_t>& tokens,
                           const std::vector<tw::Device>& devs) {
  std::vector<Trained> out(devs.size());
  std::vector<std::unique_ptr<tw::lm::Trainer>> trainers;
  for (size_t d = 0; d < devs.size(); ++d) {
    tw::manual_seed(s.seed);
    out[d].model = std::make_unique<tw::nn::GPT>(s.cfg, tw::nn::Placement{devs[d], tw::kF32});
    trainers.push_back(
        std::make_unique<tw::lm::Trainer>(*out[d].model, s.lr, tokens, s.batch, s.seed, true));
  }
  std::vector<std::vector<double>> ms(devs.size());
  for (int64_t i = 0; i < s.steps; ++i) {
    for (size_t d = 0; d < devs.size(); ++d) {
      const auto t0 = Clock::now();
      out[d].losses.push_back(trainers[d]->step(i).item<float>());
      ms[d].push_back(1e3 * since(t0));
    }
  }
  for (size_t d = 0; d < devs.size(); ++d) {
    std::vector<double> timed(ms[d].begin() + s.timed_from, ms[d].end());
    std::sort(timed.begin(), timed.end());
    out[d].step_ms = timed[timed.size() / 2];
  }
  return out;
}

// Tokens per second of greedy generation with the cache (Generator::generate: the draw on the
// device) of s.gen_tokens tokens after a one-token prompt, best of the repeats; `wire` (for a
// remote device) gets the wire counters of the last repeat. use_graph false: every op of every
// token.
double generation(const Setup& s, tw::nn::GPT& model, bool use_graph,
                  std::pair<tw::WireCounters, tw::WireCounters>* wire = nullptr) {
  tw::nn::Generator gen(model, use_graph);
  const tw::Device dev = model.parameters()[0]->value().device();
  double best = 0;
  for (int64_t r = 0; r < s.gen_repeats; ++r) {
    dev.sync();
    if (wire && r + 1 == s.gen_repeats) wire->first = tw::wire_counters(dev);
    const auto t0 = Clock::now();
    const std::vector<int64_t> out = gen.generate({1}, s.gen_tokens, {.temperature = 0});
    best = std::max(best, static_cast<double>(out.size()) / since(t0));
  }
  if (wire) wire->second = tw::wire_counters(dev);
  return best;
}

// One greedy generation of s.gen_tokens tokens with the cache: tokens per second.
double generate_once(const Setup& s, tw::nn::Generator& gen, const tw::Device& dev) {
  dev.sync();
  const auto t0 = Clock::now();
  const std::vector<int64_t> out = gen.generate({1}, s.gen_tokens, {.temperature = 0});
  return static_cast<double>(out.size()) / since(t0);
}

// --gen-serve (the usage above). Generation's speed does not depend on the weights' values, so
// the untrained model from the seed stands for the trained one.
int gen_serve(const Setup& s) {
  std::unique_ptr<tw::Server> server = tw::serve(tw::Device::cpu());
  const tw::Device remote = tw::Device::remote(server->url());
  remote.connect();
  tw::manual_seed(s.seed);
  tw::nn::GPT local(s.cfg, {tw::Device::cpu(), tw::kF32});
  tw::manual_seed(s.seed);
  tw::nn::GPT far(s.cfg, {remote, tw::kF32});
  tw::nn::Generator gen_local(local, true), gen_remote(far, true);
  (void)generate_once(s, gen_local, tw::Device::cpu());
  (void)generate_once(s, gen_remote, remote);
  std::printf("ready\n");
  std::fflush(stdout);
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line == "local") {
      std::printf("%.1f\n", generate_once(s, gen_local, tw::Device::cpu()));
    } else if (line == "remote") {
      std::printf("%.1f\n", generate_once(s, gen_remote, remote));
    } else {
      std::printf("error: unknown request '%s' (local or remote)\n", line.c_str());
    }
    std::fflush(stdout);
  }
  return 0;
}

// GET http://127.0.0.1:PORT/metrics.
std::string http_get(const std::string& url) {
  const auto colon = url.rfind(':');
  const int port = std::atoi(url.c_str() + colon + 1);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    if (fd >= 0) ::close(fd);
    throw tw::Error("cannot connect to " + url);
  }
  const std::string req = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  (void)!::write(fd, req.data(), req.size());
  std::string out;
  char buf[1 << 14];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

// Per op struct: (seconds, count) from the Prometheus text's op latency histogram.
std::map<std::string, std::pair<double, double>> op_latencies(const std::string& text) {
  std::map<std::string, std::pair<double, double>> out;
  std::istringstream in(text);
  std::string line;
  for (const std::string stem :
       {"tensorwire_op_latency_seconds_sum{op=\"", "tensorwire_op_latency_seconds_count{op=\""}) {
    in.clear();
    in.seekg(0);
    while (std::getline(in, line)) {
      if (line.rfind(stem, 0) != 0) continue;
      const size_t q = line.find('"', stem.size());
      const std::string op = line.substr(stem.size(), q - stem.size());
      const double v = std::strtod(line.c_str() + line.rfind(' ') + 1, nullptr);
      (stem.find("_sum") != std::string::npos ? out[op].first : out[op].second) = v;
    }
  }
  return out;
}

std::string json_list(const std::vector<double>& v) {
  std::string s = "[";
  char buf[32];
  for (size_t i = 0; i < v.size(); ++i) {
    std::snprintf(buf, sizeof(buf), "%s%.9g", i ? ", " : "", v[i]);
    s += buf;
  }
  return s + "]";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: tw_bench_lm OUT_DIR [--steps N] [--batch N] [--profile-steps N]\n");
    return 2;
  }
  const std::string out_dir = argv[1];
  Setup s;
  bool serve_generation = false;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string f = argv[i];
    const int64_t v = std::atoll(argv[i + 1]);
    if (f == "--steps")
      s.steps = std::max<int64_t>(v, s.timed_from + 1);
    else if (f == "--batch")
      s.batch = v;
    else if (f == "--profile-steps")
      s.profile_steps = v;
    else if (f == "--gen-serve")
      serve_generation = v != 0;
  }
  try {
    const std::string data = tw::lm::default_path();
    const std::string text = tw::lm::load_text(data);
    const tw::lm::Vocab vocab(text);
    const std::vector<int64_t> tokens = vocab.encode(text);
    s.cfg = {.vocab_size = vocab.size(), .context = 128, .n_layer = 4, .n_head = 4, .n_embd = 192};
    if (serve_generation) return gen_serve(s);

    tw::manual_seed(s.seed);
    tw::save_safetensors(out_dir + "/init.safetensors", tw::nn::GPT(s.cfg));

    std::unique_ptr<tw::Server> server = tw::serve(tw::Device::cpu());
    const tw::Device remote = tw::Device::remote(server->url());
    remote.connect();
    std::fprintf(stderr, "tw_bench_lm: %" PRId64 " steps, local and remote in lockstep ...\n",
                 s.steps);
    const tw::WireCounters w0 = tw::wire_counters(remote);
    std::vector<Trained> both = train(s, tokens, {tw::Device::cpu(), remote});
    const tw::WireCounters w1 = tw::wire_counters(remote);
    Trained& local = both[0];
    Trained& far = both[1];
    bool identical = local.losses == far.losses;
    const auto lp = local.model->parameters(), rp = far.model->parameters();
    for (size_t i = 0; i < lp.size(); ++i)
      identical = identical && lp[i]->value().to_bytes() == rp[i]->value().to_bytes();

    std::fprintf(stderr, "tw_bench_lm: generation ...\n");
    const double gen_local = generation(s, *local.model, true);
    const double gen_local_eager = generation(s, *local.model, false);
    std::pair<tw::WireCounters, tw::WireCounters> gw;
    const double gen_remote = generation(s, *far.model, true, &gw);
    const auto& [g0, g1] = gw;
    const double gen_remote_eager = generation(s, *far.model, false);
    const double gen_n = static_cast<double>(s.gen_tokens);  // the last repeat's

    // The per-op profile: eager steps (no graph, so the server times each op) on a server with
    // op timing on, after two warm-up steps.
    std::fprintf(stderr, "tw_bench_lm: profile ...\n");
    tw::ServerOptions po;
    po.metrics = "tcp://127.0.0.1:0";
    std::unique_ptr<tw::Server> psrv = tw::serve(tw::Device::cpu(), po);
    const tw::Device pdev = tw::Device::remote(psrv->url());
    tw::manual_seed(s.seed);
    tw::nn::GPT pm(s.cfg, {pdev, tw::kF32});
    tw::lm::Trainer pt(pm, s.lr, tokens, s.batch, s.seed, false);
    for (int64_t i = 0; i < 2; ++i) (void)pt.step(i).item<float>();
    const auto before = op_latencies(http_get(psrv->metrics_url()));
    const auto p0 = Clock::now();
    for (int64_t i = 0; i < s.profile_steps; ++i) (void)pt.step(2 + i).item<float>();
    const double prof_step_ms = 1e3 * since(p0) / static_cast<double>(s.profile_steps);
    auto after = op_latencies(http_get(psrv->metrics_url()));
    std::vector<std::pair<double, std::string>> rows;
    double total = 0;
    for (auto& [op, v] : after) {
      const auto b = before.count(op) ? before.at(op) : std::pair<double, double>{0, 0};
      const double sec = (v.first - b.first) / static_cast<double>(s.profile_steps);
      const double n = (v.second - b.second) / static_cast<double>(s.profile_steps);
      if (n <= 0) continue;
      total += sec;
      char buf[160];
      std::snprintf(buf, sizeof(buf), "%-28s %8.1f ms  %6.0f ops  %8.1f us/op", op.c_str(),
                    1e3 * sec, n, 1e6 * sec / n);
      rows.emplace_back(sec, buf);
    }
    std::sort(rows.rbegin(), rows.rend());
    std::string profile;
    char line[200];
    std::snprintf(line, sizeof(line),
                  "per-op profile of one eager training step (server op timing, mean of %" PRId64
                  " steps; step %.1f ms, ops %.1f ms):\n",
                  s.profile_steps, prof_step_ms, 1e3 * total);
    profile += line;
    for (auto& [sec, r] : rows) {
      std::snprintf(line, sizeof(line), "  %s  %5.1f%%\n", r.c_str(), 100 * sec / total);
      profile += line;
    }
    std::fputs(profile.c_str(), stderr);
    std::ofstream(out_dir + "/profile.txt") << profile;

    const double steps = static_cast<double>(s.steps);
    std::ofstream js(out_dir + "/tw.json");
    char buf[2048];
    std::snprintf(
        buf, sizeof(buf),
        "{\"config\": {\"vocab\": %" PRId64 ", \"context\": %" PRId64 ", \"n_layer\": %" PRId64
        ", \"n_head\": %" PRId64 ", \"n_embd\": %" PRId64 ", \"tied\": %s, \"batch\": %" PRId64
        "},\n \"data\": \"%s\", \"threads\": %d, \"steps\": %" PRId64 ", \"timed_from\": %" PRId64
        ", \"lr\": %g, \"seed\": %" PRIu64
        ",\n \"step_ms_local\": %.3f, \"step_ms_remote\": %.3f,\n"
        " \"gen_tokens\": %" PRId64 ", \"gen_repeats\": %" PRId64
        ", \"gen_tps_local\": %.1f, \"gen_tps_remote\": %.1f,\n"
        " \"gen_tps_local_eager\": %.1f, \"gen_tps_remote_eager\": %.1f,\n"
        " \"gen_frames_out_per_token\": %.3f, \"gen_frames_in_per_token\": %.3f, "
        "\"gen_bytes_out_per_token\": %.1f,\n"
        " \"train_frames_out_per_step\": %.3f, \"train_bytes_out_per_step\": %.1f,\n"
        " \"bit_identical\": %s,\n \"losses\": ",
        s.cfg.vocab_size, s.cfg.context, s.cfg.n_layer, s.cfg.n_head, s.cfg.n_embd,
        s.cfg.tied ? "true" : "false", s.batch, data.c_str(), tw::get_num_threads(), s.steps,
        s.timed_from, s.lr, s.seed, local.step_ms, far.step_ms, s.gen_tokens, s.gen_repeats,
        gen_local, gen_remote, gen_local_eager, gen_remote_eager,
        static_cast<double>(g1.frames_out - g0.frames_out) / gen_n,
        static_cast<double>(g1.frames_in - g0.frames_in) / gen_n,
        static_cast<double>(g1.bytes_out - g0.bytes_out) / gen_n,
        static_cast<double>(w1.frames_out - w0.frames_out) / steps,
        static_cast<double>(w1.bytes_out - w0.bytes_out) / steps, identical ? "true" : "false");
    js << buf << json_list(local.losses) << ",\n \"remote_losses\": " << json_list(far.losses)
       << "}\n";
    std::fprintf(stderr, "tw_bench_lm: wrote %s/tw.json\n", out_dir.c_str());
    return 0;
  } catch (const tw::Error& e) {
    std::fprintf(stderr, "tw_bench_lm: %s\n", e.what());
    return 1;
  }
}
