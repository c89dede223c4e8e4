// A character-level GPT trained on Genesis and Exodus (King James Version), on a remote device
// served by a compute server this process hosts on an ephemeral loopback port (or on an external
// server, or locally), then sampled with a key/value cache.
//
//   train_lm [--device remote|cpu] [--server tcp://host:port] [--steps N] [--batch N]
//            [--context N] [--layers N] [--heads N] [--embd N] [--dropout P] [--lr X] [--seed N]
//            [--report-every N] [--data PATH] [--no-graph] [--save PATH]
//            [--checkpoint DIR [--checkpoint-every N]]
//            [--sample N] [--temperature X] [--top-k N] [--prompt TEXT] [--quantize q8|q4]
//   train_lm --servers N [--server URL]...   (data-parallel over N servers)
//   train_lm --pipeline N [--micro-batches M] [--server URL]...  (one model split over N servers)
//   train_lm --tensor-parallel N [--server URL]...  (every block split over N servers)
//
// With --checkpoint DIR it saves a tw::Checkpoint every N steps (default 100) into DIR: the
// parameters, Adam's state, the random generator's state (dropout's masks) and the step, in the
// background (Checkpoint::save_async: training goes on while they are downloaded and written).
// When DIR already holds one, the run resumes from the newest and ends with the parameters an
// uninterrupted run ends with, bit for bit; a checkpoint saved with other settings (--seed,
// --batch, --lr, --dropout, --heads, the text) is refused.
//
// Each step uploads the batch's window offsets only (the text stays on the device) and, unless
// --no-graph, runs as one replayed graph (tw::graph::Step). With --servers N (or --server given
// more than once) it trains data-parallel: one replica per server, each batch split over them,
// gradients summed with tw::dist::all_reduce; the replicas' parameters are then checked
// bit-identical. With --pipeline N the model is split instead (tw::nn::place, by the servers'
// free memory): each server holds its layers only, the activations and their gradients cross
// from server to server, each batch in M micro-batches (default 4) so that the servers work at
// the same time, and generation keeps each layer's cache on its server. With --tensor-parallel N
// every block's heads and MLP are split over the servers (tw::nn::TensorParallelGPT), the
// partial sums added with all_reduce. The exit status is 0 when the loss fell below 2.0 nats per
// character (--target X: below X; --target 0: any loss, for a short demonstration run such as `make
// run`'s).
// --quantize q8|q4 packs the trained model's Linear weights into ggml Q8_0/Q4_0 blocks
// (tw::nn::quantize, weight-only) before sampling: the sample then runs on the packed weights.
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "common/cli.h"
#include "lm/lm.h"
#include "tensorwire/remote.h"
#include "tensorwire/server.h"

namespace {

struct Args {
  std::string device = "remote";
  std::vector<std::string> servers;  // every --server, in order
  int parallel = 0;                  // --servers N
  int pipeline = 0;                  // --pipeline N
  int64_t micro_batches = 4;         // --micro-batches M (with --pipeline)
  int tensor_parallel = 0;           // --tensor-parallel N
  int64_t steps = 400, batch = 16, context = 128, layers = 4, heads = 4, embd = 192;
  double dropout = 0, lr = 1e-3;
  uint64_t seed = 1;
  int64_t report_every = 10;
  std::string data, save, prompt = "And God said";
  std::string checkpoint;  // --checkpoint DIR
  int64_t checkpoint_every = 0;
  bool graph = true;
  int64_t sample = -1;  // -1: fill the context
  double temperature = 0.8;
  int64_t top_k = 10;
  double target = 2.0;   // nats/char the last steps' loss must be under (0: no target)
  std::string quantize;  // --quantize q8|q4: sample with packed weights ("": f32)
};

[[noreturn]] void usage(const std::string& problem) {
  std::fprintf(stderr,
               "train_lm: %s\n"
               "usage: train_lm [--device remote|cpu] [--server tcp://host:port] [--steps N] "
               "[--batch N]\n"
               "                [--context N] [--layers N] [--heads N] [--embd N] [--dropout P] "
               "[--lr X]\n"
               "                [--seed N] [--report-every N] [--data PATH] [--no-graph] [--save "
               "PATH]\n"
               "                [--checkpoint DIR [--checkpoint-every N]]  (resumes when DIR holds "
               "one)\n"
               "                [--sample N] [--temperature X] [--top-k N] [--prompt TEXT]\n"
               "                [--quantize q8|q4]  (sample with packed weights)\n"
               "                [--target NATS]  (the loss to reach; 0: none)\n"
               "       train_lm --servers N [--server URL]... [--steps N] ...\n"
               "       train_lm --pipeline N [--micro-batches M] [--server URL]... [--steps N] "
               "...\n"
               "       train_lm --tensor-parallel N [--server URL]... [--steps N] ...\n",
               problem.c_str());
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  tw::apps::Flags f(argc, argv, usage);
  while (f.next()) {
    if (f.is("--device")) {
      a.device = f.value();
      if (a.device != "remote" && a.device != "cpu")
        usage("--device takes remote or cpu, got '" + a.device + "'");
    } else if (f.is("--server")) {
      a.servers.push_back(f.value());
    } else if (f.is("--servers")) {
      a.parallel = static_cast<int>(f.count(1));
      if (a.parallel > 64) usage("--servers takes 1 to 64");
    } else if (f.is("--pipeline")) {
      a.pipeline = static_cast<int>(f.count(1));
      if (a.pipeline > 64) usage("--pipeline takes 1 to 64");
    } else if (f.is("--tensor-parallel")) {
      a.tensor_parallel = static_cast<int>(f.count(1));
      if (a.tensor_parallel > 64) usage("--tensor-parallel takes 1 to 64");
    } else if (f.is("--micro-batches")) {
      a.micro_batches = f.count(1);
    } else if (f.is("--steps")) {
      a.steps = f.count(1);
    } else if (f.is("--batch")) {
      a.batch = f.count(1);
    } else if (f.is("--context")) {
      a.context = f.count(2);
    } else if (f.is("--layers")) {
      a.layers = f.count(0);
    } else if (f.is("--heads")) {
      a.heads = f.count(1);
    } else if (f.is("--embd")) {
      a.embd = f.count(1);
    } else if (f.is("--dropout")) {
      a.dropout = f.number();
      if (!(a.dropout >= 0 && a.dropout < 1)) usage("--dropout takes a value in [0, 1)");
    } else if (f.is("--lr")) {
      a.lr = f.number();
      if (!(a.lr > 0)) usage("--lr must be > 0");
    } else if (f.is("--seed")) {
      a.seed = static_cast<uint64_t>(f.count(0));
    } else if (f.is("--report-every")) {
      a.report_every = f.count(1);
    } else if (f.is("--data")) {
      a.data = f.value();
    } else if (f.is("--save")) {
      a.save = f.value();
    } else if (f.is("--checkpoint")) {
      a.checkpoint = f.value();
    } else if (f.is("--checkpoint-every")) {
      a.checkpoint_every = f.count(1);
    } else if (f.is("--no-graph")) {
      a.graph = false;
    } else if (f.is("--sample")) {
      a.sample = f.count(0);
    } else if (f.is("--temperature")) {
      a.temperature = f.number();
    } else if (f.is("--top-k")) {
      a.top_k = f.count(0);
    } else if (f.is("--prompt")) {
      a.prompt = f.value();
    } else if (f.is("--quantize")) {
      a.quantize = f.value();
      if (a.quantize != "q8" && a.quantize != "q4") usage("--quantize takes q8 or q4");
    } else if (f.is("--target")) {
      a.target = f.number();
      if (!(a.target >= 0)) usage("--target must be >= 0 (0: no target)");
    } else if (f.is("--help") || f.is("-h")) {
      usage("trains a character-level language model on a remote device");
    } else {
      usage("unknown flag " + f.flag());
    }
  }
  if (a.embd % a.heads != 0) usage("--embd must be a multiple of --heads");
  if (!a.servers.empty() && a.device == "cpu")
    usage("--server names a remote device; drop --device cpu");
  if (a.tensor_parallel > 0) {
    if (a.pipeline > 0) usage("--pipeline and --tensor-parallel: choose one");
    a.pipeline = a.tensor_parallel;  // the same devices and checks below
    a.micro_batches = 1;
    if (a.heads % a.tensor_parallel != 0)
      usage("--tensor-parallel N needs --heads to be a multiple of N");
  }
  if (a.pipeline > 0) {
    if (a.parallel > 0) usage("--pipeline and --servers: choose one");
    if (a.device == "cpu") usage("--pipeline splits the model over servers; drop --device cpu");
    if (!a.servers.empty() && a.servers.size() != static_cast<size_t>(a.pipeline))
      usage("--pipeline N with --server URLs: give N URLs, or none to host N servers here");
    if (a.batch % a.micro_batches != 0) usage("--batch must be a multiple of --micro-batches");
    if (!a.checkpoint.empty()) usage("--checkpoint trains on one device; drop --pipeline");
    if (a.dropout > 0) usage("--pipeline trains without dropout");
  }
  if (a.servers.size() > 1 && a.parallel == 0 && a.pipeline == 0)
    a.parallel = static_cast<int>(a.servers.size());
  if (a.parallel > 0 && !a.servers.empty() && a.servers.size() != static_cast<size_t>(a.parallel))
    usage("--servers N with --server URLs: give N URLs, or none to host N servers here");
  if (a.parallel > 0 && a.device == "cpu")
    usage("--servers trains on remote devices; drop --device cpu");
  if (a.parallel > a.batch) usage("--batch must be at least the number of servers");
  if (a.checkpoint_every > 0 && a.checkpoint.empty())
    usage("--checkpoint-every needs --checkpoint DIR");
  if (!a.checkpoint.empty() && a.checkpoint_every == 0) a.checkpoint_every = 100;
  if (!a.checkpoint.empty() && (a.parallel > 0 || a.servers.size() > 1))
    usage("--checkpoint trains on one device; drop --servers");
  if (a.prompt.empty()) a.prompt = "\n";
  if (static_cast<int64_t>(a.prompt.size()) >= a.context)
    usage("--prompt must be shorter than --context");
  // Dropout draws its masks on the host, which a replayed graph would freeze.
  if (a.dropout > 0 && a.graph) {
    std::printf("note: --dropout > 0 trains without the graph (a replay would reuse one mask)\n");
    a.graph = false;
  }
  return a;
}

void print_progress(int64_t step, int64_t steps, double loss, double tokens_per_s) {
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(kWidth * step / std::max<int64_t>(steps, 1));
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(kWidth, '.');
  std::printf("\rstep %5" PRId64 "/%" PRId64 " [%s] loss %.4f  %8.0f tokens/s", step, steps,
              bar.c_str(), loss, tokens_per_s);
  if (step == steps) std::printf("\n");
  std::fflush(stdout);
}

// One replica of data-parallel training.
struct Replica {
  std::unique_ptr<tw::nn::GPT> model;
  std::unique_ptr<tw::optim::Adam> opt;
  tw::Tensor text;
};

// --pipeline N: the model split over the devices, trained and sampled as a pipeline.
int train_pipeline(const Args& a, const tw::nn::GPTConfig& cfg, const tw::lm::Vocab& vocab,
                   const std::vector<int64_t>& tokens, const std::vector<int64_t>& prompt,
                   const std::vector<tw::Device>& devices) {
  tw::manual_seed(a.seed);
  tw::nn::GPT model(cfg);  // on the host; place() uploads each layer to its own server
  const bool tp = a.tensor_parallel > 0;
  std::unique_ptr<tw::nn::TensorParallelGPT> tpm;
  std::unique_ptr<tw::nn::Pipeline> pipe;
  if (tp) {
    tpm = std::make_unique<tw::nn::TensorParallelGPT>(model, devices);
    std::printf("tensor-parallel over %zu servers: %" PRId64
                " heads and the MLP of each block split, all_reduce twice a block\n",
                devices.size(), a.heads / a.tensor_parallel);
  } else {
    // Adam holds a gradient and two moments beside each parameter.
    const tw::nn::LayerPlan plan =
        tw::nn::place(model, devices, {.layers = {}, .memory_factor = 4});
    std::printf("pipeline over %zu servers, %" PRId64 " micro-batches: %s\n", devices.size(),
                a.micro_batches, plan.to_string().c_str());
    pipe = std::make_unique<tw::nn::Pipeline>(model, plan, a.micro_batches);
  }
  tw::optim::Adam opt(tp ? tpm->parameters() : model.parameters(), {.lr = a.lr});
  const auto n = static_cast<int64_t>(tokens.size());
  const tw::Tensor text_first = tw::from_vector<int64_t>(tokens, {n}, devices.front());
  // The targets where the loss is taken: the last stage of a pipeline, the first device with
  // tensor parallelism.
  const tw::Device& ydev = tp ? devices.front() : devices.back();
  const tw::Tensor text_last =
      ydev == devices.front() ? text_first : tw::from_vector<int64_t>(tokens, {n}, ydev);
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  double first = 0, last = 0;
  tw::Tensor window;
  int64_t in_window = 0;
  for (int64_t s = 0; s < a.steps; ++s) {
    const std::vector<int64_t> offs = tw::lm::batch_offsets(n, a.context, a.batch, a.seed, s);
    const tw::Tensor x =
        tw::lm::windows(text_first, tw::from_vector<int64_t>(offs, {a.batch}, devices.front()),
                        a.context)
            .first;
    const tw::Tensor y =
        tw::lm::windows(text_last, tw::from_vector<int64_t>(offs, {a.batch}, ydev), a.context)
            .second;
    opt.zero_grad();
    tw::Tensor loss;
    if (tp) {
      loss = tpm->loss(x, y);
      loss.backward();
      tpm->reduce_grads();
      loss = loss.detach();
    } else {
      loss = pipe->forward_backward(x, y);
    }
    opt.step();
    {
      tw::NoGradGuard no_grad;
      window = window.defined() ? window + loss : loss;
    }
    ++in_window;
    if (s == 0) first = loss.item<float>();
    if ((s + 1) % a.report_every == 0 || s + 1 == a.steps) {
      last = window.item<float>() / static_cast<double>(in_window);
      window = tw::Tensor();
      in_window = 0;
      const double secs = std::chrono::duration<double>(Clock::now() - start).count();
      print_progress(s + 1, a.steps, last,
                     static_cast<double>((s + 1) * a.batch * a.context) / secs);
    }
  }
  for (const tw::Device& d : devices) d.sync();
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  const double n_run = static_cast<double>(std::max<int64_t>(a.steps, 1));
  std::printf("time per step: %.1f ms (%" PRId64 " steps in %.1f s, %.0f tokens/s)\n",
              1e3 * secs / n_run, a.steps, secs,
              static_cast<double>(a.steps * a.batch * a.context) / secs);
  const double bound = a.target > 0 ? a.target : std::numeric_limits<double>::infinity();
  std::printf("loss:   %.3f at the first step, %.3f over the last steps; %s\n", first, last,
              a.target > 0 ? (last < bound ? "target met" : "target MISSED") : "no target");
  const int64_t room = a.context - static_cast<int64_t>(prompt.size());
  const int64_t n_new = a.sample < 0 ? room : std::min(a.sample, room);
  const auto g0 = Clock::now();
  const tw::nn::SampleOptions so{.temperature = a.temperature, .top_k = a.top_k, .seed = a.seed};
  const std::vector<int64_t> out =
      tp ? tpm->generate(prompt, n_new, so)
         : tw::nn::PipelineGenerator(*pipe).generate(prompt, n_new, so);
  const double gs = std::chrono::duration<double>(Clock::now() - g0).count();
  std::printf("sample (temperature %g, top-k %" PRId64
              ", %.0f tokens/s, each server holding its own KV cache):\n",
              a.temperature, a.top_k,
              static_cast<double>(prompt.size() + out.size()) / std::max(gs, 1e-9));
  std::printf("------\n%s%s\n------\n", a.prompt.c_str(), vocab.decode(out).c_str());
  return last < bound ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  try {
    const std::string path = a.data.empty() ? tw::lm::default_path() : a.data;
    const std::string text = tw::lm::load_text(path);
    const tw::lm::Vocab vocab(text);
    const std::vector<int64_t> tokens = vocab.encode(text);
    const std::vector<int64_t> prompt = vocab.encode(a.prompt);
    std::printf("tensorwire: training a character-level GPT\n");
    std::printf("data:   %s: %zu characters, %" PRId64 " distinct\n", path.c_str(), text.size(),
                vocab.size());
    std::printf("        %s\n", tw::lm::kAttribution);

    // The devices: N servers (data-parallel or a pipeline), one remote device, or the local CPU.
    std::vector<std::unique_ptr<tw::Server>> hosted;
    std::vector<tw::Device> devices;
    const int n_remote = a.device == "cpu" ? 0 : std::max({a.parallel, a.pipeline, 1});
    std::vector<std::string> urls = a.servers;
    while (static_cast<int>(urls.size()) < n_remote) {
      hosted.push_back(tw::serve(tw::Device::cpu()));
      urls.push_back(hosted.back()->url());
    }
    for (const std::string& u : urls) {
      devices.push_back(tw::Device::remote(u));
      devices.back().connect();
      std::printf("device: %s%s\n", devices.back().str().c_str(),
                  hosted.empty()
                      ? ""
                      : (", served in-process (" + hosted[0]->limits_summary() + ")").c_str());
    }
    if (devices.empty()) {
      devices.push_back(tw::Device::cpu());
      std::printf("device: cpu (local, %d intra-op threads)\n", tw::get_num_threads());
    }

    const tw::nn::GPTConfig cfg{.vocab_size = vocab.size(),
                                .context = a.context,
                                .n_layer = a.layers,
                                .n_head = a.heads,
                                .n_embd = a.embd,
                                .dropout = a.dropout};
    if (a.pipeline > 0) return train_pipeline(a, cfg, vocab, tokens, prompt, devices);
    std::vector<Replica> reps;
    for (const tw::Device& d : devices) {
      tw::manual_seed(a.seed);  // the same initial parameters on every replica
      Replica r;
      r.model = std::make_unique<tw::nn::GPT>(cfg, tw::nn::Placement{d, tw::kF32});
      reps.push_back(std::move(r));
    }
    int64_t n_params = 0;
    for (const auto& p : reps[0].model->parameters()) n_params += p->value().numel();
    std::printf("model:  GPT, %" PRId64 " layers, %" PRId64 " heads, d=%" PRId64
                ", context %" PRId64 ", vocab %" PRId64 ", %" PRId64
                " parameters; Adam lr %g, batch %" PRId64 " x %" PRId64 " tokens\n",
                a.layers, a.heads, a.embd, a.context, vocab.size(), n_params, a.lr, a.batch,
                a.context);
    std::printf("        loss at chance: ln(%" PRId64 ") = %.3f nats/char\n", vocab.size(),
                std::log(static_cast<double>(vocab.size())));

    std::unique_ptr<tw::lm::Trainer> single;
    std::unique_ptr<tw::dist::Group> group;
    std::unique_ptr<tw::Checkpoint> ckpt;
    std::map<std::string, std::string> run;  // what a checkpoint records and a resume checks
    int64_t start_step = 0;
    if (reps.size() == 1) {
      single =
          std::make_unique<tw::lm::Trainer>(*reps[0].model, a.lr, tokens, a.batch, a.seed, a.graph);
      if (!a.checkpoint.empty()) {
        ckpt = std::make_unique<tw::Checkpoint>(a.checkpoint);
        run = tw::lm::run_settings(cfg, a.lr, a.batch, a.seed, static_cast<int64_t>(tokens.size()));
        start_step = single->restore(*ckpt, run);
        if (start_step > 0) {
          std::printf("resumed from the checkpoint at step %" PRId64 " in %s\n", start_step,
                      a.checkpoint.c_str());
        }
        std::printf("checkpoints: every %" PRId64 " steps into %s, saved in the background\n",
                    a.checkpoint_every, a.checkpoint.c_str());
      }
    } else {
      for (size_t i = 0; i < reps.size(); ++i) {
        reps[i].opt = std::make_unique<tw::optim::Adam>(reps[i].model->parameters(),
                                                        tw::optim::AdamOptions{.lr = a.lr});
        reps[i].text =
            tw::from_vector<int64_t>(tokens, {static_cast<int64_t>(tokens.size())}, devices[i]);
      }
      group = std::make_unique<tw::dist::Group>(devices);
      std::printf(
          "data-parallel over %zu servers: each batch split in %zu shards, gradients "
          "summed with all_reduce\n",
          reps.size(), reps.size());
    }

    // One data-parallel step: every replica's weighted shard loss (summing to the batch's mean).
    auto parallel_step = [&](int64_t s) {
      const std::vector<int64_t> offs =
          tw::lm::batch_offsets(static_cast<int64_t>(tokens.size()), a.context, a.batch, a.seed, s);
      const size_t k = reps.size();
      std::vector<tw::Tensor> flat(k), losses(k);
      for (size_t i = 0; i < k; ++i) {
        const int64_t lo = a.batch * static_cast<int64_t>(i) / static_cast<int64_t>(k);
        const int64_t hi = a.batch * static_cast<int64_t>(i + 1) / static_cast<int64_t>(k);
        Replica& r = reps[i];
        const tw::Tensor o = tw::from_vector<int64_t>(
            std::vector<int64_t>(offs.begin() + lo, offs.begin() + hi), {hi - lo}, devices[i]);
        const auto [x, y] = tw::lm::windows(r.text, o, a.context);
        const tw::Tensor loss =
            r.model->loss(x, y) * (static_cast<double>(hi - lo) / static_cast<double>(a.batch));
        r.opt->zero_grad();
        loss.backward();
        tw::NoGradGuard no_grad;
        std::vector<tw::Tensor> grads;
        for (const auto& p : r.model->parameters()) grads.push_back(p->grad().reshape({-1}));
        flat[i] = tw::cat(grads, 0);
        losses[i] = loss.detach();
      }
      tw::dist::all_reduce(flat, tw::dist::ReduceOp::kSum, *group);
      for (size_t i = 0; i < k; ++i) {
        tw::NoGradGuard no_grad;
        int64_t at = 0;
        for (const auto& p : reps[i].model->parameters()) {
          const int64_t m = p->value().numel();
          tw::Tensor v = p->value();
          v.set_grad(flat[i].narrow(0, at, m).reshape(p->value().shape()));
          at += m;
        }
        reps[i].opt->step();
      }
      return losses;
    };

    const tw::WireCounters wire0 = n_remote ? tw::wire_counters(devices[0]) : tw::WireCounters{};
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    std::vector<tw::Tensor> window(reps.size());  // per replica: the window's loss sum
    double first = 0, last = 0;
    int64_t in_window = 0;
    int64_t n_ckpt = 0;
    double ckpt_stall_ms = 0;  // the loop's time inside save_async (its snapshot)
    for (int64_t s = start_step; s < a.steps; ++s) {
      const std::vector<tw::Tensor> l =
          single ? std::vector<tw::Tensor>{single->step(s)} : parallel_step(s);
      {
        tw::NoGradGuard no_grad;
        for (size_t i = 0; i < l.size(); ++i)
          window[i] = window[i].defined() ? window[i] + l[i] : l[i];
      }
      ++in_window;
      if (ckpt && (s + 1) % a.checkpoint_every == 0) {
        const auto t = Clock::now();
        single->save(*ckpt, s + 1, run);
        ckpt_stall_ms += std::chrono::duration<double, std::milli>(Clock::now() - t).count();
        ++n_ckpt;
      }
      if (s == 0) {
        for (const tw::Tensor& t : l) first += t.item<float>();
      }
      if ((s + 1) % a.report_every == 0 || s + 1 == a.steps) {
        double sum = 0;
        for (const tw::Tensor& w : window) sum += w.item<float>();
        last = sum / static_cast<double>(in_window);
        window.assign(reps.size(), tw::Tensor());
        in_window = 0;
        const double secs = std::chrono::duration<double>(Clock::now() - start).count();
        print_progress(s + 1, a.steps, last,
                       static_cast<double>((s + 1 - start_step) * a.batch * a.context) / secs);
      }
    }
    for (const tw::Device& d : devices) d.sync();
    const auto w0 = Clock::now();
    if (ckpt) (void)ckpt->wait();  // the last save_async, durable
    const double ckpt_wait_ms =
        std::chrono::duration<double, std::milli>(Clock::now() - w0).count();
    const double secs = std::chrono::duration<double>(Clock::now() - start).count();
    const int64_t steps_run = std::max<int64_t>(a.steps - start_step, 0);
    const double n_run = static_cast<double>(std::max<int64_t>(steps_run, 1));
    std::printf("time per step: %.1f ms (%" PRId64 " steps in %.1f s, %.0f tokens/s)\n",
                1e3 * secs / n_run, steps_run, secs,
                static_cast<double>(steps_run * a.batch * a.context) / secs);
    if (ckpt) {
      std::printf("checkpoints: %" PRId64
                  " saved into %s (training stalled %.1f ms for them in "
                  "all, then %.1f ms waiting for the last to be durable)\n",
                  n_ckpt, a.checkpoint.c_str(), ckpt_stall_ms, ckpt_wait_ms);
    }
    if (single && single->graph_step()) {
      const tw::graph::Step& g = *single->graph_step();
      std::printf("graph:  training step: %" PRId64 " eager, %" PRId64 " recorded, %" PRId64
                  " replayed (--no-graph: every op of every step)\n",
                  g.eager_calls(), g.recordings(), g.replays());
    }
    if (n_remote) {
      const tw::WireCounters w = tw::wire_counters(devices[0]);
      const double n = n_run;
      std::printf(
          "wire:   per step %.1f ops, %.2f frames out (%.0f B), %.2f frames in, %.2f "
          "round trips (the text and parameters stay on the server)\n",
          static_cast<double>(w.ops - wire0.ops) / n,
          static_cast<double>(w.frames_out - wire0.frames_out) / n,
          static_cast<double>(w.bytes_out - wire0.bytes_out) / n,
          static_cast<double>(w.frames_in - wire0.frames_in) / n,
          static_cast<double>(w.round_trips - wire0.round_trips) / n);
    }
    const double bound = a.target > 0 ? a.target : std::numeric_limits<double>::infinity();
    char verdict[96] = "no target";
    if (a.target > 0) {
      std::snprintf(verdict, sizeof verdict, "target < %.1f nats/char: %s", a.target,
                    last < bound ? "met" : "MISSED");
    }
    if (steps_run == 0) {
      std::printf("loss:   not measured (the checkpoint was already at step %" PRId64 ")\n",
                  start_step);
      last = 0;  // nothing trained: the checkpoint's run was judged when it ran
    } else if (start_step > 0) {
      std::printf("loss:   %.3f over the last %" PRId64 " steps (resumed at step %" PRId64
                  "); %s\n",
                  last, std::min(a.report_every, steps_run), start_step, verdict);
    } else {
      std::printf("loss:   %.3f at the first step, %.3f over the last %" PRId64 " steps; %s\n",
                  first, last, std::min(a.report_every, a.steps), verdict);
    }

    bool identical = true;
    if (reps.size() > 1) {
      const auto p0 = reps[0].model->named_parameters();
      int same = 0;
      for (size_t j = 0; j < p0.size(); ++j) {
        bool ok = true;
        for (size_t i = 1; i < reps.size(); ++i) {
          ok = ok && reps[i].model->named_parameters()[j].second->value().to_bytes() ==
                         p0[j].second->value().to_bytes();
        }
        if (!ok) std::printf("        %s differs between replicas\n", p0[j].first.c_str());
        same += ok;
        identical = identical && ok;
      }
      std::printf("replicas: %zu, %d/%zu parameters bit-identical on all of them: %s\n",
                  reps.size(), same, p0.size(), identical ? "OK" : "FAILED");
    }
    if (!a.save.empty()) {
      tw::save_safetensors(a.save, *reps[0].model, {{"vocab", vocab.chars}});
      std::printf("saved:  %s\n", a.save.c_str());
    }

    if (!a.quantize.empty()) {
      const int packed = tw::nn::quantize(*reps[0].model, a.quantize);
      std::printf("quantized: %d Linear layers' weights packed as %s (weight-only)\n", packed,
                  a.quantize == "q8" ? "Q8_0" : "Q4_0");
    }
    // A sample with the key/value cache: one graph step per character.
    const int64_t room = a.context - static_cast<int64_t>(prompt.size());
    const int64_t n_new = a.sample < 0 ? room : std::min(a.sample, room);
    tw::nn::Generator gen(*reps[0].model);
    const auto g0 = Clock::now();
    const std::vector<int64_t> out = gen.generate(
        prompt, n_new, {.temperature = a.temperature, .top_k = a.top_k, .seed = a.seed});
    const double gs = std::chrono::duration<double>(Clock::now() - g0).count();
    std::printf("sample (temperature %g, top-k %" PRId64 ", %.0f tokens/s with the KV cache):\n",
                a.temperature, a.top_k,
                static_cast<double>(prompt.size() + out.size()) / std::max(gs, 1e-9));
    std::printf("------\n%s%s\n------\n", a.prompt.c_str(), vocab.decode(out).c_str());
    return last < bound && identical ? 0 : 1;
  } catch (const tw::Error& e) {
    std::fprintf(stderr, "\ntrain_lm: %s\n", e.what());
    return 1;
  }
}
