#include "server/transfer.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <asio/io_context.hpp>
#include <cstring>

#include "core/wire.h"
#include "net/framing.h"
#include "net/stream.h"
#include "net/url.h"

namespace tw::server {

namespace proto = protocol;

namespace {

constexpr uint8_t kTokenFormat = 1;
constexpr size_t kMacBytes = 32;  // HMAC-SHA256
// A tensor read result carries its bytes in one frame, whose length is a u32.
constexpr uint64_t kFrameRoom = 0xFFFFFFFFull - 4096;

void encode_fields(const Capability& c, std::vector<uint8_t>& out) {
  WireWriter w(out);
  w.u8(kTokenFormat);
  proto::write_tensor_ref(w, c.server_id, c.session_id, c.tensor, c.meta);
  w.u64(c.expires_ms);
  w.raw(c.nonce.data(), c.nonce.size());
}

// The fields of `token`; *signed_bytes is how many of its bytes the signature covers.
Status decode_fields(const std::string& token, Capability& c, size_t* signed_bytes) {
  WireReader r(reinterpret_cast<const uint8_t*>(token.data()), token.size());
  uint8_t format = 0;
  TW_RETURN_NOT_OK(r.u8(format));
  if (format != kTokenFormat)
    return data_loss("unknown capability format " + std::to_string(format));
  TW_RETURN_NOT_OK(proto::read_tensor_ref(r, c.server_id, c.session_id, c.tensor, c.meta));
  TW_RETURN_NOT_OK(r.u64(c.expires_ms));
  if (r.remaining() != c.nonce.size() + kMacBytes) {
    return data_loss("a capability ends with a 16-byte nonce and a 32-byte signature; " +
                     std::to_string(r.remaining()) + " bytes are left");
  }
  std::memcpy(c.nonce.data(), token.data() + (token.size() - r.remaining()), c.nonce.size());
  *signed_bytes = token.size() - kMacBytes;
  return Status::OK();
}

Status refused(const std::string& why) { return invalid_argument("capability refused: " + why); }

}  // namespace

// ---- capabilities ----

uint64_t CapabilityTable::steady_ms() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

CapabilityTable::CapabilityTable(std::string server_id, std::chrono::milliseconds ttl, Clock clock)
    : server_id_(std::move(server_id)), ttl_(ttl), clock_(std::move(clock)) {
  // Without a secret nothing could be signed safely: a failure leaves it zero and issue() refuses.
  if (RAND_bytes(secret_.data(), static_cast<int>(secret_.size())) != 1) secret_.fill(0);
}

void CapabilityTable::configure(std::string server_id, std::chrono::milliseconds ttl) {
  server_id_ = std::move(server_id);
  ttl_ = ttl;
}

std::string CapabilityTable::sign(const std::vector<uint8_t>& fields) const {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!HMAC(EVP_sha256(), secret_.data(), static_cast<int>(secret_.size()), fields.data(),
            fields.size(), mac, &len) ||
      len != kMacBytes) {
    return {};
  }
  return std::string(reinterpret_cast<const char*>(mac), len);
}

uint64_t CapabilityTable::pinned_bytes() const {
  if (outstanding_.load(std::memory_order_relaxed) == 0) return 0;
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t n = 0;
  for (const auto& [nonce, e] : by_nonce_) {
    if (e.data.bytes.sole_owner()) n += e.data.bytes.storage_bytes();
  }
  return n;
}

uint64_t CapabilityTable::pinned_bytes(uint64_t session) const {
  if (outstanding_.load(std::memory_order_relaxed) == 0) return 0;
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t n = 0;
  for (const auto& [nonce, e] : by_nonce_) {
    if (e.session == session && e.data.bytes.sole_owner()) n += e.data.bytes.storage_bytes();
  }
  return n;
}

bool CapabilityTable::sweep() {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t before = by_nonce_.size();
  sweep_locked(clock_());
  return by_nonce_.size() < before;
}

size_t CapabilityTable::outstanding() const {
  std::lock_guard<std::mutex> lock(mu_);
  return by_nonce_.size();
}

void CapabilityTable::sweep_locked(uint64_t now) {
  for (auto it = by_nonce_.begin(); it != by_nonce_.end();) {
    it = it->second.expires_ms <= now ? by_nonce_.erase(it) : std::next(it);
  }
  count_locked();
  // A fetch parked past the ttl is served again, and refused: its ticket was never issued.
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (it->second.expires_ms > now) {
      ++it;
      continue;
    }
    it->second.wake();
    it = waiting_.erase(it);
  }
  waiting_count_.store(waiting_.size(), std::memory_order_relaxed);
}

std::string CapabilityTable::ticket_key(uint64_t session, const std::string& ticket) {
  std::string key = "T";
  for (int i = 0; i < 8; ++i) key += static_cast<char>(session >> (8 * i));
  return key + ticket;
}

std::string CapabilityTable::ticket_key_of(const std::string& token,
                                           proto::TicketCapability* c) const {
  proto::TicketCapability t;
  if (!proto::decode_ticket_capability(token, t) || t.server_id != server_id_) return {};
  std::string key = ticket_key(t.session_id, t.ticket);
  if (c) *c = std::move(t);
  return key;
}

void CapabilityTable::issue_ticket(uint64_t session, ir::TensorId tensor, const std::string& ticket,
                                   Result<TensorData> data) {
  const uint64_t now = clock_();
  const std::string key = ticket_key(session, ticket);
  std::lock_guard<std::mutex> lock(mu_);
  sweep_locked(now);
  Entry e;
  e.expires_ms = now + static_cast<uint64_t>(ttl_.count());
  e.session = session;
  e.tensor = tensor;
  if (ticket.size() != proto::kTicketBytes) {
    e.error = invalid_argument("export: a ticket holds " + std::to_string(proto::kTicketBytes) +
                               " bytes, this one " + std::to_string(ticket.size()));
  } else if (by_nonce_.size() >= kMaxOutstanding) {
    e.error = resource_exhausted(
        "export: this server holds " + std::to_string(kMaxOutstanding) +
        " capabilities not yet used, the most it keeps (each holds its tensor); move the tensors "
        "exported, or wait for them to expire");
  } else if (data.ok()) {
    e.data = std::move(data).value();
  } else {
    e.error = data.status();
  }
  // (An entry that holds an error holds no bytes; at most 2 * kMaxOutstanding are kept.)
  if (by_nonce_.size() < 2 * kMaxOutstanding) by_nonce_[key] = std::move(e);
  count_locked();
  auto [first, last] = waiting_.equal_range(key);
  for (auto it = first; it != last; ++it) it->second.wake();
  waiting_.erase(first, last);
  waiting_count_.store(waiting_.size(), std::memory_order_relaxed);
}

bool CapabilityTable::park(const std::string& token, Wake wake) {
  proto::TicketCapability c;
  const std::string key = ticket_key_of(token, &c);
  if (key.empty()) return false;
  std::lock_guard<std::mutex> lock(mu_);
  if (by_nonce_.count(key) || waiting_.size() >= kMaxOutstanding) return false;
  waiting_.emplace(
      key, Parked{clock_() + static_cast<uint64_t>(ttl_.count()), c.session_id, std::move(wake)});
  waiting_count_.store(waiting_.size(), std::memory_order_relaxed);
  return true;
}

void CapabilityTable::progress(uint64_t session) {
  if (waiting_count_.load(std::memory_order_relaxed) == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t until = clock_() + static_cast<uint64_t>(ttl_.count());
  for (auto& [key, p] : waiting_)
    if (p.session == session) p.expires_ms = until;
}

Result<std::string> CapabilityTable::issue(uint64_t session, ir::TensorId tensor, TensorData data) {
  Capability c;
  c.server_id = server_id_;
  c.session_id = session;
  c.tensor = tensor;
  c.meta = data.meta;
  const uint64_t now = clock_();
  c.expires_ms = now + static_cast<uint64_t>(ttl_.count());
  if (RAND_bytes(c.nonce.data(), static_cast<int>(c.nonce.size())) != 1) {
    return internal_error("export: the server cannot draw a random nonce (OpenSSL RAND_bytes)");
  }
  std::vector<uint8_t> fields;
  encode_fields(c, fields);
  std::string mac = sign(fields);
  if (mac.empty()) return internal_error("export: the server cannot sign (OpenSSL HMAC failed)");
  std::string token(fields.begin(), fields.end());
  token += mac;
  std::lock_guard<std::mutex> lock(mu_);
  sweep_locked(now);
  if (by_nonce_.size() >= kMaxOutstanding) {
    return resource_exhausted("export: this server holds " + std::to_string(kMaxOutstanding) +
                              " capabilities not yet used, the most it keeps (each holds its "
                              "tensor); move the tensors exported, or wait for them to expire");
  }
  by_nonce_[std::string(c.nonce.begin(), c.nonce.end())] = {
      c.expires_ms, std::move(data), session, {}, 0, Status::OK()};
  count_locked();
  return token;
}

Result<Capability> CapabilityTable::parse(const std::string& token) {
  Capability c;
  if (proto::TicketCapability t; proto::decode_ticket_capability(token, t)) {
    c.server_id = std::move(t.server_id);
    c.session_id = t.session_id;
    c.tensor = t.tensor;
    c.meta = std::move(t.meta);
    return c;
  }
  size_t signed_bytes = 0;
  TW_RETURN_NOT_OK(decode_fields(token, c, &signed_bytes));
  return c;
}

// The capability `token` is, if it is this server's, unaltered and grants tensor `tensor` of
// session `session` (when `session` is not null).
Result<Capability> CapabilityTable::verify(const std::string& token, const uint64_t* session,
                                           ir::TensorId tensor) const {
  Capability c;
  size_t signed_bytes = 0;
  Status parsed = decode_fields(token, c, &signed_bytes);
  if (!parsed.ok()) return refused("malformed (" + parsed.message() + ")");
  if (c.server_id != server_id_) {
    return refused("it was issued by server " + c.server_id + ", not by this one (" + server_id_ +
                   "); fetch it from the server that exported the tensor");
  }
  const std::vector<uint8_t> fields(token.begin(),
                                    token.begin() + static_cast<ptrdiff_t>(signed_bytes));
  const std::string mac = sign(fields);
  if (mac.size() != kMacBytes ||
      CRYPTO_memcmp(mac.data(), token.data() + signed_bytes, kMacBytes) != 0) {
    return refused("its signature does not verify (it was altered, or signed by another server)");
  }
  if (session && (c.session_id != *session || c.tensor != tensor)) {
    return refused("it does not grant tensor " + std::to_string(tensor) + " of session " +
                   std::to_string(*session));
  }
  return c;
}

Result<TensorData> CapabilityTable::redeem(const std::string& token, uint64_t session,
                                           ir::TensorId tensor, const std::string& pull) {
  if (proto::TicketCapability t; proto::decode_ticket_capability(token, t)) {
    if (t.server_id != server_id_) {
      return refused("it names server " + t.server_id + ", not this one (" + server_id_ +
                     "); fetch it from the server that exported the tensor");
    }
    if (t.session_id != session || t.tensor != tensor) {
      return refused("it does not grant tensor " + std::to_string(tensor) + " of session " +
                     std::to_string(session));
    }
    std::lock_guard<std::mutex> lock(mu_);
    sweep_locked(clock_());
    auto it = by_nonce_.find(ticket_key(session, t.ticket));
    if (it == by_nonce_.end() || it->second.tensor != tensor) {
      return refused("no tensor was exported under its ticket within " +
                     std::to_string(ttl_.count()) +
                     " ms (the ExportAs task did not run, or the capability expired or was used "
                     "already); export the tensor again");
    }
    if (!it->second.error.ok()) return it->second.error;
    if (!(it->second.data.meta == t.meta)) {
      return refused("it names a tensor " + meta_str(t.meta) + ", tensor " +
                     std::to_string(tensor) + " is " + meta_str(it->second.data.meta));
    }
    return take_locked(it, pull);
  }
  TW_ASSIGN_OR_RETURN(Capability c, verify(token, &session, tensor));
  std::lock_guard<std::mutex> lock(mu_);
  const std::string nonce(c.nonce.begin(), c.nonce.end());
  const uint64_t now = clock_();
  if (now >= c.expires_ms) {
    by_nonce_.erase(nonce);
    count_locked();
    return refused("it expired " + std::to_string(now - c.expires_ms) +
                   " ms ago (a capability is valid for " + std::to_string(ttl_.count()) +
                   " ms; tensorwire-server --capability-ttl); export the tensor again");
  }
  auto it = by_nonce_.find(nonce);
  if (it == by_nonce_.end()) {
    return refused("it was used already (a capability is good for one move); export again");
  }
  return take_locked(it, pull);
}

Result<TensorData> CapabilityTable::take_locked(std::unordered_map<std::string, Entry>::iterator it,
                                                const std::string& pull) {
  if (!it->second.pull.empty() && it->second.pull != pull) {
    return refused("it was used already (a capability is good for one move); export again");
  }
  if (!pull.empty()) {
    it->second.pull = pull;  // kept, bound to this pull, until done() or expiry
    return it->second.data;
  }
  TensorData data = std::move(it->second.data);
  by_nonce_.erase(it);
  count_locked();
  return data;
}

void CapabilityTable::done(const std::string& token, const std::string& pull) {
  if (pull.empty()) return;
  std::string key = ticket_key_of(token, nullptr);
  if (key.empty()) {
    Result<Capability> c = verify(token, nullptr, 0);
    if (!c.ok()) return;
    key.assign(c->nonce.begin(), c->nonce.end());
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_nonce_.find(key);
  if (it == by_nonce_.end() || it->second.pull != pull) return;
  by_nonce_.erase(it);
  count_locked();
}

void serve_fetch(CapabilityTable& table, ServerMetrics& metrics, const Buffer& frame,
                 proto::OutFrame& reply, CapabilityTable::Wake park) {
  Result<proto::ClientMsg> kind = proto::peek_client_msg(frame);
  if (kind.ok() && *kind == proto::ClientMsg::kFetchDone) {
    if (Result<proto::FetchDone> m = proto::decode_fetch_done(frame); m.ok())
      table.done(m->capability, m->pull);
    return;
  }
  // A Fetch is a FetchFrom without a pull (the capability is used up at once), a FetchBound one
  // from offset 0 (both answered with the tensor itself).
  Result<proto::FetchFrom> m = data_loss("not a fetch");
  const bool from = kind.ok() && *kind == proto::ClientMsg::kFetchFrom;
  if (from) {
    m = proto::decode_fetch_from(frame);
  } else if (kind.ok() && *kind == proto::ClientMsg::kFetchBound) {
    if (Result<proto::FetchBound> b = proto::decode_fetch_bound(frame); b.ok()) {
      m = proto::FetchFrom{
          b->request_id, b->session_id, b->tensor, std::move(b->capability), std::move(b->pull), 0};
    } else {
      m = b.status();
    }
  } else if (Result<proto::Fetch> f = proto::decode_fetch(frame); f.ok()) {
    m = proto::FetchFrom{f->request_id, f->session_id, f->tensor, std::move(f->capability), "", 0};
  } else {
    m = f.status();
  }
  const bool bound = kind.ok() && *kind != proto::ClientMsg::kFetch;
  if (m.ok() && bound && m->pull.size() != proto::kPullIdBytes) {
    m = data_loss("a " + std::string(from ? "FetchFrom" : "FetchBound") + "'s pull id holds " +
                  std::to_string(m->pull.size()) + " bytes, not " +
                  std::to_string(proto::kPullIdBytes));
  }
  if (!m.ok()) return proto::encode_read_result(0, m.status().with_context("fetch"), reply);
  if (park && table.park(m->capability, std::move(park))) return;
  Result<TensorData> d = table.redeem(m->capability, m->session_id, m->tensor, m->pull);
  if (d.ok() && d->bytes.size() > kFrameRoom) {
    d = resource_exhausted("fetch: tensor " + std::to_string(m->tensor) + " holds " +
                           std::to_string(d->bytes.size()) +
                           " bytes, more than one frame can carry (4 GiB); move it in slices");
  }
  if (d.ok() && m->offset > d->bytes.size()) {
    // (The capability stays bound to this pull: only its own retry gets that far.)
    d = invalid_argument("fetch: offset " + std::to_string(m->offset) +
                         " is past the end of tensor " + std::to_string(m->tensor) +
                         ", which holds " + std::to_string(d->bytes.size()) +
                         " bytes; a FetchFrom asks for the bytes after those a pull received");
  }
  if (d.ok() && from) {
    // The rest of the bytes, as a u8 vector (a slice: nothing is copied).
    const uint64_t rest = d->bytes.size() - m->offset;
    d = TensorData{TensorMeta{{static_cast<int64_t>(rest)}, kU8},
                   d->bytes.slice(static_cast<size_t>(m->offset), static_cast<size_t>(rest))};
  }
  if (d.ok()) metrics.transfer(Direction::kOut, d->bytes.size());
  proto::encode_read_result(m->request_id, std::move(d), reply);
}

// ---- pulling ----

asio::error_code step(asio::io_context& io, net::Stream& s, std::chrono::milliseconds stall,
                      const std::function<void(net::IoHandler)>& start, size_t* moved) {
  bool done = false;
  asio::error_code result;
  start([&](const asio::error_code& ec, size_t n) {
    done = true;
    result = ec;
    if (moved) *moved = n;
  });
  io.restart();
  io.run_for(stall);
  if (done) return result;
  s.shutdown();
  io.restart();
  io.run_for(std::chrono::seconds(1));
  if (!done) {
    s.close();  // cancels what the shutdown did not end
    io.restart();
    io.run();
  }
  return asio::error::timed_out;
}

// Reads one frame's payload; `max` bounds its length before anything is allocated. The byte at
// offset `aligned` of the payload lands 64-byte aligned (where a tensor's bytes start, so that the
// tensor can keep them as its storage: an unaligned one would be copied).
Result<Buffer> read_frame(asio::io_context& io, net::Stream& s, std::chrono::milliseconds stall,
                          uint64_t max, const char* what, size_t aligned, PartialFrame* partial,
                          std::chrono::milliseconds first) {
  uint8_t header[4];
  asio::error_code ec = step(io, s, first.count() > 0 ? first : stall, [&](net::IoHandler h) {
    s.async_read(asio::buffer(header, 4), std::move(h));
  });
  if (ec) return unavailable(std::string("no ") + what + " from it (" + ec.message() + ")");
  const uint32_t len = net::frame_length(header);
  if (len == 0 || len > max) {
    return data_loss(std::string("its ") + what + " frame announces " + std::to_string(len) +
                     " bytes, at most " + std::to_string(max) + " were expected");
  }
  constexpr size_t kAlign = 64;
  const size_t shift = (kAlign - aligned % kAlign) % kAlign;
  Buffer payload = Buffer::allocate(shift + len).slice(shift, len);
  // In pieces, so the stall timeout bounds each piece rather than the whole tensor.
  constexpr size_t kPiece = size_t{16} << 20;
  for (size_t at = 0; at < len;) {
    const size_t n = std::min<size_t>(kPiece, len - at);
    size_t got = 0;
    ec = step(
        io, s, stall,
        [&](net::IoHandler h) { s.async_read(asio::buffer(payload.data() + at, n), std::move(h)); },
        &got);
    if (ec) {
      if (partial) *partial = {payload, at + got};
      return unavailable("the connection ended after " + std::to_string(at + got) + " of the " +
                         std::to_string(len) + " bytes of its " + what + " (" + ec.message() + ")");
    }
    at += n;
  }
  return payload;
}

Puller::Puller(int threads, std::chrono::milliseconds stall, ServerMetrics* metrics)
    : stall_(stall), metrics_(metrics) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { run(); });
}

Puller::~Puller() {
  abort();
  for (std::thread& t : threads_) t.join();
}

void Puller::abort() {
  std::deque<std::pair<PullRequest, Done>> queued;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    for (net::Stream* s : active_) s->shutdown();
    queued.swap(queue_);
  }
  cv_.notify_all();
  for (auto& [req, done] : queued) done(unavailable("the importing server is stopping"));
}

void Puller::start(PullRequest request, Done done) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_) {
      queue_.emplace_back(std::move(request), std::move(done));
      cv_.notify_one();
      return;
    }
  }
  done(unavailable("the importing server is stopping"));
}

void Puller::run() {
  for (;;) {
    std::pair<PullRequest, Done> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    // The id every try of this pull presents (FetchBound): the source serves the capability again
    // to it, and to no other pull.
    std::string pull_id(proto::kPullIdBytes, '\0');
    Result<TensorData> got = internal_error("the server cannot draw a random pull id");
    if (RAND_bytes(reinterpret_cast<unsigned char*>(pull_id.data()),
                   static_cast<int>(pull_id.size())) == 1) {
      auto backoff = std::chrono::milliseconds(5);
      Received kept;
      for (int attempt = 1;; ++attempt) {
        bool retry = false;
        got = pull(job.first, pull_id, kept, &retry);
        if (got.ok() || !retry || attempt >= kPullAttempts) break;
        if (metrics_) metrics_->pull_retried(kept.fresh, kept.lost);
        kept.fresh = kept.lost = 0;
        {
          std::unique_lock<std::mutex> lock(mu_);
          if (cv_.wait_for(lock, backoff, [&] { return stopping_; })) break;
        }
        backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
      }
    }
    if (!got.ok()) {
      const proto::TensorSource& src = job.first.source;
      got = Status(got.status().code(),
                   "import of tensor " + std::to_string(src.tensor) + " of session " +
                       std::to_string(src.session_id) + " from server " + src.url + " into " +
                       job.first.importer + " failed: " + got.status().message());
    }
    job.second(std::move(got));
  }
}

void Puller::keep(Received& kept, const Buffer& frame, size_t data_at, uint64_t rest, uint64_t n) {
  if (n == 0 || n > rest || frame.size() != data_at + rest) return;
  if (kept.have == 0) {
    kept.frame = frame;  // the first reply's frame becomes the tensor's (no copy)
    kept.data_at = data_at;
  } else {
    std::memcpy(kept.frame.data() + kept.data_at + kept.have, frame.data() + data_at, n);
  }
  kept.have += n;
  kept.fresh += n;
}

Result<TensorData> Puller::pull(const PullRequest& r, const std::string& pull_id, Received& kept,
                                bool* retry) {
  *retry = false;
  const std::chrono::milliseconds stall = stall_;
  TW_ASSIGN_OR_RETURN(net::Url url, net::parse_url(r.source.url));
  asio::io_context io;
  net::TlsOptions tls;
  tls.fingerprint = r.source.fingerprint;
  auto dialed = net::dial(url, io, tls);
  if (!dialed.ok()) {
    // A source that refuses the connection is gone (and its capabilities with it); a link that
    // fails otherwise (a reset during a TLS handshake, say) is tried again.
    const std::string& m = dialed.status().message();
    *retry = m.find("onnection refused") == std::string::npos &&
             m.find("No such file") == std::string::npos;
    return unavailable("cannot reach it: " + m);
  }
  std::unique_ptr<net::Stream> stream = std::move(dialed).value();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return unavailable("the importing server is stopping");
    active_.insert(stream.get());
  }
  struct Unregister {
    Puller* p;
    net::Stream* s;
    ~Unregister() {
      std::lock_guard<std::mutex> lock(p->mu_);
      p->active_.erase(s);
    }
  } unregister{this, stream.get()};
  // A cut: the link ended or reset before the exchange was whole (not a stall, which times out).
  auto cut = [&](const Status& st) {
    *retry = st.code() == StatusCode::kUnavailable &&
             st.message().find("timed out") == std::string::npos;
    return st;
  };

  // Hello first: the Welcome says whether the source keeps a capability for a retry (protocol
  // 10's FetchBound), then the fetch.
  proto::OutFrame hello;
  proto::encode_hello({3, proto::kProtocolVersion, proto::kPeerOnly, r.credential}, hello);
  uint8_t h1[4];
  std::vector<asio::const_buffer> bufs;
  net::frame_buffers(hello, h1, bufs);
  asio::error_code ec =
      step(io, *stream, stall, [&](net::IoHandler h) { stream->async_write(bufs, std::move(h)); });
  if (ec) return cut(unavailable("cannot send it the hello (" + ec.message() + ")"));

  constexpr uint64_t kMaxWelcome = 16u << 20;
  Result<Buffer> wf = read_frame(io, *stream, stall, kMaxWelcome, "handshake reply");
  if (!wf.ok()) return cut(wf.status());
  TW_ASSIGN_OR_RETURN(proto::ServerMessage w, proto::decode_server_message(*wf));
  if (w.kind == proto::ServerMsg::kRefuse) {
    *retry = w.refuse.reason == proto::RefuseReason::kServerBusy;
    return invalid_argument(std::string("it refused the connection (") +
                            proto::refuse_reason_name(w.refuse.reason) + "): " + w.refuse.message);
  }
  if (w.kind != proto::ServerMsg::kWelcome) return data_loss("it sent no Welcome");
  const bool bound = w.welcome.version >= proto::kRetryablePullSince;
  // Protocol 11: each try is a FetchFrom, which a retry asks for the bytes after those kept.
  const bool resumable = w.welcome.version >= proto::kResumedPullSince;
  const uint64_t nbytes = proto::meta_bytes(r.meta);
  if (resumable) {
    // A FetchFrom's reply carries bytes without their meta: the capability names it (its fields
    // are signed, and the source refuses one altered).
    Result<Capability> c = CapabilityTable::parse(r.source.capability);
    if (c.ok() && !(c->meta == r.meta)) {
      return invalid_argument("its capability grants a tensor " + meta_str(c->meta) +
                              ", the move expects " + meta_str(r.meta));
    }
  } else {
    kept.lost += kept.have;
    kept.have = 0;
    kept.frame = {};
  }
  const uint64_t offset = kept.have;

  proto::OutFrame fetch;
  if (resumable) {
    proto::encode_fetch_from(
        {1, r.source.session_id, r.source.tensor, r.source.capability, pull_id, offset}, fetch);
  } else if (bound) {
    proto::encode_fetch_bound(
        {1, r.source.session_id, r.source.tensor, r.source.capability, pull_id}, fetch);
  } else {
    proto::encode_fetch({1, r.source.session_id, r.source.tensor, r.source.capability}, fetch);
  }
  bufs.clear();
  net::frame_buffers(fetch, h1, bufs);
  ec = step(io, *stream, stall, [&](net::IoHandler h) { stream->async_write(bufs, std::move(h)); });
  if (ec) {
    Status st = cut(unavailable("cannot send it the fetch (" + ec.message() + ")"));
    if (!bound) *retry = false;  // (before protocol 10 a fetch that reached it used it up)
    return st;
  }

  // The reply's tensor: the move's, or (FetchFrom) its bytes from `offset` on as a u8 vector.
  const uint64_t rest = nbytes - offset;
  const TensorMeta want = resumable ? TensorMeta{{static_cast<int64_t>(rest)}, kU8} : r.meta;
  // The tensor's bytes and its header, or a refusal (a status message within kMaxStringBytes).
  const uint64_t max = rest + 64 + 8 * want.shape.size() + proto::kMaxStringBytes;
  // A ReadResult's bytes follow its type, request id, OK status, meta and length.
  const size_t data_at =
      1 + 8 + proto::FieldSize::of(Status::OK()) + proto::FieldSize::of(want) + 8;
  PartialFrame part;
  proto::TicketCapability ticket;
  const bool ahead = proto::decode_ticket_capability(r.source.capability, ticket);
  Result<Buffer> payload = read_frame(
      io, *stream, stall, max, "tensor", data_at, &part,
      ahead ? std::chrono::milliseconds(kTicketReplyWait) : std::chrono::milliseconds(0));
  if (!payload.ok()) {
    Status st = cut(payload.status());
    if (!bound) *retry = false;
    // The tensor bytes that arrived, after a whole head of an answer carrying them.
    const uint64_t arrived =
        part.received > data_at && proto::read_result_data_offset(part.payload.as<const uint8_t>(),
                                                                  part.received) == data_at
            ? part.received - data_at
            : 0;
    if (*retry && resumable) {
      keep(kept, part.payload, data_at, rest, arrived);
    } else if (*retry) {
      kept.lost += arrived;
    }
    return st;
  }
  TW_ASSIGN_OR_RETURN(proto::ServerMessage m, proto::decode_server_message(*payload));
  if (m.kind != proto::ServerMsg::kReadResult || m.read.request_id != 1) {
    return data_loss("it answered the fetch with something else than the tensor");
  }
  if (bound && m.read.result.ok()) {
    // The capability is used up; a FetchDone lost here leaves it to expire, bound to this pull.
    proto::OutFrame done;
    proto::encode_fetch_done({r.source.capability, pull_id}, done);
    bufs.clear();
    net::frame_buffers(done, h1, bufs);
    (void)step(io, *stream, stall,
               [&](net::IoHandler h) { stream->async_write(bufs, std::move(h)); });
  }
  stream->close();
  Result<TensorData>& got = m.read.result;
  if (!got.ok()) return Status(got.status().code(), "it refused: " + got.status().message());
  if (!(got->meta == want)) {
    return invalid_argument("it sent a tensor " + meta_str(got->meta) + ", the move expects " +
                            meta_str(want));
  }
  if (!resumable) return std::move(got);
  if (offset == 0) return TensorData{r.meta, std::move(got->bytes)};
  // The rest joins the bytes kept from the tries before (the first reply's frame, now whole).
  std::memcpy(kept.frame.data() + kept.data_at + offset, got->bytes.data(), rest);
  TW_ASSIGN_OR_RETURN(proto::ServerMessage whole, proto::decode_server_message(kept.frame));
  if (whole.kind != proto::ServerMsg::kReadResult || !whole.read.result.ok() ||
      !(whole.read.result->meta == TensorMeta{{static_cast<int64_t>(nbytes)}, kU8})) {
    return data_loss("the bytes kept from its earlier replies do not make the tensor");
  }
  return TensorData{r.meta, std::move(whole.read.result->bytes)};
}

}  // namespace tw::server
