// What the server's files share (server.cc, listeners.cc, shard.cc, connection.h): the state
// of a running tw::Server, which its connections and its lifecycle both use.
#pragma once
#include <asio.hpp>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "net/stream.h"
#include "protocol/messages.h"
#include "server/collective.h"
#include "server/long_work.h"
#include "server/metrics.h"
#include "server/resume.h"
#include "server/session.h"
#include "server/spin_budget.h"
#include "server/transfer.h"
#include "tensorwire/export.h"
#include "tensorwire/server.h"

TW_INTERNAL_BEGIN

namespace tw {

namespace server {
class Connection;
}

struct Server::Impl {
  // Members are destroyed in reverse order, and the order matters: a Connection can outlive the
  // io loop (held by a handler that never ran, such as a write to a client that stopped
  // reading), and its destructor uses the session table and counters and its stream on `io`.
  // So the io_context (with those handlers) goes first, then what the sessions share.
  ServerOptions opts;
  std::vector<std::string> backends;  // per device index (device_backends)
  // Per device index: a backend of that device with no tensors, made at start, which describes
  // the device (Backend::describe) for each Welcome, and its description then (dtypes, ops and
  // model do not change; the free memory is asked again, under probes_mu).
  std::vector<std::unique_ptr<Backend>> probes;
  std::vector<Backend::Description> described;
  std::mutex probes_mu;
  // Per device index: the budget of a device with memory of its own (described[i].host_memory
  // false: a GPU), 90% of what it had free at start; null for a device in host memory, whose
  // tensors count in totals.memory (--max-memory). Outlives every session (declared first).
  std::vector<std::unique_ptr<server::MemoryBudget>> device_memory;
  std::string server_id;
  int worker_count = 1;

  std::mutex sessions_mu;
  std::unordered_map<uint64_t, std::weak_ptr<server::Connection>> sessions;
  std::atomic<uint64_t> next_session{1};
  // Connections holding a session slot, within opts.max_sessions: each takes one from its
  // accept (so a peer still shaking hands counts) until it closes, or the handshake deadline
  // drops it.
  std::atomic<uint32_t> slots_taken{0};
  std::atomic<uint64_t> sessions_opened{0}, frames_in{0}, frames_out{0}, bytes_in{0}, bytes_out{0};
  server::SessionTotals totals;               // ops run, tensor bytes held
  std::atomic<int64_t> batches_in_flight{0};  // queued on a connection, not yet finished
  std::atomic<bool> stopping{false};
  // --spin-threads (server/spin_budget.h); set in start_server from the options.
  std::unique_ptr<server::SpinBudget> spin_budget;

  std::mutex stop_mu;
  std::condition_variable stop_cv;
  bool stopped = false;

  // One io_context per pool thread. A session lives on one shard (the one with the fewest
  // sessions when it connects): its stream's events, its execution and its replies all happen
  // on that shard's thread, so a request costs no hand-off between threads. A kernel still uses
  // every core through the backend's own intra-op pool.
  struct Shard {
    asio::io_context io{1};
    std::atomic<int> sessions{0};
  };
  std::vector<std::unique_ptr<Shard>> shards;
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> works;
  std::vector<std::thread> threads;                      // threads[i] runs shards[i]
  asio::io_context& io() { return shards.front()->io; }  // listeners and their timers
  Shard& least_loaded() {
    Shard* best = shards.front().get();
    for (auto& sh : shards)
      if (sh->sessions.load() < best->sessions.load()) best = sh.get();
    return *best;
  }
  std::vector<std::unique_ptr<net::Listener>> listeners;
  // Imports' pulls from other servers (transfer.h); after the shards, so destroyed before them:
  // its threads post their outcomes to the shards.
  std::unique_ptr<server::Puller> puller;
  // Ops and graph runs estimated long (long_work.h); like the puller, its threads post outcomes
  // to the shards. Null when the server runs long work in place (no --max-op-cost checks: see
  // start_server).
  std::unique_ptr<server::LongWork> long_work;
  // Collectives' parts (collective.h), and the rendezvous keys this server hosts for them; like
  // the puller, its threads post outcomes to the shards.
  std::unique_ptr<server::Collectives> collectives;
  server::StoreTable store;
  // Resumable sessions (resume.h): parked sessions by token; null when --resume-grace is 0.
  // Reset after the shards, whose connections park their sessions in it as they go.
  std::unique_ptr<server::ResumeRegistry> resume;
  // "server 9f3a (tcp://127.0.0.1:5000)": how a transfer's errors name this server.
  std::string self_name() const {
    return "server " + server_id +
           (listeners.empty() ? "" : " (" + listeners.front()->url().str() + ")");
  }
  bool tls_self_signed = false;  // the tls:// listeners present a pair generated at start
  // Last: it calls view() until it is destroyed, first.
  std::unique_ptr<server::MetricsEndpoint> metrics;

  // The threads that post to the shards end first; then the shards go, with the handlers their
  // loops never ran, while the collectives table is still there: a Connection such a handler
  // holds calls collectives->forget() as it is destroyed (ASan: use after free otherwise).
  ~Impl() {
    metrics.reset();
    puller.reset();
    long_work.reset();
    if (collectives) collectives->join();
    works.clear();
    shards.clear();
    resume.reset();
  }

  void accept(net::Listener& l);  // listeners.cc
  protocol::ServerStats snapshot(uint64_t asking_session);
  std::vector<protocol::DeviceInfo> device_infos() const;
  // The Welcome's description of each device (protocol >= kDeviceDescriptionVersion), its free
  // memory as of now: for a device in host memory, no more than --max-memory leaves.
  std::vector<protocol::DeviceDescription> device_descriptions();
  server::ServerView view();  // what a metrics scrape reads
  void do_stop();
  // Graceful shutdown (drain.cc): set once a drain starts; new handshakes are then refused.
  std::atomic<bool> draining{false};
  bool do_drain(std::chrono::milliseconds timeout);
  void wait_for_batches() const {
    while (batches_in_flight.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
};

namespace server {

// A shard's thread: runs `io` until it is stopped, spinning after work (shard.cc).
void run_shard(asio::io_context& io, std::chrono::microseconds spin, SpinBudget& budget);

// Sets up the tls:// identity and opens a listener on each of srv.opts.listen, into
// srv.listeners (listeners.cc). Call after the shards exist: the listeners run on the first.
Status open_listeners(Server::Impl& srv);
// Where Gloo listens for the other participants of a collective: the option, else the host of
// the first tcp:// or tls:// listener unless that is a wildcard, else loopback (listeners.cc).
std::string collective_host(const ServerOptions& opts,
                            const std::vector<std::unique_ptr<net::Listener>>& listeners);

}  // namespace server
}  // namespace tw
TW_INTERNAL_END
