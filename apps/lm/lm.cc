#include "lm/lm.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "common/data_file.h"
#include "core/splitmix.h"

namespace tw::lm {

const char* const kAttribution =
    "King James Version (1611), Genesis and Exodus: public domain; from Debian's bible-kjv-text "
    "4.38";

std::string default_path() {
  if (const char* env = std::getenv("TW_LM_TEXT")) return env;
  return TW_LM_DEFAULT_PATH;
}

std::string load_text(const std::string& path) {
  std::string text = apps::read_data_file(path, "lm", "TW_LM_TEXT");
  if (text.size() < 1024) throw Error("lm: " + path + " holds too little text to train on");
  return text;
}

Vocab::Vocab(const std::string& text) {
  bool seen[256] = {};
  for (unsigned char c : text) seen[c] = true;
  for (int c = 0; c < 256; ++c) {
    index_[c] = -1;
    if (seen[c]) {
      index_[c] = static_cast<int16_t>(chars.size());
      chars.push_back(static_cast<char>(c));
    }
  }
}

std::vector<int64_t> Vocab::encode(const std::string& s) const {
  std::vector<int64_t> out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (index_[c] < 0)
      throw Error("lm: character " + std::to_string(c) + " is not in the vocabulary");
    out.push_back(index_[c]);
  }
  return out;
}

std::string Vocab::decode(const std::vector<int64_t>& tokens) const {
  std::string out;
  for (int64_t t : tokens)
    out.push_back(t >= 0 && t < size() ? chars[static_cast<size_t>(t)] : '?');
  return out;
}

std::vector<int64_t> batch_offsets(int64_t n_tokens, int64_t context, int64_t batch, uint64_t seed,
                                   int64_t step) {
  const int64_t span = n_tokens - context;  // offsets 0 .. span - 1 leave room for the targets
  if (span < 1)
    throw Error("lm: the text is shorter than one window of " + std::to_string(context + 1));
  uint64_t s = seed * 0x100000001B3ull + static_cast<uint64_t>(step);
  std::vector<int64_t> out(static_cast<size_t>(batch));
  for (int64_t& o : out) o = static_cast<int64_t>(splitmix64_next(s) % static_cast<uint64_t>(span));
  return out;
}

std::pair<Tensor, Tensor> windows(const Tensor& text, const Tensor& offsets, int64_t context) {
  const int64_t b = offsets.size(0);
  const Tensor idx = offsets.reshape({b, 1}) +
                     arange(0, context + 1, 1, kI64, offsets.device()).reshape({1, context + 1});
  const Tensor w = text.index_select(0, idx.reshape({-1})).reshape({b, context + 1});
  return {w.slice(1, 0, context), w.slice(1, 1, context + 1)};
}

std::map<std::string, std::string> run_settings(const nn::GPTConfig& cfg, double lr, int64_t batch,
                                                uint64_t seed, int64_t n_tokens) {
  auto num = [](double v) {
    char b[40];
    std::snprintf(b, sizeof(b), "%.17g", v);
    return std::string(b);
  };
  return {{"lm.lr", num(lr)},
          {"lm.batch", std::to_string(batch)},
          {"lm.seed", std::to_string(seed)},
          {"lm.tokens", std::to_string(n_tokens)},
          {"lm.heads", std::to_string(cfg.n_head)},
          {"lm.dropout", num(cfg.dropout)}};
}

Trainer::Trainer(nn::GPT& model, double lr, const std::vector<int64_t>& tokens, int64_t batch,
                 uint64_t seed, bool use_graph)
    : model_(model), n_(static_cast<int64_t>(tokens.size())), batch_(batch), seed_(seed) {
  const Device dev = model.parameters().at(0)->value().device();
  opt_ = std::make_unique<optim::Adam>(model.parameters(), optim::AdamOptions{.lr = lr});
  text_ = from_vector<int64_t>(tokens, {n_}, dev);
  if (use_graph) {
    graph_ = std::make_unique<graph::Step>(
        [this](const std::vector<Tensor>& a) {
          const auto [x, y] = windows(a[0], a[1], model_.config().context);
          const Tensor loss = model_.loss(x, y);
          opt_->zero_grad();
          loss.backward();
          opt_->step();
          return std::vector<Tensor>{loss.detach()};
        },
        graph::state_slots(*opt_));
  }
}

Tensor Trainer::step(int64_t step) {
  const Device dev = text_.device();
  const Tensor offs = from_vector<int64_t>(
      batch_offsets(n_, model_.config().context, batch_, seed_, step), {batch_}, dev);
  if (graph_) return (*graph_)({text_, offs})[0];
  const auto [x, y] = windows(text_, offs, model_.config().context);
  const Tensor loss = model_.loss(x, y);
  opt_->zero_grad();
  loss.backward();
  opt_->step();
  return loss.detach();
}

void Trainer::save(Checkpoint& ckpt, int64_t steps_done,
                   const std::map<std::string, std::string>& run, bool async) {
  if (async) {
    ckpt.save_async(steps_done, model_, opt_.get(), run);
  } else {
    ckpt.save(steps_done, model_, opt_.get(), run);
  }
}

int64_t Trainer::restore(const Checkpoint& ckpt, const std::map<std::string, std::string>& run) {
  const std::optional<CheckpointInfo> info = ckpt.latest();
  if (!info) return 0;
  for (const auto& [k, v] : run) {
    auto it = info->extra.find(k);
    const std::string saved = it == info->extra.end() ? "(none)" : it->second;
    if (saved != v) {
      throw Error("lm: the checkpoint " + info->manifest + " was saved by a run with " + k + " " +
                  saved + ", this run has " + v + ": resuming would not continue that run");
    }
  }
  ckpt.load(*info, model_, opt_.get());
  return info->step;
}

}  // namespace tw::lm
