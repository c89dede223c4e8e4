#include "client/connection.h"

#include <netinet/in.h>
#include <netinet/tcp.h>

#include <algorithm>
#include <cstdlib>

#include "net/framing.h"

namespace tw::client {

namespace proto = protocol;
using Proto = asio::generic::stream_protocol;

Options Options::from_env() {
  Options o;
  if (const char* e = std::getenv("TW_BATCH_OPS")) o.batch_ops = static_cast<uint32_t>(std::max(1L, std::atol(e)));
  if (const char* e = std::getenv("TW_BATCH_BYTES")) o.batch_bytes = std::max(1024ULL, std::strtoull(e, nullptr, 10));
  if (const char* e = std::getenv("TW_FLUSH_IDLE_US")) o.idle_flush_us = static_cast<uint32_t>(std::max(0L, std::atol(e)));
  if (const char* e = std::getenv("TW_CREDENTIAL")) o.credential = e;
  return o;
}

namespace {

// Blocking connect + handshake on a socket not yet driven by an io thread.
Result<proto::Welcome> handshake(asio::io_context& io, Proto::socket& sock, const net::Url& url,
                                 uint32_t device_index, const std::string& credential) {
  asio::error_code ec;
  if (url.scheme == net::Url::Scheme::kTcp) {
    asio::ip::tcp::resolver resolver(io);
    auto results = resolver.resolve(url.host, std::to_string(url.port), ec);
    if (ec) return unavailable("cannot resolve " + url.str() + ": " + ec.message());
    for (const auto& r : results) {
      asio::ip::tcp::endpoint ep = r.endpoint();
      Proto::endpoint gep(ep.data(), ep.size());
      sock.close(ec);
      sock.open(gep.protocol(), ec);
      if (ec) continue;
      sock.connect(gep, ec);
      if (!ec) break;
    }
    if (ec) return unavailable("cannot connect to " + url.str() + ": " + ec.message() + " (is tensorwire-server running there?)");
    int one = 1;
    ::setsockopt(sock.native_handle(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  } else {
    Proto::endpoint gep{asio::local::stream_protocol::endpoint(url.path)};
    sock.open(gep.protocol(), ec);
    if (!ec) sock.connect(gep, ec);
    if (ec) return unavailable("cannot connect to " + url.str() + ": " + ec.message() + " (is tensorwire-server running there?)");
  }
  proto::OutFrame hello;
  proto::encode_hello({proto::kMinProtocolVersion, proto::kProtocolVersion, device_index, credential}, hello);
  uint8_t header[4];
  std::vector<asio::const_buffer> bufs;
  net::frame_buffers(hello, header, bufs);
  asio::write(sock, bufs, ec);
  if (ec) return unavailable("handshake with " + url.str() + " failed: " + ec.message());
  asio::read(sock, asio::buffer(header, 4), ec);
  if (ec) return unavailable("handshake with " + url.str() + " failed: the server closed the connection (" + ec.message() + "); is it a tensorwire server?");
  uint32_t len = net::frame_length(header);
  if (len == 0 || len > (16u << 20)) return data_loss("handshake with " + url.str() + ": bad reply frame of " + std::to_string(len) + " bytes; is it a tensorwire server?");
  Buffer payload = Buffer::allocate(len);
  asio::read(sock, asio::buffer(payload.data(), len), ec);
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
  Proto::socket sock(io);
  return handshake(io, sock, url, proto::kEnumerateOnly, options.credential);
}

Connection::Connection(net::Url url, uint32_t device_index, Options options)
    : url_(std::move(url)), device_index_(device_index), options_(std::move(options)) {}

Connection::~Connection() { close(); }

Status Connection::dead_status_locked() const { return dead_; }

Status Connection::ensure_connected() {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ == State::kConnected) return Status::OK();
  if (state_ == State::kDead) return dead_;
  return connect_locked();
}

Status Connection::connect_locked() {
  sock_.emplace(io_);
  auto w = handshake(io_, *sock_, url_, device_index_, options_.credential);
  if (!w.ok()) {
    state_ = State::kDead;
    dead_ = w.status();
    return dead_;
  }
  welcome_ = std::move(w).value();
  // A server always sends its limit (>= 1024); the floor only guards against a broken peer.
  frame_limit_ = std::clamp<uint64_t>(welcome_.limits.max_frame_bytes, 1024, 0xFFFFFFFFu);
  timer_.emplace(io_);
  read_header();
  try {
    io_thread_ = std::thread([this] { io_.run(); });
  } catch (const std::system_error& e) {
    state_ = State::kDead;
    dead_ = resource_exhausted(std::string("cannot start the client I/O thread: ") + e.what());
    return dead_;
  }
  state_ = State::kConnected;
  return Status::OK();
}

void Connection::close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ == State::kConnected) flush_locked();
  }
  if (io_thread_.joinable()) {
    // Let queued writes go out, then close the socket so the read loop ends.
    asio::post(io_, [this] {
      if (writing_ || !write_q_.empty()) {
        auto t = std::make_shared<asio::steady_timer>(io_, std::chrono::milliseconds(200));
        t->async_wait([this, t](asio::error_code) {
          asio::error_code ec;
          if (sock_) sock_->close(ec);
        });
      } else {
        asio::error_code ec;
        if (sock_) sock_->close(ec);
      }
    });
    io_thread_.join();
  }
  fail_all(unavailable("connection to " + url_.str() + " was closed"));
}

uint64_t Connection::add_pending_locked(Pending::Kind kind, Pending** out) {
  uint64_t id = next_request_++;
  auto p = std::make_unique<Pending>();
  p->kind = kind;
  *out = p.get();
  pending_[id] = std::move(p);
  return id;
}

Status Connection::submit_op(const ir::Op& op) {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ != State::kConnected) {
    if (state_ == State::kDead) return dead_;
    TW_RETURN_NOT_OK(connect_locked());
  }
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
  ++counters_.ops;
  if (batch_.task_count() >= options_.batch_ops || batch_.payload_size() >= options_.batch_bytes) {
    flush_locked();
  } else {
    arm_idle_timer_locked();
  }
  return Status::OK();
}

void Connection::drop(ir::TensorId id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ != State::kConnected) return;  // nothing held on a server we are not connected to
  drops_.push_back(id);
  if (drops_.size() >= options_.batch_ops) flush_locked();
  else arm_idle_timer_locked();
}

std::future<Result<TensorData>> Connection::read(ir::TensorId id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ != State::kConnected) {
    Status st = state_ == State::kDead ? dead_ : connect_locked();
    if (!st.ok()) {
      std::promise<Result<TensorData>> p;
      p.set_value(st);
      return p.get_future();
    }
  }
  Pending* p = nullptr;
  uint64_t req = add_pending_locked(Pending::kRead, &p);
  auto fut = p->data.get_future();
  make_room_locked(1 + 8 + 8);
  batch_.add_read(req, id);
  ++counters_.round_trips;
  flush_locked();
  return fut;
}

Status Connection::sync() {
  std::future<Status> fut;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ == State::kDead) return dead_;
    if (state_ == State::kIdle) return Status::OK();  // nothing was ever sent
    Pending* p = nullptr;
    uint64_t req = add_pending_locked(Pending::kSync, &p);
    fut = p->status.get_future();
    make_room_locked(1 + 8);
    batch_.add_sync(req);
    ++counters_.round_trips;
    flush_locked();
  }
  Status st = fut.get();
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
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ != State::kConnected) {
      if (state_ == State::kDead) return dead_;
      TW_RETURN_NOT_OK(connect_locked());
    }
    Pending* p = nullptr;
    uint64_t req = add_pending_locked(Pending::kStats, &p);
    fut = p->stats.get_future();
    make_room_locked(1 + 8);
    batch_.add_stats(req);
    ++counters_.round_trips;
    flush_locked();
  }
  return fut.get();
}

void Connection::flush() {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ == State::kConnected) flush_locked();
}

Counters Connection::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

void Connection::flush_locked() {
  // Drops go after every op queued so far, so they never overtake the ops that use the tensors;
  // split into as many tasks (and frames) as the server's frame limit requires.
  constexpr uint64_t kDropHeader = 1 + 4;
  size_t i = 0;
  while (i < drops_.size()) {
    uint64_t used = batch_.payload_size() + kDropHeader;
    uint64_t room = used < frame_limit_ ? (frame_limit_ - used) / 8 : 0;
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
  send_batch_locked();
}

void Connection::send_batch_locked() {
  if (batch_.empty()) return;
  proto::OutFrame f = batch_.take();
  ++counters_.frames_out;
  counters_.bytes_out += f.payload_size() + 4;
  asio::post(io_, [this, f = std::move(f)]() mutable { send(std::move(f)); });
}

void Connection::make_room_locked(uint64_t bytes) {
  if (!batch_.empty() && batch_.payload_size() + bytes > frame_limit_) send_batch_locked();
}

void Connection::arm_idle_timer_locked() {
  if (timer_armed_) return;
  timer_armed_ = true;
  asio::post(io_, [this] {
    timer_->expires_after(std::chrono::microseconds(options_.idle_flush_us));
    timer_->async_wait([this](asio::error_code) {
      std::lock_guard<std::mutex> lock(mu_);
      timer_armed_ = false;
      if (state_ == State::kConnected) flush_locked();
    });
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
  }
  for (auto& [id, p] : pending) {
    switch (p->kind) {
      case Pending::kRead: p->data.set_value(dead_); break;
      case Pending::kSync: p->status.set_value(dead_); break;
      case Pending::kStats: p->stats.set_value(dead_); break;
    }
  }
}

// ---- io thread ----
void Connection::send(proto::OutFrame f) {
  write_q_.push_back(std::move(f));
  if (!writing_) do_write();
}

void Connection::do_write() {
  net::frame_buffers(write_q_.front(), out_header_, bufs_);
  writing_ = true;
  asio::async_write(*sock_, bufs_, net::TransferAll(), [this](asio::error_code ec, size_t) {
    writing_ = false;
    write_q_.pop_front();
    if (ec) {
      fail_all(unavailable("lost the connection to " + url_.str() + " while sending: " + ec.message()));
      asio::error_code ignore;
      sock_->close(ignore);
      return;
    }
    if (!write_q_.empty()) do_write();
  });
}

void Connection::read_header() {
  asio::async_read(*sock_, asio::buffer(header_, 4), [this](asio::error_code ec, size_t) {
    if (ec) {
      fail_all(connection_lost(ec));
      timer_->cancel();
      return;
    }
    uint32_t len = net::frame_length(header_);
    Buffer payload = Buffer::allocate(len);
    asio::async_read(*sock_, asio::buffer(payload.data(), len), net::TransferAll(), [this, payload, len](asio::error_code ec2, size_t) {
      if (ec2) {
        fail_all(connection_lost(ec2));
        timer_->cancel();
        return;
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++counters_.frames_in;
        counters_.bytes_in += len + 4;
      }
      on_message(payload);
      read_header();
    });
  });
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
  auto m = proto::decode_server_message(payload);
  if (!m.ok()) {
    fail_all(m.status().with_context("malformed message from " + url_.str()));
    asio::error_code ec;
    sock_->close(ec);
    return;
  }
  if (m->kind == proto::ServerMsg::kSessionError) {
    // Not tied to a request; surfaced by the next sync().
    std::lock_guard<std::mutex> lock(mu_);
    session_errors_.push_back(m->status);
    return;
  }
  std::unique_ptr<Pending> p;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pending_.find(m->request_id);
    if (it == pending_.end()) return;  // unknown id: a reply to a request already failed
    p = std::move(it->second);
    pending_.erase(it);
  }
  switch (p->kind) {
    case Pending::kRead:
      if (m->status.ok()) {
        p->data.set_value(std::move(m->data));
      } else {
        p->data.set_value(m->status);
      }
      break;
    case Pending::kSync: p->status.set_value(m->status); break;
    case Pending::kStats: p->stats.set_value(std::move(m->stats)); break;
  }
}

}  // namespace tw::client
