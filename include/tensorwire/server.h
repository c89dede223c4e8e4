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

// One server option's declaration (ServerOptions::fields): the member's name (tw.serve()'s
// keyword), tensorwire-server's flag for it and what the flag takes, and one line of help. The
// flag's value becomes the member by the member's type: a std::chrono::milliseconds takes seconds
// (fractions allowed), a uint64_t of `takes` "BYTES" takes a size (512M, 4G), a bool is a switch,
// a std::vector<std::string> repeats. tensorwire-server's parser, its --help and the docs table
// (tensorwire-server --help-markdown, docs/remote.md "Server options") all come from these.
struct ServerOption {
  const char* name;   // "max_frame_bytes"
  const char* flag;   // "--max-frame"
  const char* takes;  // "BYTES", "N", "SECONDS", "URL", "PATH", ...; "" for a switch
  const char* help;   // one line of --help: what it does, and its default
  const char* deflt;  // the default, as docs/remote.md's table says it ("8 GiB", "cores")
  const char* doc;    // docs/remote.md's text (Markdown): what it does, in full
  double most = 0;    // the largest value the flag may give (0: the type's largest)
  bool zero = true;   // whether the flag may give 0 (a count, size or duration)
  bool file = false;  // the flag names a file whose first line is the value (--credential-file)
};

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

  // Every option above once (ServerOption), in declaration order: fields(v) calls
  // v(option, member) for each, so a front end (the server's flags, tw.serve()'s keywords, the
  // docs table) sets and describes options without typing them again. A new option is added here
  // too (python/tests/test_torch_api.py compares this list with the members declared above).
  template <class V>
  void fields(V&& v) {
    v(
        ServerOption{
            .name = "listen",
            .flag = "--listen",
            .takes = "URL",
            .help = "tcp://host:port, tls://host:port or unix:///path (repeatable; default "
                    "tcp://127.0.0.1:7070; port 0 picks a free one). An address other hosts can "
                    "reach must be tls:// and needs --credential-file, unless --insecure",
            .deflt = "`tcp://127.0.0.1:7070`",
            .doc = "address to listen on: `tcp://host:port`, `tls://host:port` (TCP under TLS 1.3) "
                   "or `unix:///path/to.sock`; repeat for several; port 0 picks a free port. A "
                   "`unix://` path where another server answers is refused (as a taken TCP port "
                   "is); a socket file nobody answers on, left by a server that crashed, is "
                   "replaced. An address other hosts can reach must be `tls://` with "
                   "`--credential-file`, or the server refuses to start (unless `--insecure`)"},
        listen);
    v(ServerOption{.name = "devices",
                   .flag = "--devices",
                   .takes = "N",
                   .help = "devices to host (default 1)",
                   .deflt = "1",
                   .doc = "devices to host; each session uses one, chosen by index "
                          "(`Device::remote(url, index)`)",
                   .most = 65535,
                   .zero = false},
      devices);
    v(ServerOption{.name = "backend",
                   .flag = "--backend",
                   .takes = "SPEC",
                   .help = "cpu (default), torch, vulkan:N, cuda:N (where built), or one per "
                           "device, comma-separated: cpu,vulkan:0 hosts device 0 on cpu and device "
                           "1 on the first Vulkan device",
                   .deflt = "`cpu`",
                   .doc =
                       "what executes ops: `cpu`, `torch` (PyTorch's kernels; builds with "
                       "libtorch) `vulkan:N` (Vulkan device N; builds with libvulkan-dev and "
                       "glslc, docs/vulkan.md) or `cuda:N` (CUDA device N; builds with nvcc and "
                       "the CUDA toolkit, docs/cuda.md), for every device; or one backend per "
                       "device, comma-separated: `--backend cpu,torch` hosts device 0 on cpu and "
                       "device 1 on torch (`--devices`, if given, must then equal the list's "
                       "length). The handshake names each device's backend (`tensorwire info`)"},
      backend);
    v(ServerOption{.name = "worker_threads",
                   .flag = "--workers",
                   .takes = "N",
                   .help = "execution threads shared by all sessions (default: cores)",
                   .deflt = "cores",
                   .doc = "server threads; each session lives on one (the least loaded when it "
                          "connects) as a serial queue, not a thread of its own",
                   .most = 4096},
      worker_threads);
    v(ServerOption{.name = "max_sessions",
                   .flag = "--max-sessions",
                   .takes = "N",
                   .help = "connections at once, from accept (default 4096)",
                   .deflt = "4096",
                   .doc = "connections at once, each holding a slot from its accept until it "
                          "closes (or misses the handshake deadline); one more is refused with "
                          "\"server busy\" (asking for the device list still works)",
                   .most = 16777216,
                   .zero = false},
      max_sessions);
    v(ServerOption{.name = "max_frame_bytes",
                   .flag = "--max-frame",
                   .takes = "BYTES",
                   .help = "largest frame a client may send (default 1G)",
                   .deflt = "1073741824 (1 GiB)",
                   .doc = "the largest frame a client may send (at least 1024). Clients learn it "
                          "in the handshake and keep their batches under it; a single upload "
                          "bigger than it is refused at the call site",
                   .zero = false},
      max_frame_bytes);
    v(ServerOption{.name = "session_memory_bytes",
                   .flag = "--session-memory",
                   .takes = "BYTES",
                   .help = "tensor bytes one session may hold (default 8G)",
                   .deflt = "8 GiB",
                   .doc = "tensor bytes one session may hold; an op that would go over fails (its "
                          "outputs are poisoned), the session goes on",
                   .zero = false},
      session_memory_bytes);
    v(ServerOption{.name = "max_graph_ops",
                   .flag = "--max-graph-ops",
                   .takes = "N",
                   .help = "ops one session's registered graphs may hold (default 262144)",
                   .deflt = "262144",
                   .doc =
                       "ops one session's registered graphs may hold together; a registration past "
                       "it is refused (graphs' planned buffers count in `--session-memory`)"},
      max_graph_ops);
    v(ServerOption{.name = "max_op_cost",
                   .flag = "--max-op-cost",
                   .takes = "SECONDS",
                   .help = "refuse an op whose work, estimated from its shapes, would take longer "
                           "than this on its device (default 1; 0: no limit)",
                   .deflt = "1",
                   .doc = "the most work one op may be estimated to take on its device; an op over "
                          "it is refused (see \"Limits\" below); fractions allowed; 0: no limit",
                   .most = 1000000000.0},
      max_op_cost);
    v(
        ServerOption{
            .name = "max_memory_bytes",
            .flag = "--max-memory",
            .takes = "BYTES",
            .help = "tensor bytes all sessions together may hold (default 80% of physical memory)",
            .deflt = "80% of physical memory",
            .doc = "tensor bytes all sessions together may hold in host memory (see \"Limits\" "
                   "below); a device with memory of its own (a GPU) has its own budget instead, "
                   "90% of what it had free when the server started, and an op over it fails "
                   "naming the device",
            .zero = false},
        max_memory_bytes);
    v(ServerOption{.name = "handshake_timeout",
                   .flag = "--handshake-timeout",
                   .takes = "SECONDS",
                   .help =
                       "drop a peer that has not completed its handshake within this (default 10)",
                   .deflt = "10",
                   .doc = "a peer that has not completed its handshake this long after connecting "
                          "is dropped and its slot freed; fractions allowed (`0.5`)",
                   .most = 86400,
                   .zero = false},
      handshake_timeout);
    v(ServerOption{.name = "session_queue_depth",
                   .flag = "--queue-depth",
                   .takes = "N",
                   .help = "batches queued per session before backpressure (default 64)",
                   .deflt = "64",
                   .doc = "batches queued per session before the server stops reading that "
                          "client's socket (backpressure)",
                   .most = 1048576,
                   .zero = false},
      session_queue_depth);
    v(ServerOption{.name = "credential",
                   .flag = "--credential-file",
                   .takes = "PATH",
                   .help = "clients must present the first line of this file (TW_CREDENTIAL on the "
                           "client side); encrypted over tls://, clear text otherwise",
                   .deflt = "none",
                   .doc = "clients must present the first line of this file (`TW_CREDENTIAL` on "
                          "their side); compared in constant time. Encrypted over `tls://`; over "
                          "`tcp://` it travels in clear text",
                   .file = true},
      credential);
    v(ServerOption{.name = "tls_cert_file",
                   .flag = "--tls-cert",
                   .takes = "PATH",
                   .help =
                       "certificate chain (PEM) of the tls:// addresses, with --tls-key; without "
                       "both, a self-signed pair is generated at start and its fingerprint printed",
                   .deflt = "generated",
                   .doc = "the certificate chain and private key (PEM) the `tls://` addresses "
                          "present; both or neither. Neither: a self-signed pair is generated at "
                          "start and its fingerprint printed"},
      tls_cert_file);
    v(
        ServerOption{
            .name = "tls_key_file",
            .flag = "--tls-key",
            .takes = "PATH",
            .help = "the certificate's private key (PEM)",
            .deflt = "generated",
            .doc = "the private key (PEM) of the certificate `--tls-cert` names; both or neither"},
        tls_key_file);
    v(ServerOption{.name = "insecure",
                   .flag = "--insecure",
                   .takes = "",
                   .help = "serve a reachable address without TLS or a credential",
                   .deflt = "off",
                   .doc = "serve an address other hosts can reach without TLS or without a "
                          "credential; a loud warning at start says what is missing"},
      insecure);
    v(ServerOption{.name = "metrics",
                   .flag = "--metrics",
                   .takes = "URL",
                   .help = "tcp://host:port (port 0 picks a free one): Prometheus text at /metrics "
                           "and a live dashboard at / (HTTP, no authentication)",
                   .deflt = "none",
                   .doc =
                       "`tcp://host:port` (port 0 picks a free one): an HTTP endpoint with "
                       "Prometheus text at `/metrics` and a live dashboard at `/` (see \"Metrics "
                       "and the dashboard\" below); printed as `metrics on http://host:port`"},
      metrics);
    v(ServerOption{.name = "capability_ttl",
                   .flag = "--capability-ttl",
                   .takes = "SECONDS",
                   .help = "how long a capability this server signs for a tensor move stays valid "
                           "(default 60)",
                   .deflt = "60",
                   .doc =
                       "how long a capability this server signs for moving one of its tensors "
                       "stays valid ([moves](#moving-tensors-between-servers)); fractions allowed",
                   .most = 86400,
                   .zero = false},
      capability_ttl);
    v(ServerOption{.name = "transfer_timeout",
                   .flag = "--transfer-timeout",
                   .takes = "SECONDS",
                   .help = "fail an import from another server that makes no progress for this "
                           "long (default 30)",
                   .deflt = "30",
                   .doc = "an import from another server that makes no progress this long fails "
                          "(the tensor is poisoned); fractions allowed",
                   .most = 86400,
                   .zero = false},
      transfer_timeout);
    v(
        ServerOption{
            .name = "resume_grace",
            .flag = "--resume-grace",
            .takes = "SECONDS",
            .help = "keep a session whose connection dropped this long for its client to resume it "
                    "(default 60; 0: never)",
            .deflt = "60",
            .doc = "a session whose connection dropped is kept this long for its client to resume "
                   "it ([Dropped connections](#dropped-connections-resumable-sessions)); its "
                   "tensors stay counted in the memory budget meanwhile; fractions allowed; 0: "
                   "sessions end with their connection",
            .most = 86400},
        resume_grace);
    v(ServerOption{.name = "collective_host",
                   .flag = "--collective-host",
                   .takes = "HOST",
                   .help = "the address collectives' Gloo connections listen on (default: the "
                           "first tcp:// or tls:// host; 127.0.0.1 for a wildcard)",
                   .deflt = "first tcp:// or tls:// host",
                   .doc = "the address collectives' Gloo connections listen on for the other "
                          "participants ([Running several servers](#running-several-servers)); "
                          "127.0.0.1 when the first address is a wildcard"},
      collective_host);
    v(
        ServerOption{
            .name = "spin_us",
            .flag = "--spin-us",
            .takes = "N",
            .help = "after work, a server thread polls for more this long (microseconds) before it "
                    "sleeps (default 50; 0: off)",
            .deflt = "50",
            .doc = "after a server thread has run work it polls its sockets this long (yielding "
                   "the CPU between looks; the stream of a thread's only session is polled "
                   "directly, without yielding, for at most 1 ms at a time) before it sleeps, so a "
                   "client's next request within it costs no wake-up; an idle server never spins; "
                   "0 turns it off (\"Where the time of a round trip goes\")",
            .most = 10000},
        spin_us);
    v(
        ServerOption{
            .name = "spin_threads",
            .flag = "--spin-threads",
            .takes = "N",
            .help = "at most N threads spin at once (default: cores - 1, at least 1)",
            .deflt = "cores - 1 (at least 1)",
            .doc = "at most this many of the server's threads spin at once; one that finds them "
                   "all spinning sleeps at once. The core left over is the client's (or whatever "
                   "else runs there): a client alternating between two devices of a 2-core server, "
                   "each session on its own thread, took 118-125 µs a pair of round trips with "
                   "both threads spinning beside it, 17-18 µs with one (bench-remote row a2); two "
                   "clients doing round trips on a device each at once, 107 µs a round trip each "
                   "with two, 53 µs with one. `tensorwire_spinning_threads` and "
                   "`tensorwire_spin_refused_total` on `/metrics` show it",
            .most = 4096},
        spin_threads);
    v(ServerOption{.name = "store_dir",
                   .flag = "--store",
                   .takes = "DIR",
                   .help = "keep deduplicated uploads on disk in DIR, by hash and credential, so "
                           "re-uploads after a restart send the hash only",
                   .deflt = "none",
                   .doc = "the persistent weight store: the bytes of deduplicated uploads (4 MiB "
                          "or more) also kept in `DIR`, by hash and credential, so that after a "
                          "restart of the client or of the server uploading the same weights sends "
                          "the hash only ([Weights that stay](#weights-that-stay---store))"},
      store_dir);
    v(ServerOption{.name = "store_bytes",
                   .flag = "--store-bytes",
                   .takes = "BYTES",
                   .help = "the store's size limit, least recently used out (default 16G)",
                   .deflt = "16G",
                   .doc = "the store's size limit; least recently used entries go first"},
      store_bytes);
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
