// The byte stream under framing, and dialing and listening for one: every transport (TCP, Unix
// sockets and TLS over TCP) is a Stream, so framing, the client and the server never see what
// carries their bytes. Over a Unix socket a stream also passes descriptors, which the same-host
// shared-memory path (net/shm.h) rides on.
//
// The contract, which the latency of a small request depends on:
//  - Every stream is non-blocking. try_read() and try_write() never wait: they move what can be
//    moved now and answer kWouldBlock when nothing can. Would-block means "call again once the
//    stream is ready", where ready is what wait_readable()/wait_writable() or an async operation
//    wait for. A TLS stream maps SSL_ERROR_WANT_READ/WANT_WRITE to kWouldBlock and has its waits
//    wait for whichever direction the record layer asked for (a read may need the socket to be
//    writable, and the other way round).
//  - A try_read() that returns fewer bytes than asked may be taken by the caller to mean that
//    nothing more is available now (FrameReader does, to spare the system call that would say
//    so). So wait_readable() and async_read_some() must return at once when the stream holds
//    bytes it has already received (a TLS stream's decrypted records), and async_read_some()
//    tries a read before it waits for the descriptor: it never waits for an edge alone.
//  - Threads: one reader and one writer may act at the same time. The reads (try_read,
//    wait_readable, async_read_some, async_read) are serialised by the caller among themselves,
//    as are the writes (try_write, wait_writable, async_write); at most one async read and one
//    async write are outstanding. A stream whose two directions share state (TLS: one SSL
//    object) serialises them internally; the calls never block, so such a lock is held briefly.
//    shutdown() may be called from any thread at any time, while operations are under way.
//  - Async operations complete on the io_context the stream was made on (dial's or accept's),
//    with the error Asio would give (operation_aborted when cancelled by close(), eof at the
//    end of the stream). The buffers passed stay alive and untouched until the handler runs.
#pragma once
#include <asio/buffer.hpp>
#include <asio/error_code.hpp>
#include <asio/io_context.hpp>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "net/url.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw::net {

struct IoResult {
  enum Kind { kDone, kWouldBlock, kClosed, kError } kind = kDone;
  size_t bytes = 0;        // kDone: bytes moved (at least 1)
  asio::error_code error;  // kError
};

using IoHandler = std::function<void(const asio::error_code&, size_t)>;

class Stream {
 public:
  virtual ~Stream() = default;

  // Reads at most into.size() bytes. kClosed: the peer ended the stream.
  virtual IoResult try_read(asio::mutable_buffer into) = 0;
  // Writes from the first `count` buffers in order (a gather write), as much as goes now.
  virtual IoResult try_write(const asio::const_buffer* bufs, size_t count) = 0;
  // Block the calling thread until a try_read()/try_write() may make progress, or the stream
  // fails (then the try call says how), or `timeout_ms` passes (-1: no limit), which returns
  // false. For callers that read or write on their own thread.
  virtual bool wait_readable(int timeout_ms = -1) = 0;
  virtual bool wait_writable(int timeout_ms = -1) = 0;

  // Reads what is available, at least one byte, into `into`.
  virtual void async_read_some(asio::mutable_buffer into, IoHandler done) = 0;
  // Reads exactly into.size() bytes (as few system calls as the kernel allows).
  virtual void async_read(asio::mutable_buffer into, IoHandler done) = 0;
  // Writes every byte of `bufs` (the vector itself stays alive until `done` runs).
  virtual void async_write(const std::vector<asio::const_buffer>& bufs, IoHandler done) = 0;

  // Ends both directions: pending and later operations fail, the peer sees the end of the
  // stream. Safe while other threads have operations on the stream; idempotent.
  virtual void shutdown() = 0;
  // Ends the sending direction only: the peer reads what was sent, then the end of the stream,
  // while reads here go on. Safe from any thread, as shutdown() is.
  virtual void shutdown_send() = 0;
  // Cancels outstanding async operations and releases the stream. Call on the stream's
  // io_context thread, or when no other thread uses the stream.
  virtual void close() = 0;

  // Descriptor passing (SCM_RIGHTS), for the same-host shared-memory path (net/shm.h): Unix
  // sockets only. passes_fds() says whether this stream can.
  virtual bool passes_fds() const { return false; }
  // Queues a duplicate of `fd` to travel with the next bytes written (from the writer's side:
  // call between writes), so the peer receives it no later than those bytes. False when the
  // stream cannot pass descriptors or the duplicate failed.
  virtual bool queue_fd(int /*fd*/) { return false; }
  // The oldest descriptor received and not yet taken, which the caller then owns, or -1. At most
  // kMaxHeldFds are held; later ones are closed on arrival (a peer cannot fill the table).
  // Safe from any thread.
  virtual int take_fd() { return -1; }
  static constexpr size_t kMaxHeldFds = 16;
};

using AcceptHandler = std::function<void(const asio::error_code&, std::unique_ptr<Stream>)>;

class Listener {
 public:
  virtual ~Listener() = default;
  // The address bound, with a requested port 0 resolved to the one the OS chose.
  virtual const Url& url() const = 0;
  // Accepts one connection; the stream's async operations run on `io`. A transport's
  // per-connection options (TCP_NODELAY) are set on it already.
  virtual void async_accept(asio::io_context& io, AcceptHandler done) = 0;
  // The SHA-256 fingerprint of the certificate a TLS listener presents ("AB:CD:..."); empty
  // for the other transports.
  virtual std::string tls_fingerprint() const { return {}; }
  // Stops accepting (a pending accept completes with operation_aborted) and removes what the
  // listener left behind (a Unix socket's file). Call on the io_context passed to listen().
  virtual void close() = 0;
};

// What a tls:// URL needs besides its address; the other schemes ignore it.
struct TlsOptions {
  // Dialing: how the server's certificate is trusted. A pinned fingerprint (SHA-256 of the
  // certificate, hex, colons and case optional) accepts exactly that certificate, whoever
  // issued it; a CA file (PEM) accepts a certificate that chains to it and names the host
  // dialed. Both: both must hold. Neither: the system's trusted CAs and the host name.
  std::string ca_file;
  std::string fingerprint;
  // Listening: the certificate chain and its private key, as PEM files or as PEM text (a
  // generated pair, see tls_stream.h). A tls:// listener needs one of the two.
  std::string cert_file, key_file;
  std::string cert_pem, key_pem;
  // TLS 1.3 suites to offer or accept, in OpenSSL's form; empty: AES-GCM and ChaCha20-Poly1305
  // (tls_stream.cc says in which order, and why).
  std::string cipher_suites;
  // Dialing: how long the TLS handshake may take (the client's handshake deadline, which it
  // passes here; handshake_timeout_ms() below by default).
  int handshake_timeout_ms = 0;  // 0: handshake_timeout_ms()
};

// How long a client waits for a server's first answer (the TLS handshake, then the reply to its
// Hello) before it gives up: TW_HANDSHAKE_TIMEOUT_MS, else kDefaultHandshakeTimeoutMs. A peer that
// accepts connections and never answers (a process that is not a tensorwire server, a server
// stopped in a debugger) would otherwise hold the caller forever.
constexpr int kDefaultHandshakeTimeoutMs = 10'000;
int handshake_timeout_ms();

// Connects to `url`, blocking until connected (for tls://, until the TLS handshake is done and
// the certificate verified). The stream's async operations run on `io`.
Result<std::unique_ptr<Stream>> dial(const Url& url, asio::io_context& io,
                                     const TlsOptions& tls = {});
// Binds and listens on `url`; accepts are driven on `io`. A tls:// stream does its handshake
// within its first reads, under whatever deadline the caller keeps for a peer's first message.
Result<std::unique_ptr<Listener>> listen(const Url& url, asio::io_context& io,
                                         const TlsOptions& tls = {});

// Blocking helpers over the non-blocking calls, for exchanges before a stream is driven
// asynchronously (the handshake). They return the error, eof when the stream ends first, or
// timed_out when `deadline` passes first.
using Deadline = std::chrono::steady_clock::time_point;
asio::error_code write_all(Stream& s, std::vector<asio::const_buffer> bufs,
                           Deadline deadline = Deadline::max());
asio::error_code read_exact(Stream& s, asio::mutable_buffer into,
                            Deadline deadline = Deadline::max());

// Drops the first `n` bytes of a gather list (what a partial write has already sent).
void consume(std::vector<asio::const_buffer>& bufs, size_t n);

}  // namespace tw::net
TW_INTERNAL_END
