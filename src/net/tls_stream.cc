#include "net/tls_stream.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <asio.hpp>
#include <asio/ssl/context.hpp>
#include <asio/ssl/error.hpp>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <mutex>
#include <utility>

#include "net/socket_stream.h"
#include "net/tls_identity.h"

namespace tw::net {

namespace {

// TLS 1.3's AEAD suites, in the order a client offers them (the server takes the client's
// order): AES-GCM first, as x86-64 and arm64 servers have AES instructions (`openssl speed
// -evp aes-128-gcm` beats chacha20-poly1305 there); ChaCha20 for a peer without them.
constexpr const char* kCipherSuites =
    "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256";
// Small buffers of a gather write are copied into one record of at most this much (a request
// of a header and a few small segments goes out as one record); a larger buffer is handed to
// OpenSSL in place.
constexpr size_t kCoalesceBytes = 16 * 1024;
// Records encrypted into the stream's own buffer before it is sent, and what OpenSSL reads
// from the socket at once (read-ahead): many records per system call, and still in cache when
// sent or decrypted (of 64 KiB, 128 KiB and 1 MiB, 1 MiB uploaded at 0.6x the speed of the
// others in bench-remote (e); between the two smaller ones the machine's noise decided).
constexpr size_t kFlushBytes = 128 * 1024;
constexpr size_t kReadAheadBytes = 128 * 1024;

using Context = std::shared_ptr<asio::ssl::context>;

Result<Context> make_context(asio::ssl::context::method method, const std::string& suites) {
  Context ctx;
  try {
    ctx = std::make_shared<asio::ssl::context>(method);
  } catch (const asio::system_error& e) {
    return internal_error(std::string("cannot create a TLS context: ") + e.what());
  }
  SSL_CTX* c = ctx->native_handle();
  SSL_CTX_set_min_proto_version(c, TLS1_3_VERSION);
  SSL_CTX_set_max_proto_version(c, TLS1_3_VERSION);
  if (SSL_CTX_set_ciphersuites(c, suites.empty() ? kCipherSuites : suites.c_str()) != 1) {
    return invalid_argument("bad TLS cipher suites '" + suites +
                            "': " + openssl_error("none known"));
  }
  // A peer that drops the connection without close_notify ends the stream as a close would:
  // framing above notices a frame cut short, and shutdown() sends no close_notify either.
  SSL_CTX_set_options(c, SSL_OP_IGNORE_UNEXPECTED_EOF);
  // Records go to a buffer that never blocks (TlsStream), so a write is never retried halfway;
  // should the handshake make one wait, the retry may come from a re-coalesced copy.
  SSL_CTX_set_mode(c, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  SSL_CTX_set_read_ahead(c, 1);
  SSL_CTX_set_default_read_buffer_len(c, kReadAheadBytes);
  return ctx;
}

// The write side's BIO: OpenSSL appends each record it makes to the stream's `out_` buffer
// (never blocking), and the stream sends that buffer itself, many records per system call.
BIO_METHOD* out_bio_method() {
  static BIO_METHOD* const method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "tensorwire out");
    BIO_meth_set_write_ex(m, [](BIO* b, const char* data, size_t n, size_t* written) {
      auto* out = static_cast<std::vector<uint8_t>*>(BIO_get_data(b));
      out->insert(out->end(), data, data + n);
      *written = n;
      return 1;
    });
    BIO_meth_set_ctrl(m, [](BIO*, int cmd, long, void*) -> long { return cmd == BIO_CTRL_FLUSH; });
    return m;
  }();
  return method;
}

// One TLS connection over a connected non-blocking socket. OpenSSL reads the descriptor
// itself (a socket BIO, with read-ahead) and writes records into out_, which the stream sends:
// encrypting up to kFlushBytes before one send() is what lets a bulk upload reach the cipher's
// speed instead of paying a system call and a receiver wake-up per 16 KiB record. Asio's
// ssl::stream, which drives the record layer through its own asynchronous operations, would
// not give the never-waiting try calls of the Stream contract; Asio provides the context
// (ssl::context) and the readiness waits.
class TlsStream final : public Stream {
 public:
  TlsStream(Socket sock, SSL* ssl, Context ctx)
      : sock_(std::move(sock)), fd_(sock_.native_handle()), ssl_(ssl), ctx_(std::move(ctx)) {
    asio::error_code ec;
    sock_.non_blocking(true, ec);
    BIO* out = BIO_new(out_bio_method());
    BIO_set_data(out, &out_);
    BIO_set_init(out, 1);
    SSL_set_bio(ssl_, BIO_new_socket(fd_, BIO_NOCLOSE), out);  // ssl_ owns both
  }
  ~TlsStream() override { SSL_free(ssl_); }

  // Reads records until `into` is full or nothing decrypted or buffered is left: a short read
  // then means the socket must be waited for, as the contract lets the caller assume.
  IoResult try_read(asio::mutable_buffer into) override {
    auto* p = static_cast<uint8_t*>(into.data());
    size_t total = 0;
    std::lock_guard<std::mutex> lock(mu_);
    IoResult r{IoResult::kDone, 0, {}};
    while (total < into.size()) {
      size_t n = 0;
      ERR_clear_error();
      if (SSL_read_ex(ssl_, p + total, into.size() - total, &n) != 1) {
        r = failure(0, read_wait_);
        break;
      }
      total += n;
      if (!SSL_has_pending(ssl_)) break;
    }
    // Stopped by a full `into` with records still in OpenSSL's buffer: those need no socket.
    // (A partial record also counts as pending, but a read that stopped on one says
    // would-block, and only the socket can complete it.)
    buffered_ = r.kind == IoResult::kDone && total == into.size() && SSL_has_pending(ssl_);
    // What the read made OpenSSL send (handshake messages, alerts) goes out now; a wait for
    // the next read then waits to send the rest first.
    if (flush_locked().kind == IoResult::kWouldBlock && r.kind == IoResult::kWouldBlock) {
      read_wait_ = POLLOUT;
    }
    if (total) return {IoResult::kDone, total, {}};  // a lasting failure comes back next call
    return r;
  }

  // Bytes count as written once their records have left for the socket, not when they are
  // encrypted: a write whose records the socket did not take at once says so by answering
  // would-block (its bytes owed_) until a later call has sent them. Were encrypted bytes
  // reported at once, the last records of a reply could sit in out_ with nobody left to send
  // them (the writer idle, the peer waiting for that very reply): a hang.
  IoResult try_write(const asio::const_buffer* bufs, size_t count) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (IoResult f = flush_locked(); f.kind != IoResult::kDone) {
      if (f.kind == IoResult::kWouldBlock) write_wait_ = POLLOUT;
      return f;
    }
    // out_ is empty: what was owed is on its way, and it is the front of `bufs` (the caller
    // passes the rest of what it writes), so encrypting starts after it.
    const size_t sent = std::exchange(owed_, 0);
    size_t total = 0, i = 0, off = sent;  // bufs[i] + off: the first byte not yet taken
    for (; i < count && off >= bufs[i].size() && off > 0; ++i) off -= bufs[i].size();
    while (out_.size() < kFlushBytes) {
      while (i < count && off == bufs[i].size()) {
        ++i;
        off = 0;
      }
      if (i == count) break;
      const uint8_t* data = static_cast<const uint8_t*>(bufs[i].data()) + off;
      size_t len = std::min(bufs[i].size() - off, kFlushBytes);
      if (len < kCoalesceBytes) {
        len = coalesce(bufs, count, i, off);
        data = staging_.data();
      }
      size_t n = 0;
      ERR_clear_error();
      if (SSL_write_ex(ssl_, data, len, &n) != 1) {
        IoResult r = failure(0, write_wait_);
        if (total == 0 && sent == 0) return r;
        break;
      }
      total += n;
      for (off += n; i < count && off >= bufs[i].size() && off > 0; ++i) off -= bufs[i].size();
    }
    IoResult f = flush_locked();
    if (f.kind == IoResult::kDone) return {IoResult::kDone, sent + total, {}};
    if (f.kind == IoResult::kError && sent == 0) return f;
    // The socket is full: the bytes just encrypted are owed until their records are sent.
    owed_ = total;
    write_wait_ = POLLOUT;
    if (sent) return {IoResult::kDone, sent, {}};
    return {IoResult::kWouldBlock, 0, {}};
  }

  bool wait_readable(int timeout_ms) override {
    return buffered_ || wait_fd(fd_, read_wait_.load(), timeout_ms);
  }
  bool wait_writable(int timeout_ms) override {
    return wait_fd(fd_, write_wait_.load(), timeout_ms);
  }

  void async_read_some(asio::mutable_buffer into, IoHandler done) override {
    IoResult r = try_read(into);
    if (r.kind != IoResult::kWouldBlock) return complete(r, r.bytes, std::move(done));
    when_ready(read_wait_,
               [this, into, done = std::move(done)](const asio::error_code& ec) mutable {
                 if (ec) return done(ec, 0);
                 async_read_some(into, std::move(done));
               });
  }

  void async_read(asio::mutable_buffer into, IoHandler done) override {
    transfer(ReadLeft{into}, read_wait_, 0, std::move(done));
  }

  void async_write(const std::vector<asio::const_buffer>& bufs, IoHandler done) override {
    transfer(WriteLeft{std::make_shared<std::vector<asio::const_buffer>>(bufs)}, write_wait_, 0,
             std::move(done));
  }

  // ::shutdown, as the socket stream does (safe from any thread); no close_notify, which
  // would need the SSL object while another thread may be inside it.
  void shutdown() override { ::shutdown(fd_, SHUT_RDWR); }
  void shutdown_send() override { ::shutdown(fd_, SHUT_WR); }
  void close() override {
    asio::error_code ec;
    sock_.close(ec);
  }

  // Client side, before the stream is shared: the blocking handshake, within the deadline.
  Status handshake(const Url& url, const TlsOptions& tls) {
    // A dialed server that has not finished the handshake by then is given up on.
    const int timeout_ms =
        tls.handshake_timeout_ms > 0 ? tls.handshake_timeout_ms : handshake_timeout_ms();
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      ERR_clear_error();
      int rc = SSL_do_handshake(ssl_);
      int err = rc == 1 ? SSL_ERROR_NONE : SSL_get_error(ssl_, rc);
      short events = POLLIN;
      IoResult f = flush_locked();
      if (f.kind == IoResult::kError)
        return unavailable("TLS handshake with " + url.str() + " failed: " + f.error.message());
      if (f.kind == IoResult::kWouldBlock)
        events = POLLOUT;
      else if (rc == 1)
        return Status::OK();
      else if (err != SSL_ERROR_WANT_READ && err != SSL_ERROR_WANT_WRITE)
        return handshake_failure(ssl_, url, tls, err);
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      pollfd p{fd_, events, 0};
      if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) == 0) {
        return unavailable("TLS handshake with " + url.str() + " timed out: no answer within " +
                           std::to_string(timeout_ms) +
                           " ms (TW_HANDSHAKE_TIMEOUT_MS sets the deadline): is a tensorwire "
                           "server listening with tls:// there?");
      }
    }
  }

  std::string cipher() const { return SSL_get_cipher_name(ssl_); }

 private:
  // Copies the small buffers from bufs[i] + off into staging_, up to one record's worth.
  size_t coalesce(const asio::const_buffer* bufs, size_t count, size_t i, size_t off) {
    size_t len = 0;
    for (; i < count && len < kCoalesceBytes; ++i, off = 0) {
      size_t take = std::min(bufs[i].size() - off, kCoalesceBytes - len);
      std::memcpy(staging_.data() + len, static_cast<const uint8_t*>(bufs[i].data()) + off, take);
      len += take;
    }
    return len;
  }

  // Sends what out_ holds: kDone once all of it is gone, kWouldBlock while the socket is full.
  IoResult flush_locked() {
    while (out_sent_ < out_.size()) {
      ssize_t k = ::send(fd_, out_.data() + out_sent_, out_.size() - out_sent_,
                         MSG_DONTWAIT | MSG_NOSIGNAL);
      if (k >= 0) {
        out_sent_ += static_cast<size_t>(k);
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return {IoResult::kWouldBlock, 0, {}};
      } else if (errno != EINTR) {
        return {IoResult::kError, 0, asio::error_code(errno, asio::system_category())};
      }
    }
    out_.clear();
    out_sent_ = 0;
    return {IoResult::kDone, 0, {}};
  }

  // What the SSL call that just failed means for the caller. A would-block records which way
  // the record layer waits (`wait`: the poll events of the waits and async waits).
  IoResult failure(int rc, std::atomic<short>& wait) {
    int err = SSL_get_error(ssl_, rc);
    switch (err) {
      case SSL_ERROR_WANT_READ: wait = POLLIN; return {IoResult::kWouldBlock, 0, {}};
      case SSL_ERROR_WANT_WRITE: wait = POLLOUT; return {IoResult::kWouldBlock, 0, {}};
      case SSL_ERROR_ZERO_RETURN: return {IoResult::kClosed, 0, {}};
      case SSL_ERROR_SYSCALL:
        if (ERR_peek_error() == 0) {
          if (errno == 0) return {IoResult::kClosed, 0, {}};
          return {IoResult::kError, 0, asio::error_code(errno, asio::system_category())};
        }
        [[fallthrough]];
      default: {
        if (SSL_is_server(ssl_) && SSL_get_state(ssl_) == TLS_ST_BEFORE) alert_plain_peer();
        auto e = static_cast<int>(ERR_get_error());
        ERR_clear_error();
        return {IoResult::kError, 0, asio::error_code(e, asio::error::get_ssl_category())};
      }
    }
  }

  // A peer whose first bytes are no TLS record (a plain tcp:// client) gets nothing from
  // OpenSSL, which has no version to answer in; a fatal protocol_version alert lets it say
  // that it reached a TLS port (looks_like_tls) instead of only seeing the connection close.
  void alert_plain_peer() {
    static constexpr uint8_t kAlert[] = {21, 3, 3, 0, 2, 2, 70};
    out_.insert(out_.end(), std::begin(kAlert), std::end(kAlert));
    flush_locked();  // best effort: the connection is being dropped either way
  }

  static asio::socket_base::wait_type wait_type(const std::atomic<short>& events) {
    return events.load() == POLLIN ? asio::socket_base::wait_read : asio::socket_base::wait_write;
  }

  // Runs `then` once the socket is ready the way `wait` says (or the wait fails). Asio's wait
  // is edge-triggered and, unlike its reads and writes, tries nothing first: readiness that
  // came between the try call that said would-block and the wait being queued (another thread
  // running the io_context took that edge) would never reach it, and the stream would sleep
  // with the peer's reply in the socket. So the socket is polled once more after the wait is
  // queued; whichever of the two comes first runs `then`, the other finds it gone.
  void when_ready(const std::atomic<short>& wait,
                  std::function<void(const asio::error_code&)> then) {
    struct Once {
      std::mutex mu;
      std::function<void(const asio::error_code&)> fn;
      void operator()(const asio::error_code& ec) {
        std::function<void(const asio::error_code&)> f;
        {
          std::lock_guard<std::mutex> lock(mu);
          f.swap(fn);
        }
        if (f) f(ec);
      }
    };
    auto once = std::make_shared<Once>();
    once->fn = std::move(then);
    const short events = wait.load();
    sock_.async_wait(wait_type(wait), [once](const asio::error_code& ec) { (*once)(ec); });
    pollfd p{fd_, events, 0};
    if (::poll(&p, 1, 0) > 0) asio::post(sock_.get_executor(), [once] { (*once)({}); });
  }

  // Completes an async operation with `r`'s outcome after `bytes` moved, through the
  // io_context as Asio would (never inside the initiating call).
  void complete(const IoResult& r, size_t bytes, IoHandler done) {
    asio::error_code ec;
    if (r.kind == IoResult::kClosed) ec = asio::error::eof;
    if (r.kind == IoResult::kError) ec = r.error;
    asio::post(sock_.get_executor(), [ec, bytes, done = std::move(done)] { done(ec, bytes); });
  }

  // What is left of an async_read or an async_write, and the try call that moves some of it.
  struct ReadLeft {
    asio::mutable_buffer rest;
    bool empty() const { return rest.size() == 0; }
    IoResult attempt(TlsStream& s) {
      IoResult r = s.try_read(rest);
      if (r.kind == IoResult::kDone) rest += r.bytes;
      return r;
    }
  };
  struct WriteLeft {
    std::shared_ptr<std::vector<asio::const_buffer>> rest;
    bool empty() const { return rest->empty(); }
    IoResult attempt(TlsStream& s) {
      IoResult r = s.try_write(rest->data(), rest->size());
      if (r.kind == IoResult::kDone) consume(*rest, r.bytes);
      return r;
    }
  };

  // Moves `left` with try calls, waiting for the socket whenever one would block (in the
  // direction `wait` says), then completes `done` with the bytes moved in all.
  template <typename Left>
  void transfer(Left left, std::atomic<short>& wait, size_t moved, IoHandler done) {
    for (;;) {
      if (left.empty()) return complete({}, moved, std::move(done));
      IoResult r = left.attempt(*this);
      if (r.kind == IoResult::kDone) {
        moved += r.bytes;
        continue;
      }
      if (r.kind != IoResult::kWouldBlock) return complete(r, moved, std::move(done));
      return when_ready(wait, [this, left, &wait, moved,
                               done = std::move(done)](const asio::error_code& ec) mutable {
        if (ec) return done(ec, moved);
        transfer(std::move(left), wait, moved, std::move(done));
      });
    }
  }

  Socket sock_;
  const int fd_;
  SSL* const ssl_;
  const Context ctx_;  // outlives ssl_'s use of it
  std::mutex mu_;      // ssl_: one reader and one writer share it
  std::atomic<short> read_wait_{POLLIN}, write_wait_{POLLOUT};
  bool buffered_ = false;     // the reader's: the last try_read left records to read
  std::vector<uint8_t> out_;  // records made, from out_sent_ on not yet sent (under mu_)
  size_t out_sent_ = 0;
  size_t owed_ = 0;  // the writer's: bytes taken whose records are in out_, not yet reported
  std::array<uint8_t, kCoalesceBytes> staging_;  // the writer's
};

class TlsListener final : public Listener {
 public:
  TlsListener(std::unique_ptr<Listener> tcp, std::string fingerprint)
      : tcp_(std::move(tcp)), fingerprint_(std::move(fingerprint)) {}
  const Url& url() const override { return tcp_->url(); }
  std::string tls_fingerprint() const override { return fingerprint_; }
  void async_accept(asio::io_context& io, AcceptHandler done) override {
    tcp_->async_accept(io, std::move(done));
  }
  void close() override { tcp_->close(); }

 private:
  std::unique_ptr<Listener> tcp_;  // its streams are made TLS ones as they are accepted
  std::string fingerprint_;
};

}  // namespace

Result<std::unique_ptr<Stream>> dial_tls(const Url& url, asio::io_context& io,
                                         const TlsOptions& tls) {
  std::string pinned;
  if (!tls.fingerprint.empty()) {
    TW_ASSIGN_OR_RETURN(pinned, normalize_fingerprint(tls.fingerprint));
  }
  TW_ASSIGN_OR_RETURN(Context ctx,
                      make_context(asio::ssl::context::tlsv13_client, tls.cipher_suites));
  TW_ASSIGN_OR_RETURN(bool verify_chain, set_up_verification(*ctx, tls, pinned));
  TW_ASSIGN_OR_RETURN(Socket sock, connect_socket(url, io));
  SSL* ssl = SSL_new(ctx->native_handle());
  if (!ssl)
    return resource_exhausted("cannot create a TLS connection: " + openssl_error("SSL_new"));
  auto stream = std::make_unique<TlsStream>(std::move(sock), ssl, ctx);
  SSL_set_connect_state(ssl);
  if (verify_chain) expect_host(ssl, url.host);
  TW_RETURN_NOT_OK(stream->handshake(url, tls));
  TW_RETURN_NOT_OK(check_pinned(url, ssl, pinned));
  return std::unique_ptr<Stream>(std::move(stream));
}

Result<std::unique_ptr<Listener>> listen_tls(const Url& url, asio::io_context& io,
                                             const TlsOptions& tls) {
  TW_ASSIGN_OR_RETURN(Context ctx,
                      make_context(asio::ssl::context::tlsv13_server, tls.cipher_suites));
  TW_RETURN_NOT_OK(load_identity(*ctx, tls));
  // No session tickets: clients do not resume, and tickets would be bytes the client must
  // read after the handshake before its first reply.
  SSL_CTX_set_num_tickets(ctx->native_handle(), 0);
  std::string fingerprint = fingerprint_of(SSL_CTX_get0_certificate(ctx->native_handle()));
  MakeStream make = [ctx](Socket sock, asio::error_code& ec) -> std::unique_ptr<Stream> {
    SSL* ssl = SSL_new(ctx->native_handle());
    if (!ssl) {
      ERR_clear_error();
      ec = asio::error::no_memory;
      return nullptr;
    }
    SSL_set_accept_state(ssl);
    return std::make_unique<TlsStream>(std::move(sock), ssl, ctx);
  };
  TW_ASSIGN_OR_RETURN(std::unique_ptr<Listener> tcp, listen_socket(url, io, std::move(make)));
  return std::unique_ptr<Listener>(std::make_unique<TlsListener>(std::move(tcp), fingerprint));
}

bool looks_like_tls(const uint8_t* bytes, size_t n) {
  // Content type 21 (alert) or 22 (handshake), then a 3.x record version.
  return n >= 3 && (bytes[0] == 21 || bytes[0] == 22) && bytes[1] == 3 && bytes[2] <= 4;
}

std::string tls_cipher(const Stream& s) {
  auto* t = dynamic_cast<const TlsStream*>(&s);
  return t ? t->cipher() : std::string();
}

}  // namespace tw::net
