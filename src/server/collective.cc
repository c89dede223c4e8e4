#include "server/collective.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <asio/io_context.hpp>
#include <cstring>
#include <stdexcept>

#include "net/framing.h"
#include "net/stream.h"
#include "server/transfer.h"

namespace tw::server {
namespace proto = protocol;

// ---- the store a server hosts ----

void StoreTable::sweep_locked(std::chrono::steady_clock::time_point now) {
  for (auto it = keys_.begin(); it != keys_.end();) {
    if (now - it->second.set_at < kTtl) {
      ++it;
      continue;
    }
    bytes_ -= it->first.size() + it->second.value.size();
    it = keys_.erase(it);
  }
}

Status StoreTable::set(const std::string& key, std::string value) {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  sweep_locked(now);
  auto it = keys_.find(key);
  const size_t old = it == keys_.end() ? 0 : it->first.size() + it->second.value.size();
  const size_t add = key.size() + value.size();
  if ((it == keys_.end() && keys_.size() >= kMaxKeys) || bytes_ - old + add > kMaxBytes) {
    return resource_exhausted("the rendezvous store is full (" + std::to_string(keys_.size()) +
                              " keys, " + std::to_string(bytes_) +
                              " bytes): too many collective "
                              "groups are connecting at once");
  }
  bytes_ = bytes_ - old + add;
  keys_[key] = Entry{std::move(value), now};
  return Status::OK();
}

std::optional<std::string> StoreTable::get(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = keys_.find(key);
  if (it == keys_.end()) return std::nullopt;
  return it->second.value;
}

void serve_store(StoreTable& table, const Buffer& frame, proto::OutFrame& reply) {
  proto::StoreReply r;
  Result<proto::StoreRequest> m = proto::decode_store_request(frame);
  if (!m.ok()) {
    r.status = m.status();
  } else {
    r.request_id = m->request_id;
    if (m->op == proto::StoreOp::kSet) {
      r.status = table.set(m->key, std::move(m->value));
    } else if (std::optional<std::string> v = table.get(m->key)) {
      r.present = true;
      r.value = std::move(*v);
    }
  }
  proto::encode_store_reply(r, reply);
}

namespace {

// ---- the store as a participant sees it: Gloo's Store over a peer connection ----

// Gloo reports a failed rendezvous by exception; this one carries the message to the job.
struct StoreError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class PeerStore final : public gloo::rendezvous::Store {
 public:
  PeerStore(std::chrono::milliseconds timeout) : timeout_(timeout) {}

  Status connect(const std::string& url_text, const std::string& fingerprint,
                 const std::string& credential) {
    TW_ASSIGN_OR_RETURN(net::Url url, net::parse_url(url_text));
    net::TlsOptions tls;
    tls.fingerprint = fingerprint;
    auto dialed = net::dial(url, io_, tls);
    if (!dialed.ok()) return unavailable("cannot reach it: " + dialed.status().message());
    s_ = std::move(dialed).value();
    proto::OutFrame hello;
    proto::encode_hello({3, proto::kProtocolVersion, proto::kPeerOnly, credential}, hello);
    TW_RETURN_NOT_OK(send(hello));
    constexpr uint64_t kMaxWelcome = 16u << 20;
    TW_ASSIGN_OR_RETURN(Buffer wf, read_frame(io_, *s_, timeout_, kMaxWelcome, "handshake reply"));
    TW_ASSIGN_OR_RETURN(proto::ServerMessage w, proto::decode_server_message(wf));
    if (w.kind == proto::ServerMsg::kRefuse) {
      return invalid_argument(std::string("it refused the connection (") +
                              proto::refuse_reason_name(w.refuse.reason) +
                              "): " + w.refuse.message);
    }
    if (w.kind != proto::ServerMsg::kWelcome) return data_loss("it sent no Welcome");
    if (w.welcome.version < proto::kMovesSince)
      return unimplemented("it speaks protocol " + std::to_string(w.welcome.version) +
                           ", collectives need 3");
    return Status::OK();
  }
  ~PeerStore() override {
    if (s_) s_->close();
  }

  void set(const std::string& key, const std::vector<char>& data) override {
    proto::StoreReply r = call(proto::StoreOp::kSet, key, std::string(data.begin(), data.end()));
    if (!r.status.ok()) throw StoreError("rendezvous: " + r.status.message());
  }
  std::vector<char> get(const std::string& key) override {
    wait({key}, timeout_);
    proto::StoreReply r = call(proto::StoreOp::kGet, key, {});
    return {r.value.begin(), r.value.end()};
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::chrono::milliseconds pause(1);
    for (const std::string& key : keys) {
      while (!call(proto::StoreOp::kGet, key, {}).present) {
        if (std::chrono::steady_clock::now() >= deadline) {
          throw StoreError("rendezvous: the other participants did not all arrive within " +
                           std::to_string(timeout.count()) + " ms (waiting for key " + key + ")");
        }
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::milliseconds(20));
      }
    }
  }

 private:
  Status send(const proto::OutFrame& f) {
    uint8_t header[4];
    std::vector<asio::const_buffer> bufs;
    net::frame_buffers(f, header, bufs);
    asio::error_code ec =
        step(io_, *s_, timeout_, [&](net::IoHandler h) { s_->async_write(bufs, std::move(h)); });
    if (ec) return unavailable("the store's server: cannot send (" + ec.message() + ")");
    return Status::OK();
  }
  proto::StoreReply call(proto::StoreOp op, const std::string& key, std::string value) {
    proto::OutFrame f;
    proto::encode_store_request({++next_id_, op, key, std::move(value)}, f);
    Status st = send(f);
    if (!st.ok()) throw StoreError(st.message());
    constexpr uint64_t kMaxReply = 2 * proto::kMaxStringBytes + 64;
    Result<Buffer> frame = read_frame(io_, *s_, timeout_, kMaxReply, "store reply");
    if (!frame.ok()) throw StoreError("the store's server: " + frame.status().message());
    Result<proto::StoreReply> r = proto::decode_store_reply(*frame);
    if (!r.ok()) throw StoreError("the store's server: " + r.status().message());
    if (r->request_id != next_id_) throw StoreError("the store's server answered out of order");
    return std::move(r).value();
  }

  std::chrono::milliseconds timeout_;
  asio::io_context io_;
  std::unique_ptr<net::Stream> s_;
  uint64_t next_id_ = 0;
};

// Gloo's ring sends each participant's chunk in segments of at most this, two in flight; its
// default (1 MiB) costs a round of small messages per MiB.
constexpr size_t kSegmentBytes = size_t{8} << 20;

bool reduces(proto::CollectiveKind k) {
  return k == proto::CollectiveKind::kAllReduce || k == proto::CollectiveKind::kReduceScatter;
}

// Calls fn.template operator()<T>() for the element types Gloo reduces here.
template <class Fn>
Status dispatch_reduce_type(DType d, Fn&& fn) {
  switch (d) {
    case kF32: fn.template operator()<float>(); return Status::OK();
    case kF64: fn.template operator()<double>(); return Status::OK();
    case kI32: fn.template operator()<int32_t>(); return Status::OK();
    case kI64: fn.template operator()<int64_t>(); return Status::OK();
    default:
      return invalid_argument(std::string("collectives reduce f32, f64, i32 and i64, not ") +
                              std::string(dtype_name(d)));
  }
}

}  // namespace

Status check_collective(const proto::CollectiveSpec& c, const TensorMeta& in) {
  const std::string what = std::string(proto::collective_name(c.kind)) + ": ";
  if (c.size == 0 || c.rank >= c.size) {
    return invalid_argument(what + "rank " + std::to_string(c.rank) + " of " +
                            std::to_string(c.size) + " participants");
  }
  if (c.kind == proto::CollectiveKind::kBroadcast && c.root >= c.size) {
    return invalid_argument(what + "root " + std::to_string(c.root) + " of " +
                            std::to_string(c.size) + " participants");
  }
  if (c.group.empty() || c.store_url.empty()) {
    return invalid_argument(what + "no group or no rendezvous store named");
  }
  if (reduces(c.kind)) {
    TW_RETURN_NOT_OK(dispatch_reduce_type(in.dtype, []<class T>() {}));
    if (c.reduce == proto::ReduceKind::kMean && in.dtype != kF32 && in.dtype != kF64) {
      return invalid_argument(what + "a mean needs a floating-point tensor, not " +
                              std::string(dtype_name(in.dtype)));
    }
  }
  TensorMeta want = in;
  if (c.kind == proto::CollectiveKind::kAllGather ||
      c.kind == proto::CollectiveKind::kReduceScatter) {
    if (in.shape.empty()) return invalid_argument(what + "needs a tensor of rank 1 or more");
    if (c.kind == proto::CollectiveKind::kAllGather) {
      want.shape[0] = in.shape[0] * static_cast<int64_t>(c.size);
    } else {
      if (in.shape[0] % static_cast<int64_t>(c.size) != 0) {
        return invalid_argument(what + "dimension 0 (" + std::to_string(in.shape[0]) +
                                ") does not split into " + std::to_string(c.size) + " equal parts");
      }
      want.shape[0] = in.shape[0] / static_cast<int64_t>(c.size);
    }
  }
  if (!(want == c.out_meta)) {
    return invalid_argument(what + "the output is " + meta_str(want) + " for an input " +
                            meta_str(in) + ", the task says " + meta_str(c.out_meta));
  }
  return Status::OK();
}

Collectives::Collectives(std::string credential, std::string host, std::string self_name)
    : credential_(std::move(credential)),
      host_(std::move(host)),
      self_name_(std::move(self_name)) {}

Collectives::~Collectives() { join(); }

void Collectives::join() {
  stop();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

void Collectives::stop() {
  std::deque<Job> queued;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    queued.swap(queue_);
  }
  cv_.notify_all();
  for (Job& j : queued) j.done(unavailable("the server is stopping"));
}

void Collectives::forget(uint64_t session) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = contexts_.begin(); it != contexts_.end();) {
    it = it->first.first == session ? contexts_.erase(it) : std::next(it);
  }
}

void Collectives::start(uint64_t session, proto::CollectiveSpec c, TensorData input, Done done) {
  std::unique_lock<std::mutex> lock(mu_);
  if (stopping_) {
    lock.unlock();
    return done(unavailable("the server is stopping"));
  }
  // Every part blocks a thread until all participants arrive, so parts never wait for a thread
  // (two sessions of this server in one collective would wait for each other): a new thread
  // unless one is idle, up to kMaxThreads.
  if (idle_ == 0 && threads_.size() >= static_cast<size_t>(kMaxThreads)) {
    lock.unlock();
    return done(resource_exhausted("this server runs " + std::to_string(kMaxThreads) +
                                   " collectives already"));
  }
  queue_.push_back(Job{session, std::move(c), std::move(input), std::move(done)});
  if (idle_ == 0) {
    threads_.emplace_back([this] { loop(); });
  } else {
    cv_.notify_one();
  }
}

void Collectives::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    ++idle_;
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    --idle_;
    if (queue_.empty()) return;
    std::optional<Job> held(std::move(queue_.front()));
    queue_.pop_front();
    lock.unlock();
    Job& job = *held;
    Result<TensorData> out = run(job);
    if (!out.ok()) {
      const proto::CollectiveSpec& c = job.spec;
      out = Status(out.status().code(), std::string(proto::collective_name(c.kind)) + " of group " +
                                            c.group + " (rank " + std::to_string(c.rank) + " of " +
                                            std::to_string(c.size) + ") on " + self_name_ +
                                            " failed: " + out.status().message());
      // A failed context is not reused: the other participants may have gone.
      std::lock_guard<std::mutex> relock(mu_);
      contexts_.erase({job.session, job.spec.group});
    }
    job.done(std::move(out));
    // Before the lock: the callback may hold the last reference to its connection, whose end
    // calls forget(), which takes the lock.
    held.reset();
    lock.lock();
  }
}

Result<std::shared_ptr<gloo::Context>> Collectives::context(const Job& job) {
  const proto::CollectiveSpec& c = job.spec;
  std::shared_ptr<gloo::transport::Device> device;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = contexts_.find({job.session, c.group});
    if (it != contexts_.end()) return it->second;
    if (!device_) {
      gloo::transport::tcp::attr attr;
      attr.hostname = host_;
      device_ = gloo::transport::tcp::CreateDevice(attr);
    }
    device = device_;
  }
  const std::chrono::milliseconds timeout(c.timeout_ms);
  auto store = std::make_unique<PeerStore>(timeout);
  Status st = store->connect(c.store_url, c.fingerprint, credential_);
  if (!st.ok()) {
    return Status(st.code(), "the rendezvous store at " + c.store_url + ": " + st.message());
  }
  auto ctx = std::make_shared<gloo::rendezvous::Context>(static_cast<int>(c.rank),
                                                         static_cast<int>(c.size));
  ctx->setTimeout(timeout);
  gloo::rendezvous::PrefixStore prefixed(c.group, *store);
  ctx->connectFullMesh(prefixed, device);
  std::lock_guard<std::mutex> lock(mu_);
  contexts_[{job.session, c.group}] = ctx;
  return std::shared_ptr<gloo::Context>(ctx);
}

Result<TensorData> Collectives::run(Job& job) {
  const proto::CollectiveSpec& c = job.spec;
  try {
    TW_ASSIGN_OR_RETURN(std::shared_ptr<gloo::Context> ctx, context(job));
    const size_t in_bytes = job.input.bytes.size();
    const size_t esize = dtype_size(job.input.meta.dtype);
    const size_t count = esize == 0 ? 0 : in_bytes / esize;
    TensorData out;
    out.meta = c.out_meta;
    switch (c.kind) {
      case proto::CollectiveKind::kBroadcast: {
        out.bytes = Buffer::allocate(in_bytes);
        gloo::BroadcastOptions o(ctx);
        o.setRoot(static_cast<int>(c.root));
        if (c.rank == c.root) o.setInput(job.input.bytes.as<uint8_t>(), in_bytes);
        o.setOutput(out.bytes.as<uint8_t>(), in_bytes);
        if (in_bytes > 0) gloo::broadcast(o);
        return out;
      }
      case proto::CollectiveKind::kAllGather: {
        out.bytes = Buffer::allocate(in_bytes * c.size);
        gloo::AllgatherOptions o(ctx);
        o.setInput(job.input.bytes.as<uint8_t>(), in_bytes);
        o.setOutput(out.bytes.as<uint8_t>(), in_bytes * c.size);
        if (in_bytes > 0) gloo::allgather(o);
        return out;
      }
      case proto::CollectiveKind::kAllReduce:
      case proto::CollectiveKind::kReduceScatter: {
        // Gloo's ring reduces each chunk along the ring once and then copies the reduced chunk to
        // every participant, so all of them hold the same bytes. A reduce-scatter is the
        // all-reduce with each participant keeping its part of dimension 0. Gloo reduces in
        // place: a donated input (the job holds its only reference, in pooled memory) is reduced
        // where it lies, any other is copied first (a 64 MiB copy is a sixth of the collective).
        const Buffer& in = job.input.bytes;
        Buffer full =
            in.sole_owner() && in.pool() != nullptr ? in : Buffer::copy_of(in.data(), in_bytes);
        Status typed = dispatch_reduce_type(job.input.meta.dtype, [&]<class T>() {
          gloo::AllreduceOptions o(ctx);
          o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
          o.setMaxSegmentSize(kSegmentBytes);
          o.setOutput(full.as<T>(), count);
          using Fn = void (*)(void*, const void*, const void*, size_t);
          const Fn fn = c.reduce == proto::ReduceKind::kMax ? static_cast<Fn>(&gloo::max<T>)
                                                            : static_cast<Fn>(&gloo::sum<T>);
          o.setReduceFunction(fn);
          if (count > 0) gloo::allreduce(o);
          if (c.reduce == proto::ReduceKind::kMean) {
            if constexpr (std::is_floating_point_v<T>) {
              T* p = full.as<T>();
              const T n = static_cast<T>(c.size);
              for (size_t i = 0; i < count; ++i) p[i] /= n;
            }
          }
        });
        TW_RETURN_NOT_OK(typed);
        if (c.kind == proto::CollectiveKind::kAllReduce) {
          out.bytes = std::move(full);
        } else {
          const size_t part = in_bytes / c.size;
          out.bytes = full.slice(part * c.rank, part);
        }
        return out;
      }
    }
    return invalid_argument("unknown collective");
  } catch (const std::exception& e) {
    return unavailable(e.what());
  }
}

}  // namespace tw::server
