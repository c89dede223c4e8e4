// One model over several servers (tensorwire/split.h), on servers this process hosts on
// 127.0.0.1 port 0: placement by the free memory the servers report (and its refusal), a GPT
// too big for one server's --max-memory run split over two with its forward equal to the unsplit
// model's bit for bit, pipelined training equal to the unsplit run with the same micro-batching
// bit for bit, generation with each server holding its layers' caches, and the activations never
// passing through the client.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "tensorwire/optim.h"
#include "tensorwire/remote.h"
#include "tensorwire/server.h"
#include "tensorwire/tensorwire.h"

namespace tw {
namespace {

nn::GPTConfig small() {
  return {.vocab_size = 32, .context = 16, .n_layer = 4, .n_head = 2, .n_embd = 32};
}

// Bytes of the parameters of small(): 4 blocks of 12 704 floats, wte and head 1024, wpe 512,
// ln_f 64.
constexpr uint64_t kModelBytes = (4 * 12704 + 1024 + 512 + 64 + 1024) * 4;

std::unique_ptr<Server> host(uint64_t max_memory) {
  ServerOptions o;
  o.max_memory_bytes = max_memory;
  o.worker_threads = 1;
  return serve(Device::cpu(), o);
}

std::vector<uint8_t> bytes_of(const Tensor& t) { return t.to_bytes(); }

Tensor tokens(int64_t b, int64_t t, int seed, const Device& d) {
  std::vector<int64_t> v(static_cast<size_t>(b * t));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int64_t>((i * 7 + seed * 5) % 32);
  return from_vector<int64_t>(v, {b, t}, d);
}

// One big server (the unsplit model's) and two for the split one.
struct Servers {
  std::unique_ptr<Server> big = host(64 << 20), a = host(16 << 20), b = host(16 << 20);
  Device dbig = Device::remote(big->url()), da = Device::remote(a->url()),
         db = Device::remote(b->url());
};

TEST(Split, StatsReportTheServersMemory) {
  auto s = host(3 << 20);
  const Device d = Device::remote(s->url());
  const RemoteStats st = remote_stats(d);
  EXPECT_EQ(st.max_memory_bytes, uint64_t{3} << 20);
  const Tensor x = zeros({1024}, kF32, d);
  d.sync();
  EXPECT_GE(remote_stats(d).memory_used_bytes, 4096u);
  EXPECT_LE(nn::free_memory(d), (uint64_t{3} << 20) - 4096);
}

TEST(Split, PlacesByFreeMemoryAndUploadsEachLayerToItsServerOnly) {
  // 3 : 1 free memory: about three quarters of the model on the first server.
  auto a = host(3 * kModelBytes / 4 + 40000), b = host(kModelBytes / 4 + 40000);
  const Device da = Device::remote(a->url()), db = Device::remote(b->url());
  manual_seed(0);
  nn::GPT model(small());
  EXPECT_EQ(model.layers().size(), 6u);
  const nn::LayerPlan plan = nn::place(model, {da, db});
  ASSERT_EQ(plan.first.size(), 3u);
  EXPECT_EQ(plan.bytes[0] + plan.bytes[1], kModelBytes);
  EXPECT_GT(plan.bytes[0], 2 * plan.bytes[1]) << plan.to_string();
  EXPECT_GT(plan.bytes[1], 0u) << plan.to_string();
  const std::vector<std::vector<nn::Module*>> layers = model.layers();
  for (size_t l = 0; l < 6; ++l) {
    for (nn::Module* m : layers[l]) {
      for (const auto& p : m->parameters()) EXPECT_EQ(p->value().device(), plan.device_of(l));
    }
  }
  // Each server holds exactly its own layers' parameters, and received no more than them (and
  // the frames' overhead).
  da.sync();
  db.sync();
  // (Held counts each buffer's allocation: a few bytes over its elements'; the other server's
  // layers would be 50 KiB or more.)
  for (size_t i = 0; i < 2; ++i) {
    const uint64_t held = remote_stats(plan.devices[i]).session_bytes_held;
    EXPECT_GE(held, plan.bytes[i]);
    EXPECT_LT(held, plan.bytes[i] + 4096);
  }
  EXPECT_LT(remote_stats(db).bytes_in, plan.bytes[1] + 16384);
}

TEST(Split, PlacesAnExplicitSplit) {
  auto a = host(4 << 20), b = host(4 << 20);
  const Device da = Device::remote(a->url()), db = Device::remote(b->url());
  manual_seed(0);
  nn::GPT model(small());
  EXPECT_THROW(nn::place(model, {da, db}, {.layers = {1, 4}}), Error);  // 5 of 6 layers
  EXPECT_THROW(nn::place(model, {da, db}, {.layers = {6}}), Error);     // 1 of 2 devices
  const nn::LayerPlan plan = nn::place(model, {da, db}, {.layers = {1, 5}});
  EXPECT_EQ(plan.first, (std::vector<size_t>{0, 1, 6}));
  EXPECT_EQ(plan.bytes[0], (1024u + 512u) * 4);  // the embeddings
  EXPECT_EQ(model.named_parameters().front().second->value().device(), da);
  EXPECT_EQ(model.named_parameters()[2].second->value().device(), db);  // blocks.0.ln1.weight
}

TEST(Split, RefusesAModelThatDoesNotFitNamingTheSizes) {
  auto a = host(kModelBytes / 3), b = host(kModelBytes / 3);
  const Device da = Device::remote(a->url()), db = Device::remote(b->url());
  manual_seed(0);
  nn::GPT model(small());
  try {
    nn::place(model, {da, db});
    FAIL() << "placed a model bigger than both servers";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("does not fit"), std::string::npos) << m;
    EXPECT_NE(m.find("MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("--max-memory"), std::string::npos) << m;
  }
  // Nothing moved.
  for (const auto& p : model.parameters()) EXPECT_EQ(p->value().device(), Device::cpu());
  // Training needs about four times the parameters: refused where inference fits.
  auto c = host(kModelBytes + 65536);
  EXPECT_THROW(nn::place(model, {Device::remote(c->url())}, {.layers = {}, .memory_factor = 4}),
               Error);
}

TEST(Split, ModelTooBigForOneServerRunsSplitAndMatchesTheUnsplitForward) {
  // Each small server may hold 1 KiB less than the model: it fits only split (with room for
  // the activations of an inference forward beside half of it).
  auto big = host(64 << 20), a = host(kModelBytes - 1024), b = host(kModelBytes - 1024);
  const Device dbig = Device::remote(big->url()), da = Device::remote(a->url()),
               db = Device::remote(b->url());
  manual_seed(3);
  nn::GPT whole(small());
  manual_seed(3);
  nn::GPT split(small());
  whole.to(dbig);
  EXPECT_THROW(nn::place(split, {da}), Error);
  const nn::LayerPlan plan = nn::place(split, {da, db});
  ASSERT_GT(plan.bytes[1], 0u) << plan.to_string();
  NoGradGuard no_grad;
  const Tensor x = tokens(4, 16, 1, Device::cpu());
  const Tensor want = whole.forward(x.to(dbig));
  nn::Pipeline one(split, plan, 1), four(split, plan, 4);
  da.sync();  // the parameters' uploads, sent in the background
  db.sync();
  const WireCounters before_a = wire_counters(da), before_b = wire_counters(db);
  const Tensor got = one.forward(x);
  EXPECT_EQ(got.device(), db);
  EXPECT_EQ(bytes_of(got), bytes_of(want));
  // The activations (64 rows of 32 floats: 8 KiB) crossed from a to b directly: the client
  // sent a the tokens and its ops, b its ops (about 50 B each) and the move's few hundred bytes,
  // and read nothing from a.
  const WireCounters after_a = wire_counters(da), after_b = wire_counters(db);
  EXPECT_LT(after_a.bytes_in - before_a.bytes_in, 1024u);
  EXPECT_LT(after_b.bytes_out - before_b.bytes_out, 4096u);
  // Micro-batched: the same logits; from the third forward on, each server's part of a
  // micro-batch replays a registered graph there, with the same logits still. (Recording a
  // step holds its intermediates until it ends: these servers have room for a micro-batch's.)
  for (int i = 0; i < 3; ++i) EXPECT_EQ(bytes_of(four.forward(x)), bytes_of(want)) << i;
}

TEST(Split, PipelinedTrainingEqualsTheUnsplitRunWithTheSameMicroBatching) {
  const Servers s;
  const Device &dbig = s.dbig, &da = s.da, &db = s.db;
  manual_seed(5);
  nn::GPT whole(small());
  manual_seed(5);
  nn::GPT split(small());
  nn::Pipeline ref(whole, nn::place(whole, {dbig}), 2);
  nn::Pipeline pipe(split, nn::place(split, {da, db}, {.layers = {3, 3}}), 2);
  optim::Adam opt_ref(whole.parameters(), {.lr = 1e-2}), opt(split.parameters(), {.lr = 1e-2});
  for (int step = 0; step < 3; ++step) {
    const Tensor x = tokens(4, 16, step, Device::cpu()), y = tokens(4, 16, step + 1, Device::cpu());
    opt_ref.zero_grad();
    opt.zero_grad();
    const Tensor l_ref = ref.forward_backward(x, y), l = pipe.forward_backward(x, y);
    opt_ref.step();
    opt.step();
    EXPECT_EQ(bytes_of(l), bytes_of(l_ref)) << "step " << step;
  }
  const auto pw = whole.named_parameters(), ps = split.named_parameters();
  ASSERT_EQ(pw.size(), ps.size());
  for (size_t i = 0; i < pw.size(); ++i)
    EXPECT_EQ(bytes_of(ps[i].second->value()), bytes_of(pw[i].second->value())) << pw[i].first;
  // The parameters stayed on their servers.
  EXPECT_EQ(split.named_parameters().front().second->value().device(), da);
  EXPECT_EQ(split.named_parameters().back().second->value().device(), db);
}

// Training as graphs (Pipeline::set_graph_training): each server's part of a micro-batch's
// forward and backward replays a registered graph from the third step on, and the losses and the
// parameters after Adam's steps equal the eager unsplit run's bit for bit.
TEST(Split, GraphTrainingStepsEqualTheEagerRunBitForBit) {
  const Servers s;
  manual_seed(6);
  nn::GPT whole(small());
  manual_seed(6);
  nn::GPT split(small());
  nn::Pipeline ref(whole, nn::place(whole, {s.dbig}), 2);
  nn::Pipeline pipe(split, nn::place(split, {s.da, s.db}, {.layers = {2, 4}}), 2);
  pipe.set_graph_training(true);
  optim::Adam opt_ref(whole.parameters(), {.lr = 1e-2}), opt(split.parameters(), {.lr = 1e-2});
  for (int step = 0; step < 4; ++step) {
    const Tensor x = tokens(4, 16, step, Device::cpu()), y = tokens(4, 16, step + 2, Device::cpu());
    opt_ref.zero_grad();
    opt.zero_grad();
    const Tensor l_ref = ref.forward_backward(x, y), l = pipe.forward_backward(x, y);
    opt_ref.step();
    opt.step();
    EXPECT_EQ(bytes_of(l), bytes_of(l_ref)) << "step " << step;
  }
  EXPECT_EQ(ref.graph_replays(), 0);
  // Per stage: the forward of 2 micro-batches, and the backward with and without gradients to
  // accumulate into, each replayed from its third call on (4 steps: twice).
  EXPECT_GE(pipe.graph_replays(), 2 * 2 + 2 * 2 * 2);
  const auto pw = whole.named_parameters(), ps = split.named_parameters();
  ASSERT_EQ(pw.size(), ps.size());
  for (size_t i = 0; i < pw.size(); ++i)
    EXPECT_EQ(bytes_of(ps[i].second->value()), bytes_of(pw[i].second->value())) << pw[i].first;
}

TEST(Split, GenerationKeepsEachLayersCacheOnItsServer) {
  const Servers s;
  const Device &dbig = s.dbig, &da = s.da, &db = s.db;
  manual_seed(7);
  nn::GPT whole(small());
  manual_seed(7);
  nn::GPT split(small());
  whole.to(dbig);
  nn::Pipeline pipe(split, nn::place(split, {da, db}, {.layers = {3, 3}}), 1);
  nn::PipelineGenerator gen(pipe);
  nn::Generator ref(whole);
  for (const nn::SampleOptions o : {nn::SampleOptions{.temperature = 0},
                                    nn::SampleOptions{.temperature = 0.9, .top_k = 5, .seed = 4}}) {
    const std::vector<int64_t> want = ref.generate({1, 2, 3}, 10, o);
    EXPECT_EQ(gen.generate({1, 2, 3}, 10, o), want);
  }
  // Both servers hold caches: 2 layers' k and v on a, 2 on b ([1, 2, 16, 16] floats each).
  da.sync();
  db.sync();
  EXPECT_GE(remote_stats(da).session_bytes_held, 4 * 2048u);
}

TEST(Split, ChunkedPrefillAndPerServerGraphsGiveTheUnsplitTokens) {
  const Servers s;
  const Device &dbig = s.dbig, &da = s.da, &db = s.db;
  manual_seed(11);
  nn::GPT whole(small());
  manual_seed(11);
  nn::GPT split(small());
  nn::Pipeline one(whole, nn::place(whole, {dbig}), 1);
  nn::Pipeline two(split, nn::place(split, {da, db}, {.layers = {2, 4}}), 1);
  const std::vector<int64_t> prompt = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5};  // 3 chunks: 4, 4, 3
  for (const nn::SampleOptions o : {nn::SampleOptions{.temperature = 0},
                                    nn::SampleOptions{.temperature = 0.9, .top_k = 6, .seed = 2}}) {
    nn::PipelineGenerator g_one(one, 3), g_two(two, 3), g_eager(two, 3, /*use_graph=*/false);
    const std::vector<int64_t> want = g_eager.generate(prompt, 5, o);
    ASSERT_EQ(want.size(), 5u);
    // The same ops on one server and split over two, eager or as each server's graph: the same
    // draws; run three times so that the steps replay their graphs.
    for (int run = 0; run < 3; ++run) {
      EXPECT_EQ(g_one.generate(prompt, 5, o), want) << run;
      EXPECT_EQ(g_two.generate(prompt, 5, o), want) << run;
    }
    EXPECT_GT(g_two.graph_replays(), 0);
    EXPECT_EQ(g_eager.graph_replays(), 0);
  }
  // The chunked prefill against the unsplit model's one token at a time (nn::Generator): the
  // same greedy tokens (the sums' order differs, so the logits only within rounding).
  whole.to(dbig);
  nn::Generator ref(whole);
  nn::PipelineGenerator gen(two, 3);
  EXPECT_EQ(gen.generate(prompt, 5, {.temperature = 0}),
            ref.generate(prompt, 5, {.temperature = 0}));
  EXPECT_THROW(nn::PipelineGenerator(two, -1), Error);
}

// max |a - b| / max |b|: the error relative to the values' scale.
double max_rel(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return diff / scale;
}

TEST(Split, TensorParallelForwardTrainingAndGenerationMatchTheUnsplitModel) {
  const Servers s;
  const Device &dbig = s.dbig, &da = s.da, &db = s.db;
  manual_seed(9);
  nn::GPT whole(small());
  nn::TensorParallelGPT tp(whole, {da, db});  // from the host copy
  whole.to(dbig);
  // Each server holds half of every block's attention and MLP weights.
  const Tensor x = tokens(2, 16, 3, Device::cpu()), y = tokens(2, 16, 4, Device::cpu());
  const Tensor want = whole.forward(x.to(dbig));
  EXPECT_LT(max_rel(tp.forward(x).to_vector<float>(), want.to_vector<float>()), 1e-5);
  // One SGD step on each: the same loss, and the same logits after it.
  optim::SGD opt_ref(whole.parameters(), {.lr = 0.1}), opt(tp.parameters(), {.lr = 0.1});
  const Tensor l_ref = whole.loss(x.to(dbig), y.to(dbig));
  const Tensor l = tp.loss(x, y);
  EXPECT_LT(max_rel(l.to_vector<float>(), l_ref.to_vector<float>()), 1e-5);
  l_ref.backward();
  l.backward();
  tp.reduce_grads();
  opt_ref.step();
  opt.step();
  const Tensor after = whole.forward(x.to(dbig));
  EXPECT_LT(max_rel(tp.forward(x).to_vector<float>(), after.to_vector<float>()), 1e-4);
  // The replicas of a replicated parameter stayed identical (wte on a and on b).
  std::vector<std::vector<uint8_t>> wte;
  for (const auto& p : tp.parameters()) {
    if (p->value().shape() == Shape{32, 32} && p->value().device() != dbig)
      wte.push_back(bytes_of(p->value()));
  }
  ASSERT_GE(wte.size(), 2u);
  EXPECT_EQ(wte[0], wte[1]);
  // Greedy generation: the same tokens.
  nn::Generator ref(whole);
  EXPECT_EQ(tp.generate({1, 2, 3}, 8, {.temperature = 0}),
            ref.generate({1, 2, 3}, 8, {.temperature = 0}));
}

}  // namespace
}  // namespace tw
