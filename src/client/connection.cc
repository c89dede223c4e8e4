#include "client/connection.h"

#include <pthread.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdlib>

#include "client/profile.h"
#include "net/framing.h"
#include "net/tls_stream.h"

namespace tw::client {

static_assert(protocol::kNeedMoreBytes == net::FrameReader::kNeedMore);

namespace proto = protocol;

Options Options::from_env() {
  Options o;
  if (const char* e = std::getenv("TW_BATCH_OPS")) o.batch_ops = static_cast<uint32_t>(std::max(1L, std::atol(e)));
  if (const char* e = std::getenv("TW_BATCH_BYTES")) o.batch_bytes = std::max(1024ULL, std::strtoull(e, nullptr, 10));
  if (const char* e = std::getenv("TW_FLUSH_IDLE_US")) o.idle_flush_us = static_cast<uint32_t>(std::max(0L, std::atol(e)));
  if (const char* e = std::getenv("TW_SPIN_US"))
    o.spin_us = static_cast<uint32_t>(std::clamp(std::atol(e), 0L, 10'000L));
  if (const char* e = std::getenv("TW_SHM")) o.shm = std::string(e) != "0";
  if (const char* e = std::getenv("TW_CREDENTIAL")) o.credential = e;
  if (const char* e = std::getenv("TW_TLS_CA")) o.tls.ca_file = e;
  if (const char* e = std::getenv("TW_TLS_FINGERPRINT")) o.tls.fingerprint = e;
  if (const char* e = std::getenv("TW_TLS_CIPHERS")) o.tls.cipher_suites = e;
  return o;
}

namespace {

// Blocking handshake on a stream not yet driven by an io thread.
Result<proto::Welcome> handshake(net::Stream& sock, const net::Url& url, uint32_t device_index,
                                 const std::string& credential) {
  asio::error_code ec;
  proto::OutFrame hello;
  proto::encode_hello({proto::kMinProtocolVersion, proto::kProtocolVersion, device_index, credential}, hello);
  uint8_t header[4];
  std::vector<asio::const_buffer> bufs;
  net::frame_buffers(hello, header, bufs);
  ec = net::write_all(sock, bufs);
  if (ec) return unavailable("handshake with " + url.str() + " failed: " + ec.message());
  ec = net::read_exact(sock, asio::buffer(header, 4));
  if (ec) return unavailable("handshake with " + url.str() + " failed: the server closed the connection (" + ec.message() + "); is it a tensorwire server?");
  if (net::looks_like_tls(header, sizeof header)) {
    return unavailable("handshake with " + url.str() +
                       " failed: the server speaks TLS there; connect with tls://" + url.host +
                       ":" + std::to_string(url.port));
  }
  uint32_t len = net::frame_length(header);
  if (len == 0 || len > (16u << 20)) return data_loss("handshake with " + url.str() + ": bad reply frame of " + std::to_string(len) + " bytes; is it a tensorwire server?");
  Buffer payload = Buffer::allocate(len);
  ec = net::read_exact(sock, asio::buffer(payload.data(), len));
  if (ec) return unavailable("handshake with " + url.str() + " failed: " + ec.message());
  TW_ASSIGN_OR_RETURN(proto::ServerMessage m, proto::decode_server_message(payload));
  if (m.kind == proto::ServerMsg::kRefuse) {
    StatusCode code = m.refuse.reason == proto::RefuseReason::kServerBusy ? StatusCode::kResourceExhausted
                                                                          : StatusCode::kInvalidArgument;
    return Status(code, "server " + url.str() + " refused the connection (" +
                            proto::refuse_reason_name(m.refuse.reason) + "): " + m.refuse.message);
  }
  if (m.kind != proto::ServerMsg::kWelcome) return data_loss("handshake with " + url.str() + ": unexpected reply");
  return m.welcome;
}

}  // namespace

Result<proto::Welcome> enumerate(const net::Url& url, const Options& options) {
  asio::io_context io;
  TW_ASSIGN_OR_RETURN(std::unique_ptr<net::Stream> stream, net::dial(url, io, options.tls));
  return handshake(*stream, url, proto::kEnumerateOnly, options.credential);
}

Connection::Connection(net::Url url, uint32_t device_index, Options options)
    : url_(std::move(url)), device_index_(device_index), options_(std::move(options)) {
  restart_batches_locked();
  profile::enrol(this);
}

Connection::~Connection() {
  close();
  profile::leave(this, counters());
}

Status Connection::ensure_connected() {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ == State::kConnected) return Status::OK();
  if (state_ == State::kDead) return dead_;
  return connect_locked();
}

Status Connection::connect_locked() {
  auto dialed = net::dial(url_, io_, options_.tls);
  if (!dialed.ok()) {
    state_ = State::kDead;
    dead_ = dialed.status();
    return dead_;
  }
  stream_ = std::move(dialed).value();
  auto w = handshake(*stream_, url_, device_index_, options_.credential);
  if (!w.ok()) {
    state_ = State::kDead;
    dead_ = w.status();
    return dead_;
  }
  welcome_ = std::move(w).value();
  batch_.set_packed_ids(welcome_.version >= 4);
  // A server always sends its limit (>= 1024); the floor only guards against a broken peer.
  frame_limit_ = std::clamp<uint64_t>(welcome_.limits.max_frame_bytes, 1024, 0xFFFFFFFFu);
  timer_.emplace(io_);
  check_timer_.emplace(io_);
  work_.emplace(io_.get_executor());
  state_ = State::kConnected;  // (reset below if the I/O thread cannot start)
  arm_watch_locked();
  try {
    io_thread_ = std::thread([this] { io_.run(); });
    // Named, so that a profile (and spin_test) can tell it from the program's threads.
    ::pthread_setname_np(io_thread_.native_handle(), "tw-client-io");
  } catch (const std::system_error& e) {
    state_ = State::kDead;
    dead_ = resource_exhausted(std::string("cannot start the client I/O thread: ") + e.what());
    return dead_;
  }
  return Status::OK();
}

void Connection::close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ == State::kConnected) flush_locked();
    closing_ = true;
    kick_io_locked();
  }
  if (io_thread_.joinable()) {
    // Let queued writes go out, then close the stream so the read loop ends.
    asio::post(io_, [this] {
      {
        std::lock_guard<std::mutex> lock(mu_);
        check_timer_->cancel();
        timer_->cancel();
      }
      work_.reset();
      bool idle;
      {
        std::lock_guard<std::mutex> lock(mu_);
        idle = writer_.idle();
      }
      if (!idle) {
        auto t = std::make_shared<asio::steady_timer>(io_, std::chrono::milliseconds(200));
        t->async_wait([this, t](asio::error_code) {
          if (stream_) stream_->close();
        });
      } else {
        if (stream_) stream_->close();
      }
    });
    io_thread_.join();
  }
  fail_all(unavailable("connection to " + url_.str() + " was closed"));
}

namespace {
// A Pending's promise for its kind, made in place.
template <class Variant>
Variant promise_of(int kind) {
  switch (kind) {
    case 1: return Variant(std::in_place_index<1>);
    case 2: return Variant(std::in_place_index<2>);
    case 3: return Variant(std::in_place_index<3>);
    case 4: return Variant(std::in_place_index<4>);
    case 5: return Variant(std::in_place_index<5>);
    default: return Variant(std::in_place_index<0>);
  }
}
}  // namespace

Connection::Pending::Pending(Kind k, bool direct)
    : kind(k), promise(promise_of<decltype(promise)>(direct ? kCapability + 1 : static_cast<int>(k))) {
  static_assert(std::variant_size_v<decltype(promise)> == kCapability + 2);
}
void Connection::Pending::reset(Kind k, bool direct) {
  kind = k;
  slot.reset();
  lease.reset();
  promise = promise_of<decltype(promise)>(direct ? kCapability + 1 : static_cast<int>(k));
  data_out = nullptr;
  status_out = nullptr;
  done = nullptr;
}

void Connection::Pending::deliver_status(const Status& st) {
  switch (kind) {
    case kRead: deliver_data(st); return;
    case kSync:
      if (status_out) {
        *status_out = st;
      } else {
        status().set_value(st);
      }
      break;
    case kStats: stats().set_value(st); break;
    case kGraph: graph().set_value(st); break;
    case kCapability: exported().set_value(st); break;
  }
  mark_done();
}

void Connection::Pending::mark_done() {
  if (done) done->store(true, std::memory_order_release);
}

void Connection::Pending::deliver_data(Result<TensorData> data) {
  if (data_out) {
    *data_out = std::move(data);
  } else {
    this->data().set_value(std::move(data));
  }
  mark_done();
}

uint64_t Connection::add_pending_locked(Pending::Kind kind, Pending** out, std::atomic<bool>* done,
                                        bool direct) {
  uint64_t id = next_request_++;
  Pending* p;
  if (spare_pending_) {
    spare_pending_.key() = id;
    p = spare_pending_.mapped().get();
    p->reset(kind, direct);
    pending_.insert(std::move(spare_pending_));
  } else {
    auto made = std::make_unique<Pending>(kind, direct);
    p = made.get();
    pending_.emplace(id, std::move(made));
  }
  p->done = done;
  *out = p;
  // Every request with a reply is flushed at once: when the reply is in, the server has run
  // everything sent before it and is idle, so the next batches start small again.
  restart_batches_locked();
  return id;
}

Status Connection::ready_locked() {
  if (state_ == State::kConnected) return Status::OK();
  if (state_ == State::kDead) return dead_;
  return connect_locked();
}

Status Connection::submit_op(const ir::Op& op) {
  if (const auto* up = std::get_if<ir::FromHost>(&op); up && up->data.data.size() >= kShmMinBytes) {
    if (std::shared_ptr<ShmSlot> slot = staged_slot(up->data.data)) {
      return submit_from_segment(*up, *slot);
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  TW_RETURN_NOT_OK(ready_locked());
  if (!drops_.empty()) queue_drops_locked();
  uint64_t before = batch_.payload_size();
  batch_.add_op(op);
  if (batch_.payload_size() > frame_limit_) {
    // The op does not fit beside the tasks already queued: send those first. An op too large
    // for any frame (an upload past the server's --max-frame) is refused here, before the
    // server would have to drop the session for it.
    uint64_t alone = proto::BatchWriter::kEmptyBytes + batch_.payload_size() - before;
    batch_.remove_last();
    if (alone > frame_limit_) {
      return resource_exhausted(ir::op_name(op) + ": the op takes " + std::to_string(alone) +
                                " bytes on the wire, over the limit of " + std::to_string(frame_limit_) +
                                " bytes per frame of the server at " + url_.str() +
                                " (tensorwire-server --max-frame); send the data in smaller pieces "
                                "and cat them there, or raise the server's limit");
    }
    send_batch_locked();
    batch_.add_op(op);
  }
  added_op_locked();
  return Status::OK();
}

void Connection::added_op_locked() {
  ++counters_.ops;
  ++batch_ops_;
  if (batch_ops_ >= batch_limit_ || batch_.payload_size() >= options_.batch_bytes) {
    flush_locked();
    batch_limit_ = std::min(2 * batch_limit_, options_.batch_ops);
  } else {
    arm_idle_timer_locked();
  }
}

Status Connection::run_graph(ir::GraphId graph, std::vector<ir::TensorId> inputs,
                             std::vector<ir::TensorId> outputs) {
  std::lock_guard<std::mutex> lock(mu_);
  TW_RETURN_NOT_OK(ready_locked());
  if (!drops_.empty()) queue_drops_locked();
  const uint64_t bytes =
      1 + 8 + 2 * batch_.id_bytes_max() + batch_.id_bytes_max() * (inputs.size() + outputs.size());
  if (proto::BatchWriter::kEmptyBytes + bytes > frame_limit_) {
    return resource_exhausted("run_graph: " + std::to_string(inputs.size()) + " inputs and " +
                              std::to_string(outputs.size()) + " outputs take " +
                              std::to_string(bytes) + " bytes, over the limit of " +
                              std::to_string(frame_limit_) + " bytes per frame of the server at " +
                              url_.str() + " (tensorwire-server --max-frame)");
  }
  make_room_locked(bytes);
  batch_.add_run_graph(graph, inputs, outputs);
  added_op_locked();
  return Status::OK();
}

Result<ir::GraphId> Connection::register_graph(const ir::Graph& graph) {
  std::future<Result<ir::GraphId>> fut;
  std::atomic<bool> done{false};
  {
    std::lock_guard<std::mutex> lock(mu_);
    TW_RETURN_NOT_OK(ready_locked());
    // Alone in its frame: whatever is queued goes first, and the graph must fit one frame.
    flush_locked();
    Pending* p = nullptr;
    uint64_t req = add_pending_locked(Pending::kGraph, &p, &done);
    fut = p->graph().get_future();
    batch_.add_register_graph(req, graph);
    if (batch_.payload_size() > frame_limit_) {
      const uint64_t size = batch_.payload_size();
      batch_.remove_last();
      pending_.erase(req);
      return resource_exhausted(
          "register_graph: the graph of " + std::to_string(graph.ops.size()) + " ops takes " +
          std::to_string(size) + " bytes on the wire, over the limit of " +
          std::to_string(frame_limit_) + " bytes per frame of the server at " + url_.str() +
          " (tensorwire-server --max-frame)");
    }
    ++counters_.round_trips;
    flush_locked();
  }
  wait(fut, &done);
  Result<ir::GraphId> id = fut.get();
  if (!id.ok()) return id.status().with_context("register_graph on " + url_.str());
  return id;
}

Result<proto::Exported> Connection::export_tensor(ir::TensorId id) {
  std::future<Result<proto::Exported>> fut;
  std::atomic<bool> done{false};
  {
    std::lock_guard<std::mutex> lock(mu_);
    TW_RETURN_NOT_OK(ready_locked());
    Pending* p = nullptr;
    uint64_t req = add_pending_locked(Pending::kCapability, &p, &done);
    fut = p->exported().get_future();
    make_room_locked(1 + 8 + 8);
    batch_.add_export(req, id);
    ++counters_.round_trips;
    flush_locked();
  }
  wait(fut, &done);
  Result<proto::Exported> r = fut.get();
  if (!r.ok()) return r.status().with_context("export from " + url_.str());
  return r;
}

Status Connection::move_in(proto::TaskKind kind, ir::TensorId id, const TensorMeta& meta,
                           const proto::TensorSource& source) {
  std::lock_guard<std::mutex> lock(mu_);
  TW_RETURN_NOT_OK(ready_locked());
  if (!drops_.empty()) queue_drops_locked();
  // Kind, ids, meta, the strings with their lengths: within a few hundred bytes.
  const uint64_t bytes = 1 + 8 + 1 + 4 + 8 * meta.shape.size() + 8 + 8 + 3 * 4 +
                         source.capability.size() + source.url.size() + source.fingerprint.size();
  if (proto::BatchWriter::kEmptyBytes + bytes > frame_limit_) {
    return resource_exhausted("move: the task takes " + std::to_string(bytes) +
                              " bytes, over the frame limit of the server at " + url_.str());
  }
  make_room_locked(bytes);
  batch_.add_move(kind, id, meta, source);
  added_op_locked();
  return Status::OK();
}

Status Connection::submit_collective(const proto::CollectiveSpec& c) {
  std::lock_guard<std::mutex> lock(mu_);
  TW_RETURN_NOT_OK(ready_locked());
  if (welcome_.version < 3) {
    return unimplemented("collectives need protocol 3; the server at " + url_.str() +
                         " speaks " + std::to_string(welcome_.version));
  }
  if (!drops_.empty()) queue_drops_locked();
  // Kind, fixed fields, the strings with their lengths, the meta: within a few hundred bytes.
  const uint64_t bytes = 1 + 3 + 12 + 3 * 4 + c.group.size() + c.store_url.size() +
                         c.fingerprint.size() + 4 + 16 + 1 + 4 + 8 * c.out_meta.shape.size();
  if (proto::BatchWriter::kEmptyBytes + bytes > frame_limit_) {
    return resource_exhausted("collective: the task takes " + std::to_string(bytes) +
                              " bytes, over the frame limit of the server at " + url_.str());
  }
  make_room_locked(bytes);
  batch_.add_collective(c);
  added_op_locked();
  return Status::OK();
}

void Connection::drop(ir::TensorId id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ != State::kConnected) return;  // nothing held on a server we are not connected to
  drops_.push_back(id);
  if (drops_.size() >= options_.batch_ops) flush_locked();
  else arm_idle_timer_locked();
}

std::future<Result<TensorData>> Connection::read(ir::TensorId id) { return read_impl(id, nullptr); }

std::future<Result<TensorData>> Connection::read(ir::TensorId id, uint64_t expect_bytes) {
  return read_impl(id, nullptr, expect_bytes);
}

Result<TensorData> Connection::read_wait(ir::TensorId id, uint64_t expect_bytes) {
  std::atomic<bool> done{false};
  std::optional<Result<TensorData>> out;
  (void)read_impl(id, &done, expect_bytes, &out);
  wait_until([&] { return done.load(std::memory_order_acquire); });
  return std::move(*out);
}

std::future<Result<TensorData>> Connection::read_impl(ir::TensorId id, std::atomic<bool>* done,
                                                      uint64_t expect_bytes,
                                                      std::optional<Result<TensorData>>* out) {
  std::shared_ptr<const void> lease;
  std::shared_ptr<ShmSlot> slot;
  if (expect_bytes >= kShmMinBytes && expect_bytes <= SIZE_MAX) {
    slot = claim_segment(static_cast<size_t>(expect_bytes), &lease);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ != State::kConnected) {
    Status st = state_ == State::kDead ? dead_ : connect_locked();
    if (!st.ok()) {  // answered here, as a reply would be
      Pending failed(Pending::kRead, out != nullptr);
      failed.data_out = out;
      failed.done = done;
      std::future<Result<TensorData>> fut;
      if (!out) fut = failed.data().get_future();
      failed.deliver_data(st);
      return fut;
    }
  }
  Pending* p = nullptr;
  uint64_t req = add_pending_locked(Pending::kRead, &p, done, out != nullptr);
  std::future<Result<TensorData>> fut;
  if (out) {
    p->data_out = out;
  } else {
    fut = p->data().get_future();
  }
  if (slot) {
    // The server writes the tensor into the segment when it fits the room, else answers inline.
    make_room_locked(1 + 5 * 8);
    batch_.add_read_to_segment(req, id, {slot->id, 0, slot->seg->capacity(), 0});
    p->slot = std::move(slot);
    p->lease = std::move(lease);
  } else {
    make_room_locked(1 + 8 + 8);
    batch_.add_read(req, id);
  }
  ++counters_.round_trips;
  flush_locked();
  return fut;
}

Status Connection::sync() {
  Status st;
  std::atomic<bool> done{false};
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ == State::kDead) return dead_;
    if (state_ == State::kIdle) return Status::OK();  // nothing was ever sent
    Pending* p = nullptr;
    uint64_t req = add_pending_locked(Pending::kSync, &p, &done, /*direct=*/true);
    p->status_out = &st;
    make_room_locked(1 + 8);
    batch_.add_sync(req);
    ++counters_.round_trips;
    flush_locked();
  }
  wait_until([&] { return done.load(std::memory_order_acquire); });
  if (!st.ok()) return st;
  std::lock_guard<std::mutex> lock(mu_);
  if (!session_errors_.empty()) {
    Status first = session_errors_.front();
    session_errors_.clear();
    return first.with_context("server " + url_.str() + " reported");
  }
  return Status::OK();
}

Result<proto::ServerStats> Connection::stats() {
  std::future<Result<proto::ServerStats>> fut;
  std::atomic<bool> done{false};
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ != State::kConnected) {
      if (state_ == State::kDead) return dead_;
      TW_RETURN_NOT_OK(connect_locked());
    }
    Pending* p = nullptr;
    uint64_t req = add_pending_locked(Pending::kStats, &p, &done);
    fut = p->stats().get_future();
    make_room_locked(1 + 8);
    batch_.add_stats(req);
    ++counters_.round_trips;
    flush_locked();
  }
  wait(fut, &done);
  return fut.get();
}

Result<TensorData> Connection::read_wait(ir::TensorId id) { return read_wait(id, 0); }

Result<TensorData> Connection::wait_read(std::future<Result<TensorData>>& fut) {
  wait(fut);
  return fut.get();
}

void Connection::flush() {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ == State::kConnected) flush_locked();
}

// ---- shared memory (protocol 5) ----

bool Connection::shm_enabled() {
  if (!options_.shm || url_.scheme != net::Url::Scheme::kUnix) return false;
  if (!ensure_connected().ok()) return false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (welcome_.version < 5 || !stream_->passes_fds()) return false;
  }
  std::lock_guard<std::mutex> shm(shm_mu_);
  return shm_refused_.ok();
}

std::shared_ptr<Connection::ShmSlot> Connection::claim_segment(size_t n,
                                                               std::shared_ptr<const void>* lease) {
  if (!shm_enabled()) return nullptr;
  std::lock_guard<std::mutex> shm(shm_mu_);
  if (!shm_refused_.ok()) return nullptr;
  // The smallest idle segment that holds n; failing that, a new one while the pool has room,
  // or the smallest idle one replaced by a larger one.
  std::shared_ptr<ShmSlot> slot, spare;
  for (const auto& s : shm_slots_) {
    if (!s->idle()) continue;
    if (s->seg->capacity() >= n && (!slot || s->seg->capacity() < slot->seg->capacity())) slot = s;
    if (!spare || s->seg->capacity() < spare->seg->capacity()) spare = s;
  }
  if (!slot) {
    if (shm_slots_.size() >= kMaxSegments && !spare) return nullptr;  // all busy: the socket
    // Powers of two, so that a transfer slightly larger than the last still finds its segment.
    auto made = net::SharedSegment::create(std::bit_ceil(std::max(n, kShmMinBytes)));
    Status st = made.ok() ? Status::OK() : made.status();
    const uint64_t id = shm_slots_.size() < kMaxSegments ? next_segment_ : spare->id;
    if (st.ok()) st = attach_segment(id, *made);
    if (!st.ok()) {
      // The server may have dropped the id being replaced: that slot is not used again.
      if (shm_slots_.size() >= kMaxSegments) std::erase(shm_slots_, spare);
      // Over a limit (the segments' allowance, --max-memory): this transfer takes the socket,
      // a later one may fit. Anything else (no memfd here, a server that refuses descriptors):
      // the socket from now on.
      if (st.code() != StatusCode::kResourceExhausted) shm_refused_ = st;
      return nullptr;
    }
    if (shm_slots_.size() < kMaxSegments) {
      slot = std::make_shared<ShmSlot>();
      slot->id = next_segment_++;
      shm_slots_.push_back(slot);
    } else {
      slot = spare;  // the server replaced the segment of that id
      slot->sent.store(0);
    }
    slot->seg = std::move(made).value();
  }
  slot->busy.store(true, std::memory_order_release);
  // The hold: released when its last copy goes (the result's Buffer, host_copy's Buffer).
  *lease = std::shared_ptr<const void>(slot->seg->data(), [slot, seg = slot->seg](const void*) {
    slot->busy.store(false, std::memory_order_release);
  });
  return slot;
}

Status Connection::attach_segment(uint64_t slot_id,
                                  const std::shared_ptr<net::SharedSegment>& seg) {
  std::future<Status> fut;
  std::atomic<bool> done{false};
  {
    std::lock_guard<std::mutex> lock(mu_);
    TW_RETURN_NOT_OK(ready_locked());
    flush_locked();  // (no queued task names a segment being replaced: only idle ones are)
    Pending* p = nullptr;
    uint64_t req = add_pending_locked(Pending::kSync, &p, &done);
    fut = p->status().get_future();
    proto::OutFrame f;
    proto::encode_attach_segment({req, slot_id, seg->capacity()}, f);
    // The descriptor travels with the next bytes written: this frame's, or those of a frame
    // still being written before it; either way it is held on the server when the frame is read.
    if (!stream_->queue_fd(seg->fd())) {
      pending_.erase(req);
      return unavailable("cannot pass a shared-memory segment to " + url_.str());
    }
    ++counters_.frames_out;
    ++counters_.round_trips;
    counters_.bytes_out += f.payload_size() + 4;
    writer_.push(std::move(f));
    if (!writer_.writing()) pump_locked();
  }
  wait(fut, &done);
  return fut.get();
}

Buffer Connection::host_copy(const void* data, size_t n) {
  std::shared_ptr<const void> lease;
  std::shared_ptr<ShmSlot> slot = n >= kShmMinBytes ? claim_segment(n, &lease) : nullptr;
  if (!slot) return Buffer::copy_of(data, n);
  net::parallel_copy(slot->seg->data(), data, n);
  return Buffer::wrap(slot->seg->data(), n, std::move(lease));
}

std::shared_ptr<Connection::ShmSlot> Connection::staged_slot(const Buffer& b) {
  std::lock_guard<std::mutex> shm(shm_mu_);
  for (const auto& s : shm_slots_) {
    if (s->seg->data() == b.data() && s->busy.load(std::memory_order_acquire)) return s;
  }
  return nullptr;
}

Status Connection::submit_from_segment(const ir::FromHost& op, ShmSlot& slot) {
  std::lock_guard<std::mutex> lock(mu_);
  TW_RETURN_NOT_OK(ready_locked());
  if (!drops_.empty()) queue_drops_locked();
  const proto::SegmentRange range{slot.id, 0, op.data.data.size(), slot.sent.load() + 1};
  make_room_locked(1 + 8 + 1 + 4 + 8 * op.shape.size() + 4 * 8);
  batch_.add_from_segment(op.out.id, {op.shape, op.dtype}, range);
  // Not reused until the server has copied these bytes out and says so in `consumed`.
  slot.sent.store(range.sequence);
  added_op_locked();
  return Status::OK();
}

Counters Connection::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  Counters c = counters_;
  c.bytes_in = bytes_in_.load(std::memory_order_relaxed);
  c.frames_in = frames_in_.load(std::memory_order_relaxed);
  return c;
}

void Connection::flush_locked() {
  queue_drops_locked();
  send_batch_locked();
}

void Connection::queue_drops_locked() {
  // Drops go after every op queued so far, so they never overtake the ops that use the tensors,
  // and before the next op, so the server frees the memory where the program let go of it: the
  // ops that follow reuse it while it is still in cache, as on the local device (held to the
  // end of the batch instead, a training step's intermediates all stayed live and the MLP of
  // bench/train_bench.cc ran about 10% slower remote than local). Split into as many tasks (and
  // frames) as the server's frame limit requires.
  // Packed (protocol 4), sorted ids take about a byte each.
  const uint64_t id_bytes = batch_.id_bytes_max(), drop_header = 1 + id_bytes;
  if (batch_.packed_ids()) std::sort(drops_.begin(), drops_.end());
  size_t i = 0;
  while (i < drops_.size()) {
    uint64_t used = batch_.payload_size() + drop_header;
    uint64_t room = used < frame_limit_ ? (frame_limit_ - used) / id_bytes : 0;
    if (room == 0 && !batch_.empty()) {
      send_batch_locked();
      continue;
    }
    size_t n = static_cast<size_t>(std::min<uint64_t>(std::max<uint64_t>(room, 1), drops_.size() - i));
    if (i == 0 && n == drops_.size()) {
      batch_.add_drop(drops_);
    } else {
      batch_.add_drop(std::vector<ir::TensorId>(drops_.begin() + static_cast<ptrdiff_t>(i),
                                                drops_.begin() + static_cast<ptrdiff_t>(i + n)));
    }
    i += n;
  }
  drops_.clear();
}

void Connection::send_batch_locked() {
  if (batch_.empty()) return;
  proto::OutFrame f = batch_.take();
  batch_ops_ = 0;
  ++counters_.frames_out;
  counters_.bytes_out += f.payload_size() + 4;
  writer_.push(std::move(f));
  if (!writer_.writing()) pump_locked();
}

void Connection::pump_locked() {
  switch (writer_.pump(*stream_)) {
    case net::FrameWriter::Step::kIdle: return;
    case net::FrameWriter::Step::kAsync:
      writer_.set_writing(true);
      kick_io_locked();  // the write's completions need the reactor
      stream_->async_write(writer_.pending(), [this](const asio::error_code& ec, size_t) {
        std::unique_lock<std::mutex> lock(mu_);
        if (!ec) {
          writer_.async_done();
          return pump_locked();
        }
        lock.unlock();
        fail_all(send_failed(ec));
        stream_->close();
      });
      return;
    case net::FrameWriter::Step::kError: {
      // fail_all takes the lock this caller holds: finish on the I/O thread.
      Status why = send_failed(writer_.error());
      kick_io_locked();
      asio::post(io_, [this, why] {
        fail_all(why);
        stream_->close();
      });
      return;
    }
  }
}

void Connection::make_room_locked(uint64_t bytes) {
  if (!batch_.empty() && batch_.payload_size() + bytes > frame_limit_) send_batch_locked();
}

// The timers are set from callers' threads as well as the I/O thread; every use of them holds
// mu_, which serialises them (Asio's own timer queue has its lock). Setting one from here costs
// a timerfd update, not a wake-up of the I/O thread.
void Connection::arm_idle_timer_locked() {
  if (timer_armed_) return;
  timer_armed_ = true;
  idle_deadline_ = std::chrono::steady_clock::now() + std::chrono::microseconds(options_.idle_flush_us);
  if (io_parked_) park_cv_.notify_one();  // it waits until the deadline at most
  timer_->expires_after(std::chrono::microseconds(options_.idle_flush_us));
  timer_->async_wait([this](asio::error_code) {
    std::lock_guard<std::mutex> lock(mu_);
    timer_armed_ = false;
    if (state_ == State::kConnected) flush_locked();
  });
}

void Connection::fail_all(const Status& why) {
  std::unordered_map<uint64_t, std::unique_ptr<Pending>> pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ != State::kDead) {
      state_ = State::kDead;
      dead_ = why;
    }
    pending.swap(pending_);
    kick_io_locked();
  }
  for (auto& [id, p] : pending) p->deliver_status(dead_);
  std::lock_guard<std::mutex> lock(mu_);
  reader_cv_.notify_all();
}

// ---- io thread ----
// Reading. The stream is read by one thread at a time, the reader: either the I/O thread, woken
// by its watch on the stream, or a caller that waits for a reply and reads it itself. The second
// saves a thread wake-up per round trip (about a third of a small request's latency on loopback),
// so while callers keep waiting for replies the I/O thread leaves the stream to them and looks
// in once a millisecond; when they go quiet it watches the stream again (for errors the server
// sends unasked, and for the connection going away). It looks in from park_locked(), a wait on
// a condition variable, not from the reactor: the stream stays registered in the reactor's
// epoll (edge-triggered), which woke the thread for every reply a caller was reading itself,
// half a context switch per round trip onto the server's core (perf: 52,000 voluntary switches
// in 100,000 round trips).
constexpr auto kCallerReadWindow = std::chrono::milliseconds(1);

Status Connection::read_available(bool* closed, const std::function<bool()>& done) {
  *closed = false;
  while (!done()) {
    Buffer frame;
    asio::error_code err;
    uint64_t bytes = 0;
    net::FrameReader::Poll r = reader_.read_frame(*stream_, &frame, &err, &bytes);
    if (bytes) count_in(bytes, 0);
    switch (r) {
      case net::FrameReader::Poll::kFrame: {
        count_in(0, 1);
        on_message(frame);
        break;
      }
      case net::FrameReader::Poll::kWouldBlock: return Status::OK();
      case net::FrameReader::Poll::kClosed:
        *closed = true;
        return connection_lost(asio::error::eof);
      case net::FrameReader::Poll::kError:
        *closed = true;
        return connection_lost(err);
      case net::FrameReader::Poll::kTooLarge: break;  // every u32 length is within the limit
    }
  }
  return Status::OK();
}

// The watch is a read into the reader's staging space, not an edge-triggered wait: the stream
// tries a read before it waits (net/stream.h), so bytes that arrived while a caller was the
// reader are never missed.
void Connection::arm_watch_locked() {
  if (watch_armed_ || reader_busy_ || state_ != State::kConnected) return;
  watch_armed_ = true;
  if (reader_.has_frame()) {
    // A caller stopped reading once it had its reply: handle what it left first.
    asio::post(io_, [this] { on_readable({}, 0); });
    return;
  }
  stream_->async_read_some(reader_.space(), [this](const asio::error_code& ec, size_t n) { on_readable(ec, n); });
}

void Connection::on_readable(const asio::error_code& ec, size_t n) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    watch_armed_ = false;
    if (ec == asio::error::operation_aborted || state_ != State::kConnected) return;  // closing
    reader_busy_ = true;  // (no caller reads while the watch is armed)
    count_in(n, 0);
  }
  reader_.received(n);
  bool closed = false;
  Status st;
  if (ec) {
    closed = true;
    st = connection_lost(ec);
  } else {
    st = read_available(&closed, [] { return false; });
  }
  if (closed) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      reader_busy_ = false;
    }
    fail_all(st);
    std::lock_guard<std::mutex> lock(mu_);
    timer_->cancel();
    check_timer_->cancel();
    return;
  }
  std::unique_lock<std::mutex> lock(mu_);
  reader_busy_ = false;
  if (std::chrono::steady_clock::now() - last_caller_wait_ < kCallerReadWindow) {
    // Callers are waiting for replies: leave the stream to them.
    reader_cv_.notify_all();
    park_locked(lock);
  } else {
    arm_watch_locked();
  }
}

void Connection::start_check_timer_locked() {
  if (check_timer_running_) return;
  check_timer_running_ = true;
  check_timer_->expires_after(kCallerReadWindow);
  check_timer_->async_wait([this](asio::error_code ec) {
    std::unique_lock<std::mutex> lock(mu_);
    check_timer_running_ = false;
    if (ec || state_ != State::kConnected || watch_armed_) return;
    park_locked(lock);
  });
}

void Connection::park_locked(std::unique_lock<std::mutex>& lock) {
  using Clock = std::chrono::steady_clock;
  if (io_parked_ || watch_armed_ || closing_ || state_ != State::kConnected) return;
  io_parked_ = true;
  io_kick_ = false;
  bool watch = false;
  for (;;) {
    if (io_kick_ || closing_ || state_ != State::kConnected || writer_.writing()) break;
    const auto now = Clock::now();
    if (timer_armed_ && now >= idle_deadline_) break;  // the reactor runs the idle flush
    if (!reader_busy_ && now - last_caller_wait_ >= kCallerReadWindow) {
      watch = true;
      break;
    }
    auto until = (reader_busy_ ? now : last_caller_wait_) + kCallerReadWindow;
    if (timer_armed_) until = std::min(until, idle_deadline_);
    park_cv_.wait_until(lock, until);
  }
  io_parked_ = false;
  io_kick_ = false;
  if (closing_ || state_ != State::kConnected) return;
  if (watch) {
    arm_watch_locked();
  } else {
    start_check_timer_locked();  // back here once the reactor's work is done
  }
}

void Connection::request_park_locked() {
  if (io_parked_ || park_posted_ || watch_armed_ || closing_ || writer_.writing() ||
      state_ != State::kConnected) {
    return;
  }
  park_posted_ = true;
  asio::post(io_, [this] {
    std::unique_lock<std::mutex> lock(mu_);
    park_posted_ = false;
    park_locked(lock);
  });
}

void Connection::kick_io_locked() {
  if (!io_parked_) return;
  io_kick_ = true;
  park_cv_.notify_one();
}

template <typename T>
void Connection::wait(std::future<T>& fut, const std::atomic<bool>* done) {
  wait_until([&] {
    if (done) return done->load(std::memory_order_acquire);
    return fut.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  });
}

void Connection::wait_until(const std::function<bool()>& ready) {
  std::unique_lock<std::mutex> lock(mu_);
  if (ready()) return;
  const auto wait_start = std::chrono::steady_clock::now();
  while (!ready()) {
    last_caller_wait_ = std::chrono::steady_clock::now();
    if (state_ != State::kConnected || reader_busy_ || watch_armed_) {
      // Someone else reads (or the connection is gone and fail_all fulfils every promise).
      // Counted first, then the reply looked for once more: on_message() notifies only when
      // it sees a waiter after handing a reply over, so one of the two sees the other.
      reader_waiters_.fetch_add(1);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      if (!ready()) reader_cv_.wait(lock);
      reader_waiters_.fetch_sub(1);
      continue;
    }
    reader_busy_ = true;
    // No spin after two waits in a row that outlasted it: replies that take that long (a graph's
    // training step, a large kernel) are not caught by it, and on a machine the server shares
    // it takes a core from the server's kernels (a remote CNN step 0.95-0.96 of local eager
    // without the spin, 1.02-1.08 with it). Every kProbeEvery-th wait spins anyway, and a wait
    // within the spin turns it back on (a sleeping caller's own wake-up may outlast the spin).
    const bool skip = long_waits_ >= kLongWaitsBeforeNoSpin && ++skipped_spins_ % kProbeEvery != 0;
    const uint32_t spin_us = skip ? 0 : options_.spin_us;
    ++counters_.reading_waits;
    if (spin_us > 0) ++counters_.spun_waits;
    lock.unlock();
    bool closed = false;
    Status st;
    const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us);
    while (!ready()) {
      // Wait first (the reply to what was just sent cannot be here yet), unless an earlier
      // reader left frames behind or the spin (Options::spin_us) has time left: then the read
      // below polls the stream instead.
      if (!reader_.has_frame() &&
          (spin_us == 0 || std::chrono::steady_clock::now() >= spin_until)) {
        stream_->wait_readable();
      }
      st = read_available(&closed, ready);
      if (closed) break;
    }
    lock.lock();
    reader_busy_ = false;
    reader_cv_.notify_all();  // another waiter may take over reading
    if (closed) {
      lock.unlock();
      fail_all(st);
      lock.lock();
    } else {
      // The I/O thread waits aside while callers read, and arms the watch once they go quiet.
      request_park_locked();
    }
  }
  const auto waited = std::chrono::steady_clock::now() - wait_start;
  counters_.wait_ns += static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(waited).count());
  if (waited > std::chrono::microseconds(options_.spin_us)) {
    long_waits_ = std::min<uint32_t>(long_waits_ + 1, kLongWaitsBeforeNoSpin);
  } else {
    long_waits_ = 0;
  }
}

// As connection_lost, for a write that failed (the server closed or reset the connection).
Status Connection::send_failed(const asio::error_code& ec) const {
  return unavailable("the server at " + url_.str() + " closed the connection while this client was sending (" +
                     ec.message() + "); tensors on it are lost");
}

// The status every pending and later call gets once the server has gone. A server that drops
// a session says why first (a frame over its limit, say): that reason is kept.
Status Connection::connection_lost(const asio::error_code& ec) {
  std::string why = "the server at " + url_.str() + " closed the connection (" + ec.message() + ")";
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!session_errors_.empty()) why += " after reporting: " + session_errors_.back().message();
  }
  return unavailable(why + "; tensors on it are lost");
}

void Connection::on_message(const Buffer& payload) {
  // Decoded into the one message kept for it: a single reader at a time calls this. Whatever
  // bytes the reply carried and nobody took (an unknown id, a failure) are let go on the way
  // out, not held until the next reply (they may be a large result or a segment's lease).
  proto::ServerMessage& m = reply_;
  struct LetGo {
    proto::ServerMessage& m;
    ~LetGo() { m.data.bytes = Buffer(); }
  } let_go{m};
  if (Status st = proto::decode_server_message(payload, m); !st.ok()) {
    fail_all(st.with_context("malformed message from " + url_.str()));
    stream_->shutdown();  // safe from a reading caller's thread
    return;
  }
  if (m.kind == proto::ServerMsg::kSessionError) {
    // Not tied to a request; surfaced by the next sync().
    std::lock_guard<std::mutex> lock(mu_);
    session_errors_.push_back(m.status);
    return;
  }
  PendingMap::node_type node;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (reader_spare_ && !spare_pending_) spare_pending_ = std::move(reader_spare_);
    auto it = pending_.find(m.request_id);
    if (it == pending_.end()) return;  // unknown id: a reply to a request already failed
    node = pending_.extract(it);
  }
  Pending* const p = node.mapped().get();
  if (m.kind == proto::ServerMsg::kReadResultInSegment) {
    // The bytes are in the segment the read offered; the result holds it until dropped.
    if (p->slot && m.in_segment_bytes <= p->slot->seg->capacity()) {
      m.data.bytes =
          Buffer::wrap(p->slot->seg->data(), static_cast<size_t>(m.in_segment_bytes), p->lease);
    } else {
      m.status = data_loss("a read result in a segment from " + url_.str() +
                            " answers a request that offered none, or overflows it");
    }
  }
  if (!m.status.ok()) {
    p->deliver_status(m.status);
  } else {
    switch (p->kind) {
      case Pending::kRead: p->deliver_data(std::move(m.data)); break;
      case Pending::kSync: p->deliver_status(m.status); break;
      case Pending::kStats:
        p->stats().set_value(std::move(m.stats));
        p->mark_done();
        break;
      case Pending::kGraph:
        p->graph().set_value(m.graph_id);
        p->mark_done();
        break;
      case Pending::kCapability:
        p->exported().set_value(std::move(m.exported));
        p->mark_done();
        break;
    }
  }
  p->reset(Pending::kRead, /*direct=*/true);  // its segment and promise go now
  reader_spare_ = std::move(node);
  // A caller waiting for another thread to read (wait_until) is woken; the usual reader is the
  // caller itself, and then there is nobody to wake and no lock to take.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (reader_waiters_.load() == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  reader_cv_.notify_all();
}

}  // namespace tw::client
