// tw::Server: the compute server as a library. A program can host one in-process on an
// ephemeral loopback port (what `make run` does) or run apps/tensorwire-server.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tensorwire/export.h"

TW_API_BEGIN

namespace tw {

class Device;  // tensorwire/device.h (the api layer, above this one)

struct ServerOptions {
  // Addresses to listen on: tcp://host:port (port 0 picks a free one), tls://host:port (TCP
  // under TLS 1.3) and/or unix:///path. Secure by default: an address other hosts can reach
  // (not loopback, not a Unix socket) must be tls:// with a credential set, or the server
  // refuses to start, unless `insecure`.
  std::vector<std::string> listen = {"tcp://127.0.0.1:0"};
  int devices = 1;  // devices hosted; each session uses one, chosen by index
  // What executes ops: "cpu" or "torch" (when built with libtorch) for every device, or one
  // backend per device as a comma-separated list, "cpu,torch": device 0 is cpu, device 1 torch
  // (devices must then be 1 or the list's length). The handshake names each device's backend.
  std::string backend = "cpu";
  int worker_threads = 0;  // sessions' execution pool; 0: hardware threads
  // Limits. Every one yields a clear error to the client that hits it, never to the others.
  uint32_t max_sessions = 4096;  // connections at once, from accept (see handshake_timeout)
  uint64_t max_frame_bytes = uint64_t{1} << 30;  // a frame's payload, checked before allocating
  uint64_t session_memory_bytes = uint64_t{8} << 30;  // tensor bytes one session may hold
  // Ops all of one session's registered graphs may hold together (a graph of no ops counts as
  // one); a registration past it is refused. Graphs' planned buffers count in the memory above.
  uint64_t max_graph_ops = uint64_t{1} << 18;
  // The most one op may cost, in seconds of work estimated from its shapes before it runs on the
  // device it is sent to (FLOPs, bytes moved and transcendental functions over that device's
  // rate: docs/remote.md, "Limits"). An op over it is refused, its outputs poisoned with an
  // error naming the op, its cost and tensorwire-server --max-op-cost; a graph holding one is
  // refused at registration. The same seconds admit more work on a faster device. 0: no limit.
  double max_op_cost = 1.0;
  // Tensor bytes all sessions together may hold (with what else their work reserves); an op
  // that would pass it fails for its session, naming this limit. 0: 80% of physical memory.
  uint64_t max_memory_bytes = 0;
  // A peer that has not completed its handshake this long after connecting is dropped, which
  // frees the session slot it holds (every connection holds one from its accept, within
  // max_sessions). Sessions past the handshake may stay idle for as long as they like.
  std::chrono::milliseconds handshake_timeout{10000};
  // Batches received but not yet executed, per session; past this the server stops reading
  // that client's connection (backpressure) until its queue drains.
  uint32_t session_queue_depth = 64;
  // When set, a client's Hello must carry this credential (compared in constant time) or the
  // session is refused as unauthorised; empty: any client is served. It travels in clear text
  // over tcp:// and unix://, encrypted over tls://.
  std::string credential;
  // The tls:// listeners' certificate chain and private key (PEM files, both or neither).
  // Neither: a self-signed pair is generated at start (see Server::tls_fingerprint()).
  std::string tls_cert_file, tls_key_file;
  // Serve addresses other hosts can reach without TLS or without a credential; a loud warning
  // at start says what is missing (tensorwire-server --insecure).
  bool insecure = false;
  // When set (tcp://host:port; port 0 picks a free one), an HTTP endpoint there serves the
  // server's counters in Prometheus text format at /metrics and a live dashboard at /
  // (docs/remote.md, "Metrics"). It also turns on timing each op for the latency histogram.
  std::string metrics;
  // Tensor moves between servers (docs/remote.md, "Moving tensors between servers"): how long a
  // capability this server signs stays valid (tensorwire-server --capability-ttl), and how long
  // a pull from another server may make no progress before the import fails
  // (--transfer-timeout).
  std::chrono::milliseconds capability_ttl{60000};
  std::chrono::milliseconds transfer_timeout{30000};
  // Resumable sessions (docs/remote.md, "Dropped connections"): how long a session whose
  // connection dropped is kept for its client to resume it (tensorwire-server --resume-grace);
  // its tensors stay counted in the memory budget meanwhile. 0: sessions end with their
  // connection.
  std::chrono::milliseconds resume_grace{60000};
  // Collectives across servers (docs/remote.md, "Running several servers"): the address Gloo
  // listens on for the other participants (tensorwire-server --collective-host); empty: the
  // host of the first tcp:// or tls:// address, or 127.0.0.1 when that is a wildcard.
  std::string collective_host;
  // After a shard's thread has run work, it keeps polling its sockets for this long before it
  // sleeps in the kernel (tensorwire-server --spin-us), so a client's next request that comes
  // within it costs no wake-up of an idle CPU (on a 2-core VM the wake-up was most of a small
  // request's round trip: docs/remote.md, "Where the time of a round trip goes"). It only ever
  // follows work, so an idle server spins never; 0 turns it off.
  uint32_t spin_us = 50;
  // At most this many of the server's threads spin at once (tensorwire-server --spin-threads);
  // 0: one fewer than the machine's cores, at least 1. A thread that finds them all spinning
  // sleeps at once. The core left over is the client's, or whatever else the machine runs:
  // with every core spinning, a client alternating between two devices of a 2-core server
  // waited for the scheduler's time slices (a round trip on each took 125 us a pair instead of
  // 15-40).
  uint32_t spin_threads = 0;
  // A directory for the persistent weight store (tensorwire-server --store; docs/remote.md
  // "Weights that stay"): the bytes of deduplicated uploads (4 MiB or more) kept on disk by
  // their hash, so that after a restart of the client or of the server re-uploading them sends
  // the hash only. Entries are scoped by the credential, written crash-safe, verified against
  // their hash at every load. Empty: none.
  std::string store_dir;
  // The store's size limit (--store-bytes), least recently used entries out first; 0: 16 GiB.
  uint64_t store_bytes = 0;

  // Every option above once, by the name the Python keyword of tw.serve() takes (and the CLI
  // flag's, dashes for underscores): fields(v) calls v(name, member) for each, in declaration
  // order, so a front end sets options by name without typing them again. A new option is added
  // here too (python/tests/test_torch_api.py compares this list with the members declared above).
  template <class V>
  void fields(V&& v) {
    v("listen", listen);
    v("devices", devices);
    v("backend", backend);
    v("worker_threads", worker_threads);
    v("max_sessions", max_sessions);
    v("max_frame_bytes", max_frame_bytes);
    v("session_memory_bytes", session_memory_bytes);
    v("max_graph_ops", max_graph_ops);
    v("max_op_cost", max_op_cost);
    v("max_memory_bytes", max_memory_bytes);
    v("handshake_timeout", handshake_timeout);
    v("session_queue_depth", session_queue_depth);
    v("credential", credential);
    v("tls_cert_file", tls_cert_file);
    v("tls_key_file", tls_key_file);
    v("insecure", insecure);
    v("metrics", metrics);
    v("capability_ttl", capability_ttl);
    v("transfer_timeout", transfer_timeout);
    v("resume_grace", resume_grace);
    v("collective_host", collective_host);
    v("spin_us", spin_us);
    v("spin_threads", spin_threads);
    v("store_dir", store_dir);
    v("store_bytes", store_bytes);
  }
};

struct ServerStatsSnapshot {
  uint32_t sessions = 0;
  uint64_t sessions_opened = 0;
  uint64_t bytes_held = 0;
  uint64_t ops_executed = 0;
  uint64_t frames_in = 0, frames_out = 0, bytes_in = 0, bytes_out = 0;
};

class Server {
 public:
  ~Server();  // stops the server (as stop())
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // The bound addresses, ports resolved (tcp://127.0.0.1:41234).
  std::vector<std::string> urls() const;
  std::string url() const { return urls().at(0); }
  // The metrics endpoint's address, http://127.0.0.1:41234 (port resolved); empty without one.
  std::string metrics_url() const;
  // "devices=1 (cpu) workers=2 max-sessions=4096 max-frame=1.0GiB session-memory=8.0GiB
  // max-memory=19.2GiB queue-depth=64 handshake-timeout=10s"
  std::string limits_summary() const;
  // The SHA-256 fingerprint ("AB:CD:...") of the certificate the tls:// listeners present, for
  // clients to pin (TW_TLS_FINGERPRINT); empty when no address is tls://.
  std::string tls_fingerprint() const;
  // Whether that certificate is a self-signed one generated at start (no tls_cert_file).
  bool tls_self_signed() const;
  ServerStatsSnapshot stats() const;
  // Stops accepting, lets queued work finish, closes every session. Idempotent.
  void stop();
  // Graceful shutdown (tensorwire-server on SIGTERM): stops taking sessions (the listeners close;
  // a handshake under way is refused as draining), tells every client whose protocol has it
  // (9+) that the server is draining, so that it fails its waiters at once and can fail over,
  // lets the work already received run for up to `timeout`, then stops as stop() does. Returns
  // whether that work finished within the timeout (false: batches were still running; stop()
  // was not called, and the caller should exit without waiting for them).
  bool drain(std::chrono::milliseconds timeout);
  // Blocks until stop() has completed (from another thread or a signal handler's thread).
  void wait();

  struct Impl;
  explicit Server(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

// Starts a server hosting options.devices devices of `device`'s kind (cpu or torch). Throws
// tw::Error naming the problem (address in use, a device that does not execute ops itself such as a
// remote device, ...). Never aborts. Defined in src/serve/, a layer above the API (which knows
// devices) and the server, so that neither links the other.
std::unique_ptr<Server> serve(const Device& device, ServerOptions options = {});
// As serve(), with the backend named in options.backend.
std::unique_ptr<Server> serve(ServerOptions options = {});

}  // namespace tw
TW_API_END
