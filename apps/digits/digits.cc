#include "digits/digits.h"

#include <chrono>
#include <cstdlib>
#include <optional>

#include "common/data_file.h"
#include "core/splitmix.h"

namespace tw::digits {

const char* const kAttribution =
    "Alpaydin, E. & Kaynak, C. (1998). Optical Recognition of Handwritten Digits. UCI Machine "
    "Learning Repository. https://doi.org/10.24432/C50P49 (CC BY 4.0)";

std::string default_path() {
  if (const char* env = std::getenv("TW_DIGITS")) return env;
  return TW_DIGITS_DEFAULT_PATH;
}

Dataset load(const std::string& path) {
  const std::string text = apps::read_data_file(path, "digits", "TW_DIGITS");

  Dataset d;
  size_t pos = 0;
  int64_t line = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    ++line;
    std::string row = text.substr(pos, end - pos);
    pos = end + 1;
    if (!row.empty() && row.back() == '\r') row.pop_back();
    if (row.empty()) continue;
    std::vector<int64_t> values;
    size_t p = 0;
    while (p <= row.size()) {
      size_t comma = row.find(',', p);
      if (comma == std::string::npos) comma = row.size();
      const std::string field = row.substr(p, comma - p);
      char* stop = nullptr;
      const long v = std::strtol(field.c_str(), &stop, 10);
      if (field.empty() || *stop != '\0') {
        throw Error("digits: " + path + " line " + std::to_string(line) + ": '" + field +
                    "' is not an integer");
      }
      values.push_back(v);
      p = comma + 1;
    }
    if (values.size() != kPixels + 1) {
      throw Error("digits: " + path + " line " + std::to_string(line) + " has " +
                  std::to_string(values.size()) + " fields, expected 65 (64 pixels and a label)");
    }
    for (int64_t i = 0; i < kPixels; ++i) {
      if (values[i] < 0 || values[i] > 16) {
        throw Error("digits: " + path + " line " + std::to_string(line) + ": pixel " +
                    std::to_string(values[i]) + " outside 0..16");
      }
      d.pixels.push_back(static_cast<float>(values[i]) / 16.0f);
    }
    if (values[kPixels] < 0 || values[kPixels] >= kClasses) {
      throw Error("digits: " + path + " line " + std::to_string(line) + ": label " +
                  std::to_string(values[kPixels]) + " outside 0..9");
    }
    d.labels.push_back(values[kPixels]);
    ++d.n;
  }
  return d;
}

namespace {
std::vector<int64_t> permutation(int64_t n, uint64_t seed) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = i;
  uint64_t state = seed;
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(splitmix64_next(state) % static_cast<uint64_t>(i + 1));
    std::swap(p[static_cast<size_t>(i)], p[static_cast<size_t>(j)]);
  }
  return p;
}

Dataset subset(const Dataset& all, const std::vector<int64_t>& rows) {
  Dataset d;
  d.n = static_cast<int64_t>(rows.size());
  for (int64_t r : rows) {
    d.pixels.insert(d.pixels.end(), all.pixels.begin() + r * kPixels,
                    all.pixels.begin() + (r + 1) * kPixels);
    d.labels.push_back(all.labels[static_cast<size_t>(r)]);
  }
  return d;
}
}  // namespace

std::pair<Dataset, Dataset> split(const Dataset& all, int64_t n_test, uint64_t seed) {
  if (n_test < 0 || n_test > all.n) {
    throw Error("digits: cannot hold out " + std::to_string(n_test) + " of " +
                std::to_string(all.n) + " rows");
  }
  const std::vector<int64_t> p = permutation(all.n, seed);
  const std::vector<int64_t> train(p.begin(), p.end() - n_test), test(p.end() - n_test, p.end());
  return {subset(all, train), subset(all, test)};
}

const char* model_name(ModelKind kind) { return kind == ModelKind::kCnn ? "cnn" : "mlp"; }

std::shared_ptr<nn::Sequential> make_model(ModelKind kind, const nn::Placement& at) {
  auto m = std::make_shared<nn::Sequential>();
  if (kind == ModelKind::kCnn) {
    m->push_back(nn::Conv2d(1, 16, 3, 1, 1, true, at));
    m->push_back(nn::ReLU());
    m->push_back(nn::MaxPool2d(2));
    m->push_back(nn::Conv2d(16, 32, 3, 1, 1, true, at));
    m->push_back(nn::ReLU());
    m->push_back(nn::MaxPool2d(2));
    m->push_back(nn::Flatten());
    m->push_back(nn::Linear(32 * 2 * 2, kClasses, true, at));
  } else {
    m->push_back(nn::Linear(kPixels, 128, true, at));
    m->push_back(nn::ReLU());
    m->push_back(nn::Linear(128, 64, true, at));
    m->push_back(nn::ReLU());
    m->push_back(nn::Linear(64, kClasses, true, at));
  }
  return m;
}

DeviceData upload(const Dataset& d, ModelKind kind, const Device& device) {
  const Shape xs = kind == ModelKind::kCnn ? Shape{d.n, 1, 8, 8} : Shape{d.n, kPixels};
  return {from_vector<float>(d.pixels, xs, device), from_vector<int64_t>(d.labels, {d.n}, device),
          d.n};
}

namespace {
// One training step on a batch: the batch's mean loss and its count of right answers.
std::vector<Tensor> train_step(nn::Module& model, optim::Optimizer& opt, const Tensor& xb,
                               const Tensor& yb) {
  const Tensor logits = model(xb);
  const Tensor loss = nn::cross_entropy(logits, yb);
  opt.zero_grad();
  loss.backward();
  opt.step();
  NoGradGuard no_grad;
  return {loss.detach(), logits.detach().argmax(1).eq(yb).sum()};
}
}  // namespace

Trainer::Trainer(nn::Module& model, optim::Optimizer& optimizer, const DeviceData& train,
                 int64_t batch_size, bool use_graph)
    : model_(model), opt_(optimizer), train_(train), batch_(batch_size) {
  if (batch_size < 1) throw Error("Trainer: batch size must be >= 1");
  if (use_graph) {
    step_ = std::make_unique<graph::Step>(
        [this](const std::vector<Tensor>& a) { return train_step(model_, opt_, a[0], a[1]); },
        graph::state_slots(opt_));
  }
}

void Reports::send(const Progress& p, int64_t issued, int64_t seen,
                   std::chrono::steady_clock::time_point start, const Tensor& loss_sum,
                   const Tensor& correct, const std::function<void(const Progress&)>& on_progress) {
  while (!queue_.empty() && queue_.front().issued + kMaxLagSteps <= issued) deliver_front();
  NoGradGuard no_grad;
  Pending r;
  r.values =
      cat({loss_sum.reshape({1}).to(kF64), correct.reshape({1}).to(kF64)}).host_values_pending();
  r.p = p;
  r.issued = issued;
  r.seen = seen;
  r.start = start;
  r.on_progress = on_progress;
  queue_.push_back(std::move(r));
}

void Reports::poll() {
  while (!queue_.empty() && queue_.front().values.ready()) deliver_front();
}

std::optional<Progress> Reports::finish() {
  while (!queue_.empty()) deliver_front();
  return last_;
}

// Waits for the oldest report's values if need be (usually they arrived long since), fills in
// its loss, accuracy and time, and hands it to its callback.
void Reports::deliver_front() {
  Pending& r = queue_.front();
  detail::HostValues v;
  try {
    v = r.values.get();
  } catch (...) {
    queue_.pop_front();  // its read is spent; the reports after it stay
    throw;
  }
  const auto* d = static_cast<const double*>(v.data);
  r.p.loss = d[0] / static_cast<double>(r.seen);
  r.p.accuracy = d[1] / static_cast<double>(r.seen);
  r.p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - r.start).count();
  const Progress p = r.p;
  const std::function<void(const Progress&)> on_progress = std::move(r.on_progress);
  queue_.pop_front();
  last_ = p;
  if (on_progress) on_progress(p);
}

namespace {
// Whether step `s` (0-based) of an epoch of `steps` reports: every `report_every` and the last.
bool reports_at(int64_t s, int64_t steps, int64_t report_every) {
  return s + 1 == steps || (report_every > 0 && (s + 1) % report_every == 0);
}
}  // namespace

void Trainer::run_epoch(int epoch, int epochs, uint64_t seed, int64_t report_every,
                        const std::function<void(const Progress&)>& on_progress, int64_t first_step,
                        const std::function<void(int64_t)>& after_step) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  model_.train();
  const Device dev = train_.x.device();
  const Tensor order = from_vector<int64_t>(
      permutation(train_.n, seed * 1000003 + static_cast<uint64_t>(epoch)), {train_.n}, dev);
  // Running sums on the device, read only when reporting.
  Tensor loss_sum, correct;
  Progress p;
  p.epoch = epoch;
  p.epochs = epochs;
  p.steps = steps_per_epoch();
  int64_t seen = 0;
  for (int64_t s = first_step; s < p.steps; ++s) {
    const int64_t begin = s * batch_, end = std::min(train_.n, begin + batch_);
    const Tensor idx = order.slice(0, begin, end);
    const Tensor xb = train_.x.index_select(0, idx), yb = train_.y.index_select(0, idx);
    const std::vector<Tensor> r = step_ ? (*step_)({xb, yb}) : train_step(model_, opt_, xb, yb);
    seen += end - begin;
    ++issued_;
    {
      NoGradGuard no_grad;
      const Tensor batch_loss = r[0] * static_cast<double>(end - begin);
      const Tensor& hits = r[1];
      loss_sum = loss_sum.defined() ? loss_sum + batch_loss : batch_loss;
      correct = correct.defined() ? correct + hits : hits;
    }
    if (reports_at(s, p.steps, report_every)) {
      p.step = s + 1;
      reports_.send(p, issued_, seen, start, loss_sum, correct, on_progress);
    }
    reports_.poll();
    if (after_step) after_step(s);
  }
}

ResumableRun train_resumable(const Dataset& train, const Device& device,
                             const ResumableOptions& o) {
  manual_seed(o.seed);
  ResumableRun r;
  r.model = make_model(o.kind, {device, kF32});
  optim::Adam opt(r.model->parameters(), {.lr = o.lr});
  const DeviceData data = upload(train, o.kind, device);
  Trainer trainer(*r.model, opt, data, o.batch, o.graph);
  const int64_t per_epoch = trainer.steps_per_epoch();
  r.total_steps = per_epoch * o.epochs;
  std::optional<Checkpoint> ckpt;
  if (!o.checkpoint_dir.empty()) {
    ckpt.emplace(o.checkpoint_dir);
    if (std::optional<CheckpointInfo> info = ckpt->restore(*r.model, &opt)) {
      if (info->step > r.total_steps) {
        throw Error("train_resumable: the checkpoint " + info->manifest + " is at step " +
                    std::to_string(info->step) + ", past this run's " +
                    std::to_string(r.total_steps) + " steps");
      }
      r.resumed_from = info->step;
    }
  }
  if (o.on_ready) o.on_ready(r.resumed_from);
  for (int e = static_cast<int>(r.resumed_from / per_epoch) + 1; e <= o.epochs; ++e) {
    const int64_t first = e == r.resumed_from / per_epoch + 1 ? r.resumed_from % per_epoch : 0;
    trainer.run_epoch(e, o.epochs, o.seed, o.report_every, o.on_progress, first, [&](int64_t s) {
      const int64_t step = (e - 1) * per_epoch + s + 1;
      ++r.steps_run;
      if (ckpt && o.checkpoint_every > 0 && step % o.checkpoint_every == 0) {
        ckpt->save(step, *r.model, &opt);
        ++r.checkpoints;
      }
      if (o.after_step) o.after_step(step);
    });
  }
  trainer.finish();  // the last reports reach on_progress before this returns
  return r;
}

DataParallelTrainer::DataParallelTrainer(ModelKind kind, const std::vector<Device>& devices,
                                         const Dataset& train, int64_t batch_size, double lr,
                                         uint64_t seed)
    : batch_(batch_size), n_(train.n) {
  if (devices.empty()) throw Error("DataParallelTrainer: no devices");
  if (batch_size < static_cast<int64_t>(devices.size())) {
    throw Error("DataParallelTrainer: a batch of " + std::to_string(batch_size) +
                " cannot be split over " + std::to_string(devices.size()) + " replicas");
  }
  for (const Device& d : devices) {
    manual_seed(seed);  // the same initial parameters on every replica
    Replica r;
    r.model = make_model(kind, {d, kF32});
    r.opt = std::make_unique<optim::Adam>(r.model->parameters(), optim::AdamOptions{.lr = lr});
    r.data = upload(train, kind, d);
    replicas_.push_back(std::move(r));
  }
  if (devices.size() > 1) group_ = std::make_unique<dist::Group>(devices);
}

void DataParallelTrainer::run_epoch(int epoch, int epochs, uint64_t seed, int64_t report_every,
                                    const std::function<void(const Progress&)>& on_progress) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const size_t k = replicas_.size();
  const std::vector<int64_t> perm = permutation(n_, seed * 1000003 + static_cast<uint64_t>(epoch));
  std::vector<Tensor> order;
  for (Replica& r : replicas_) {
    r.model->train();
    order.push_back(from_vector<int64_t>(perm, {n_}, r.data.x.device()));
  }
  Tensor loss_sum, correct;  // replica 0's shards' (read when reporting)
  Progress p;
  p.epoch = epoch;
  p.epochs = epochs;
  p.steps = steps_per_epoch();
  int64_t seen = 0;
  for (int64_t s = 0; s < p.steps; ++s) {
    const int64_t begin = s * batch_, end = std::min(n_, begin + batch_), n = end - begin;
    std::vector<Tensor> flat(k);
    for (size_t i = 0; i < k; ++i) {
      // Shard i of the batch: rows [lo, hi); its loss weighs n_i / n, so the gradients' sum is
      // the gradient of the whole batch's mean loss.
      const int64_t lo = begin + n * static_cast<int64_t>(i) / static_cast<int64_t>(k);
      const int64_t hi = begin + n * static_cast<int64_t>(i + 1) / static_cast<int64_t>(k);
      Replica& r = replicas_[i];
      const Tensor idx = order[i].slice(0, lo, hi);
      const Tensor xb = r.data.x.index_select(0, idx), yb = r.data.y.index_select(0, idx);
      const Tensor logits = (*r.model)(xb);
      const Tensor shard_loss = nn::cross_entropy(logits, yb);
      const Tensor loss = shard_loss * (static_cast<double>(hi - lo) / static_cast<double>(n));
      r.opt->zero_grad();
      loss.backward();
      NoGradGuard no_grad;
      std::vector<Tensor> grads;
      for (const auto& prm : r.model->parameters()) grads.push_back(prm->grad().reshape({-1}));
      flat[i] = cat(grads, 0);
      if (i == 0) {
        const Tensor batch_loss = shard_loss.detach() * static_cast<double>(hi - lo);
        const Tensor hits = logits.detach().argmax(1).eq(yb).sum();
        loss_sum = loss_sum.defined() ? loss_sum + batch_loss : batch_loss;
        correct = correct.defined() ? correct + hits : hits;
        seen += hi - lo;
      }
    }
    if (group_) dist::all_reduce(flat, dist::ReduceOp::kSum, *group_);
    ++issued_;
    for (size_t i = 0; i < k; ++i) {
      NoGradGuard no_grad;
      int64_t at = 0;
      for (const auto& prm : replicas_[i].model->parameters()) {
        const int64_t m = prm->value().numel();
        Tensor g = flat[i].narrow(0, at, m).reshape(prm->value().shape());
        Tensor v = prm->value();
        v.set_grad(g);
        at += m;
      }
      replicas_[i].opt->step();
    }
    // Loss and accuracy over replica 0's shards: a sample of the whole.
    if (reports_at(s, p.steps, report_every)) {
      p.step = s + 1;
      reports_.send(p, issued_, seen, start, loss_sum, correct, on_progress);
    }
    reports_.poll();
  }
}

std::optional<Progress> DataParallelTrainer::finish() {
  for (Replica& r : replicas_) r.data.x.device().sync();
  return reports_.finish();
}

std::vector<std::string> DataParallelTrainer::differing_parameters() const {
  std::vector<std::string> out;
  const auto p0 = replicas_[0].model->named_parameters();
  for (size_t i = 1; i < replicas_.size(); ++i) {
    const auto pi = replicas_[i].model->named_parameters();
    for (size_t j = 0; j < p0.size(); ++j) {
      if (p0[j].second->value().to_bytes() != pi[j].second->value().to_bytes()) {
        out.push_back(p0[j].first + " (replica " + std::to_string(i) + ")");
      }
    }
  }
  return out;
}

double accuracy(nn::Module& model, const DeviceData& data) {
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  const int64_t hits = model(data.x).argmax(1).eq(data.y).sum().item<int64_t>();
  model.train(was_training);
  return data.n ? static_cast<double>(hits) / static_cast<double>(data.n) : 0.0;
}

}  // namespace tw::digits
