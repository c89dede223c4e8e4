// Resumable sessions: the token, the reply log, and the registry of parked sessions (resume.h).
#include "server/resume.h"

#include <openssl/rand.h>

#include <algorithm>

#include "protocol/messages.h"
#include "server/session.h"

namespace tw::server {

Result<std::string> new_session_token() {
  unsigned char raw[32];
  if (RAND_bytes(raw, sizeof raw) != 1)
    return internal_error("RAND_bytes failed: no session token");
  static const char* kHex = "0123456789abcdef";
  std::string s;
  s.reserve(2 * sizeof raw);
  for (unsigned char c : raw) {
    s.push_back(kHex[c >> 4]);
    s.push_back(kHex[c & 15]);
  }
  return s;
}

bool ResumeState::resumable() const {
  std::lock_guard<std::mutex> lock(mu_);
  return resumable_ && !goodbye_;
}

void ResumeState::ack(uint64_t acked, uint32_t flags) {
  std::lock_guard<std::mutex> lock(mu_);
  if (flags & protocol::kAckResumable) resumable_ = true;
  if (flags & protocol::kAckGoodbye) goodbye_ = true;
  while (!log_.empty() && first_ <= acked) {
    bytes_ -= log_.front().payload_size();
    log_.pop_front();
    ++first_;
  }
  if (log_.empty()) first_ = std::max(first_, std::min(acked, sent_) + 1);
}

void ResumeState::log(const OutFrame& f) {
  std::lock_guard<std::mutex> lock(mu_);
  ++sent_;
  if (!resumable_) {  // nobody will ask for it again
    first_ = sent_ + 1;
    return;
  }
  log_.push_back(f);
  bytes_ += f.payload_size();
  while (bytes_ > kMaxLogBytes && log_.size() > 1) {
    bytes_ -= log_.front().payload_size();
    log_.pop_front();
    ++first_;
  }
}

Result<std::deque<OutFrame>> ResumeState::since(uint64_t acked) {
  std::lock_guard<std::mutex> lock(mu_);
  if (acked > sent_) {
    return invalid_argument("the client acknowledges " + std::to_string(acked) +
                            " replies of a session that sent " + std::to_string(sent_));
  }
  if (acked + 1 < first_) {
    return data_loss("replies " + std::to_string(acked + 1) + ".." + std::to_string(first_ - 1) +
                     " of the session were let go (over the server's resume log of " +
                     std::to_string(kMaxLogBytes >> 20) + " MiB unacknowledged)");
  }
  std::deque<OutFrame> out;
  for (uint64_t n = first_; n <= sent_; ++n)
    if (n > acked) out.push_back(log_[n - first_]);
  return out;
}

ResumeRegistry::ResumeRegistry(std::chrono::milliseconds grace,
                               std::function<void(uint64_t)> expired)
    : grace_(grace), expired_(std::move(expired)) {
  sweeper_ = std::thread([this] { sweep_loop(); });
}

ResumeRegistry::~ResumeRegistry() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  sweeper_.join();
  std::unordered_map<std::string, Entry> gone;
  std::lock_guard<std::mutex> lock(mu_);
  gone.swap(entries_);
}

void ResumeRegistry::add(const std::shared_ptr<ResumeState>& state,
                         std::function<void()> close_live) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = entries_[state->token];
  e.state = state;
  e.close_live = std::move(close_live);
  e.parked = {};
}

std::unique_ptr<Session> ResumeRegistry::park(ParkedSession p) {
  const std::string token = p.state->token;
  Taker waiter;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(token);
    if (it == entries_.end() || !p.state->resumable() || grace_.count() <= 0) {
      if (it != entries_.end()) {
        waiter = std::move(it->second.waiter);
        entries_.erase(it);
      }
      if (!waiter) return std::move(p.session);
    } else {
      waiter = std::move(it->second.waiter);
      it->second.close_live = nullptr;
    }
    if (!waiter) {
      it->second.parked = std::move(p);
      it->second.deadline = std::chrono::steady_clock::now() + grace_;
      cv_.notify_all();
      return nullptr;
    }
  }
  if (!p.state->resumable()) {
    waiter(unavailable("the session ended (the client closed it) before it resumed"));
    return std::move(p.session);
  }
  if (waiter(std::move(p))) {
    std::lock_guard<std::mutex> lock(mu_);
    ++resumed_;
    return nullptr;
  }
  return nullptr;  // the resuming connection went away meanwhile; the taker parked it again
}

void ResumeRegistry::resume(const std::string& token, const std::string& credential, Taker take) {
  ParkedSession got;
  std::function<void()> close_live;
  Taker old_waiter;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(token);
    unsigned char diff = 1;
    if (it != entries_.end()) {
      const std::string& c = it->second.state->credential;
      diff = c.size() == credential.size() ? 0 : 1;
      for (size_t i = 0; i < c.size() && i < credential.size(); ++i)
        diff |= static_cast<unsigned char>(c[i] ^ credential[i]);
    }
    if (it == entries_.end() || diff != 0) {
      // (The same answer for an unknown token and another credential's.)
    } else if (it->second.parked.session) {
      got = std::move(it->second.parked);
      it->second.parked = {};
      ++resumed_;
    } else {
      old_waiter = std::move(it->second.waiter);
      it->second.waiter = std::move(take);
      close_live = it->second.close_live;
    }
  }
  if (old_waiter) old_waiter(unavailable("another connection resumed the session"));
  if (got.session) {
    take(std::move(got));  // (false: it could not use it, and parked it again)
    return;
  }
  if (close_live) {
    close_live();  // its end parks the session, which hands it to the waiter
    return;
  }
  if (take) {
    take(not_found("no session of that token on this server: its grace period (" +
                   std::to_string(grace_.count() / 1000.0).substr(0, 5) +
                   " s, tensorwire-server --resume-grace) ended, it was closed, or it was "
                   "never resumable"));
  }
}

size_t ResumeRegistry::parked() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [t, e] : entries_) n += e.parked.session ? 1 : 0;
  return n;
}

std::vector<protocol::ParkedSessionInfo> ResumeRegistry::parked_sessions() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<protocol::ParkedSessionInfo> v;
  const auto now = std::chrono::steady_clock::now();
  for (const auto& [t, e] : entries_) {
    if (!e.parked.session) continue;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(e.deadline - now);
    v.push_back({e.parked.id, e.parked.session->held(),
                 static_cast<uint64_t>(std::max<int64_t>(left.count(), 0))});
  }
  std::sort(v.begin(), v.end(),
            [](const auto& a, const auto& b) { return a.session_id < b.session_id; });
  return v;
}

uint64_t ResumeRegistry::resumed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return resumed_;
}

void ResumeRegistry::sweep_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    auto next = std::chrono::steady_clock::time_point::max();
    const auto now = std::chrono::steady_clock::now();
    std::vector<ParkedSession> gone;
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (it->second.parked.session && it->second.deadline <= now) {
        gone.push_back(std::move(it->second.parked));
        it = entries_.erase(it);
      } else {
        if (it->second.parked.session) next = std::min(next, it->second.deadline);
        ++it;
      }
    }
    if (!gone.empty()) {
      lock.unlock();
      for (ParkedSession& p : gone) {
        if (expired_) expired_(p.id);
        p.session.reset();
      }
      gone.clear();
      lock.lock();
      continue;
    }
    if (next == std::chrono::steady_clock::time_point::max()) {
      cv_.wait(lock);
    } else {
      cv_.wait_until(lock, next);
    }
  }
}

}  // namespace tw::server
