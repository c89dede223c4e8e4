// The connection's life: options, the handshake, connecting (and the I/O thread), closing.
#include "client/connection.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>

#include "client/profile.h"
#include "core/env.h"
#include "net/framing.h"
#include "net/tls_stream.h"

namespace tw::client {

namespace proto = protocol;

Options Options::from_env() {
  Options o;
  // (core/env.h declares each variable; a malformed number is reported and ignored.)
  auto u32 = [](uint64_t n, uint64_t lo, uint64_t hi) {
    return static_cast<uint32_t>(std::clamp(n, lo, hi));
  };
  if (auto n = env_number(Env::kBATCH_OPS)) o.batch_ops = u32(*n, 1, UINT32_MAX);
  if (auto n = env_number(Env::kBATCH_BYTES)) o.batch_bytes = std::max<uint64_t>(1024, *n);
  if (auto n = env_number(Env::kFLUSH_IDLE_US)) o.idle_flush_us = u32(*n, 0, UINT32_MAX);
  if (auto n = env_number(Env::kSPIN_US)) o.spin_us = u32(*n, 0, 10'000);
  if (auto f = env_flag(Env::kSHM)) o.shm = *f;
  o.compress = proto::compress_mode_from_env();
  if (auto f = env_flag(Env::kDEDUP)) o.dedup = *f;
  if (auto n = env_number(Env::kDEDUP_MIN_BYTES)) o.dedup_min_bytes = std::max<uint64_t>(1, *n);
  if (auto n = env_number(Env::kWINDOW_BYTES)) o.window_bytes = *n;
  if (auto t = env_text(Env::kCREDENTIAL)) o.credential = *t;
  if (auto f = env_flag(Env::kRESUME)) o.resume = *f;
  if (auto n = env_number(Env::kRESUME_ATTEMPTS)) o.resume_attempts = u32(*n, 1, 100);
  if (auto n = env_number(Env::kRESUME_WINDOW)) o.resume_window_bytes = *n;
  if (auto t = env_text(Env::kTLS_CA)) o.tls.ca_file = *t;
  if (auto t = env_text(Env::kTLS_FINGERPRINT)) o.tls.fingerprint = *t;
  if (auto t = env_text(Env::kTLS_CIPHERS)) o.tls.cipher_suites = *t;
  o.handshake_timeout_ms = net::handshake_timeout_ms();
  return o;
}

// Blocking handshake on a stream not yet driven by an io thread.
Result<proto::Welcome> handshake(net::Stream& sock, const net::Url& url, uint32_t device_index,
                                 const Options& options, const proto::Hello::Resume* resume) {
  asio::error_code ec;
  proto::OutFrame hello;
  proto::Hello h{proto::kMinProtocolVersion, proto::kProtocolVersion, device_index,
                 options.credential};
  // One deadline for the whole exchange: a peer that accepts and never answers (not a tensorwire
  // server, or one stopped in a debugger) fails the caller instead of holding it.
  const int timeout_ms =
      options.handshake_timeout_ms > 0 ? options.handshake_timeout_ms : net::handshake_timeout_ms();
  const net::Deadline deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  const auto silent = [&] {
    return unavailable("handshake with " + url.str() + " failed: no reply within " +
                       std::to_string(timeout_ms) +
                       " ms (TW_HANDSHAKE_TIMEOUT_MS sets the deadline): is a tensorwire server "
                       "listening there, and not stopped?");
  };
  if (resume) {
    h.device_index = proto::kResumeSession;
    h.resume = *resume;
  }
  proto::encode_hello(h, hello);
  uint8_t header[4];
  std::vector<asio::const_buffer> bufs;
  net::frame_buffers(hello, header, bufs);
  ec = net::write_all(sock, bufs, deadline);
  if (ec == asio::error::timed_out) return silent();
  if (ec) return unavailable("handshake with " + url.str() + " failed: " + ec.message());
  ec = net::read_exact(sock, asio::buffer(header, 4), deadline);
  if (ec == asio::error::timed_out) return silent();
  if (ec)
    return unavailable("handshake with " + url.str() +
                       " failed: the server closed the connection (" + ec.message() +
                       "); is it a tensorwire server?");
  if (net::looks_like_tls(header, sizeof header)) {
    return unavailable("handshake with " + url.str() +
                       " failed: the server speaks TLS there; connect with tls://" + url.host +
                       ":" + std::to_string(url.port));
  }
  uint32_t len = net::frame_length(header);
  if (len == 0 || len > (16u << 20))
    return data_loss("handshake with " + url.str() + ": bad reply frame of " + std::to_string(len) +
                     " bytes; is it a tensorwire server?");
  Buffer payload = Buffer::allocate(len);
  ec = net::read_exact(sock, asio::buffer(payload.data(), len), deadline);
  if (ec == asio::error::timed_out) return silent();
  if (ec) return unavailable("handshake with " + url.str() + " failed: " + ec.message());
  TW_ASSIGN_OR_RETURN(proto::ServerMessage m, proto::decode_server_message(payload));
  if (m.kind == proto::ServerMsg::kRefuse) {
    StatusCode code = m.refuse.reason == proto::RefuseReason::kServerBusy
                          ? StatusCode::kResourceExhausted
                          : StatusCode::kInvalidArgument;
    std::string hint;
    if (m.refuse.reason == proto::RefuseReason::kUnauthorized) {
      hint = options.credential.empty()
                 ? "; this client sent none: set TW_CREDENTIAL (C++: client::Options::credential;"
                   " Python: the credential argument) to the server's --credential-file secret"
                 : "; the one this client sent (TW_CREDENTIAL, or the credential argument) "
                   "differs from the server's --credential-file secret";
    }
    return Status(code, "server " + url.str() + " refused the connection (" +
                            proto::refuse_reason_name(m.refuse.reason) + "): " + m.refuse.message +
                            hint);
  }
  if (m.kind != proto::ServerMsg::kWelcome)
    return data_loss("handshake with " + url.str() + ": unexpected reply");
  return m.welcome;
}

Result<proto::Welcome> enumerate(const net::Url& url, const Options& options) {
  asio::io_context io;
  TW_ASSIGN_OR_RETURN(std::unique_ptr<net::Stream> stream,
                      net::dial(url, io, options.dial_options()));
  return handshake(*stream, url, proto::kEnumerateOnly, options);
}

Connection::Connection(net::Url url, uint32_t device_index, Options options)
    : url_(std::move(url)), device_index_(device_index), options_(std::move(options)) {
  restart_batches_locked();
  reader_.set_divert([this](const uint8_t* payload, size_t at, size_t len) {
    return divert_target(payload, at, len);
  });
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
  auto dialed = net::dial(url_, io_, options_.dial_options());
  if (!dialed.ok()) {
    state_ = State::kDead;
    dead_ = dialed.status();
    return dead_;
  }
  stream_ = std::move(dialed).value();
  auto w = handshake(*stream_, url_, device_index_, options_);
  if (!w.ok()) {
    state_ = State::kDead;
    dead_ = w.status();
    return dead_;
  }
  welcome_ = std::move(w).value();
  batch_.set_packed_ids(welcome_.version >= proto::kPackedIdsSince);
  // A server always sends its limit (>= 1024); the floor only guards against a broken peer.
  frame_limit_ = std::clamp<uint64_t>(welcome_.limits.max_frame_bytes, 1024, 0xFFFFFFFFu);
  compress_ = welcome_.version >= proto::kCompressionSince &&
              url_.scheme != net::Url::Scheme::kUnix &&
              proto::compress_link(options_.compress, url_.host);
  // The same decision for the replies (protocol 10): asked for in the first batch, no round trip.
  if (compress_ && welcome_.version >= proto::kCompressRepliesSince)
    batch_.add(proto::CompressRepliesTask{true});
  timer_.emplace(io_);
  check_timer_.emplace(io_);
  work_.emplace(io_.get_executor());
  state_ = State::kConnected;  // (reset below if the I/O thread cannot start)
  start_resume_locked();
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
  finish_dedups();  // (client/dedup.cc)
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ == State::kConnected) {
      flush_locked();
      if (resume_ && !resume_->token.empty()) {
        push_ack_locked(proto::kAckGoodbye);  // the server lets the session go now
        if (!writer_.writing()) pump_locked();
      }
    }
    closing_ = true;
    kick_io_locked();
    window_cv_.notify_all();
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

Status Connection::ready_locked() {
  if (state_ == State::kConnected) return Status::OK();
  if (state_ == State::kDead) return dead_;
  return connect_locked();
}

Counters Connection::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  Counters c = counters_;
  c.bytes_in = bytes_in_.load(std::memory_order_relaxed);
  c.frames_in = frames_in_.load(std::memory_order_relaxed);
  return c;
}

}  // namespace tw::client
