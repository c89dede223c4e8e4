// The compute server's lifecycle: a fixed pool of threads, each running its own io_context (a
// shard), does both the streams and the execution. A connection lives on one shard; it is a
// serial queue of received batches: the thread that finishes reading a batch queues it, starts
// reading the next, and runs the queue itself (on its Session, session.h) if no thread is
// running it yet, so tasks of one session run in submission order, sessions run in parallel, no
// thread exists per session, and a request costs no hand-off between threads: the thread that
// read it runs it and writes the reply (see docs/remote.md, "Latency"). This file starts the
// server, stops it and reads its figures; the rest is in listeners.cc (addresses, TLS set-up,
// accepting), shard.cc (a shard's thread), connection.h (a client's connection) and
// handshake.cc (its Hello).
#include "tensorwire/server.h"

#include <algorithm>
#include <asio.hpp>
#include <atomic>
#include <chrono>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>
#include <utility>

#include "backend/registry.h"
#include "core/buffer.h"
#include "server/connection.h"
#include "server/server_impl.h"
#include "tensorwire/error.h"

namespace tw {

namespace proto = protocol;
using server::human_bytes;

namespace {

// The backend of each hosted device, in index order. options.backend names one backend for all
// options.devices devices, or one backend per device as a comma-separated list ("cpu,torch":
// device 0 runs on cpu, device 1 on torch), in which case options.devices must be 1 (its
// default) or the list's length. Every name must be a backend of this build.
Result<std::vector<std::string>> device_backends(const ServerOptions& opts) {
  std::vector<std::string> names;
  std::stringstream list(opts.backend);
  for (std::string name; std::getline(list, name, ',');) names.push_back(name);
  if (names.empty()) names.push_back(opts.backend);
  for (const std::string& name : names) TW_RETURN_NOT_OK(make_backend(name).status());
  if (names.size() == 1) return std::vector<std::string>(std::max(opts.devices, 1), names[0]);
  if (opts.devices != 1 && opts.devices != static_cast<int>(names.size())) {
    return invalid_argument("--backend " + opts.backend + " names " + std::to_string(names.size()) +
                            " devices but --devices is " + std::to_string(opts.devices) +
                            "; give one backend, or one per device");
  }
  return names;
}

}  // namespace

std::vector<proto::DeviceInfo> Server::Impl::device_infos() const {
  std::vector<proto::DeviceInfo> v;
  for (int i = 0; i < opts.devices; ++i) {
    // A backend with ordinals is named by its spec ("vulkan:0"); cpu and torch by the index.
    const bool spec = backends[i].find(':') != std::string::npos;
    v.push_back({spec ? backends[i] : backends[i] + ":" + std::to_string(i), backends[i],
                 opts.session_memory_bytes, described[i].dtype_mask});
  }
  return v;
}

std::vector<proto::DeviceDescription> Server::Impl::device_descriptions() {
  std::vector<proto::DeviceDescription> v;
  const uint64_t limit = totals.memory.limit();
  const uint64_t used = totals.memory.used() + totals.memory.pinned();
  const uint64_t budget_free = limit > used ? limit - used : 0;
  std::lock_guard<std::mutex> lock(probes_mu);
  for (size_t i = 0; i < probes.size(); ++i) {
    const Backend::Description d = probes[i]->describe();
    uint64_t free = std::min(d.memory_free, budget_free);
    if (const server::MemoryBudget* own = device_memory[i].get()) {
      free = std::min(d.memory_free, own->limit() - std::min(own->limit(), own->used()));
    }
    v.push_back({described[i].model, d.memory_total, free, d.host_memory, described[i].ops});
  }
  return v;
}

proto::ServerStats Server::Impl::snapshot(uint64_t asking) {
  proto::ServerStats s;
  // Released after the lock: a connection whose last other reference went meanwhile is
  // destroyed here, and its destructor takes sessions_mu.
  std::vector<std::shared_ptr<server::Connection>> live;
  {
    std::lock_guard<std::mutex> lock(sessions_mu);
    s.sessions = static_cast<uint32_t>(sessions.size());
    for (auto& [id, w] : sessions) {
      if (auto c = w.lock()) {
        s.per_session_bytes.emplace_back(id, c->held());
        if (id == asking) s.session_bytes_held = c->held();
        live.push_back(std::move(c));
      }
    }
  }
  s.bytes_held = static_cast<uint64_t>(std::max<int64_t>(0, totals.bytes_held.load()));
  s.ops_executed = totals.ops_executed.load();
  s.frames_in = frames_in.load();
  s.frames_out = frames_out.load();
  s.bytes_in = bytes_in.load();
  s.bytes_out = bytes_out.load();
  s.sessions_opened = sessions_opened.load();
  if (resume) s.parked.sessions = resume->parked_sessions();
  s.memory.max_memory_bytes = totals.memory.limit();
  s.memory.used_bytes = totals.memory.used() + totals.memory.pinned();
  return s;
}

server::ServerView Server::Impl::view() {
  server::ServerView v;
  v.stats = snapshot(0);
  v.devices = device_infos();
  v.batches_queued = batches_in_flight.load(std::memory_order_relaxed);
  v.spinning_threads = spin_budget->spinning();
  v.spin_threads_max = spin_budget->max();
  v.spin_refused = spin_budget->refused();
  std::vector<std::shared_ptr<server::Connection>>
      live;  // released after the lock (as in snapshot())
  std::lock_guard<std::mutex> lock(sessions_mu);
  for (auto& [id, w] : sessions) {
    if (auto c = w.lock()) {
      v.sessions.push_back(c->view());
      live.push_back(std::move(c));
    }
  }
  return v;
}

void Server::Impl::do_stop() {
  {
    std::lock_guard<std::mutex> lock(stop_mu);
    if (stopped || stopping.exchange(true)) return;
  }
  // 1. Stop accepting and reading (the flag stops each session's read loop). Closing a listener
  //    removes its Unix socket's file. The metrics endpoint closes too.
  if (metrics) metrics->stop();
  // Pulls under way end now (their imports fail and the sessions go on), not at their timeout.
  if (puller) puller->abort();
  if (collectives) collectives->stop();
  asio::post(io(), [this] {
    for (auto& l : listeners) l->close();
  });
  // 2. Let queued work finish (a read under way when the flag was set may still deliver one
  //    more batch per session; it runs too). The pool keeps running: see step 4.
  wait_for_batches();
  // 3. Flush pending replies and close every session.
  asio::post(io(), [this] {
    std::vector<std::shared_ptr<server::Connection>> live;
    {
      std::lock_guard<std::mutex> lock(sessions_mu);
      for (auto& [id, w] : sessions)
        if (auto c = w.lock()) live.push_back(c);
    }
    for (auto& c : live) c->close_when_flushed();
  });
  works.clear();
  // The loops end by themselves once every stream is closed; a client that never reads its
  // replies gets 2 seconds before the loops are stopped regardless.
  auto all_stopped = [this] {
    for (auto& sh : shards)
      if (!sh->io.stopped()) return false;
    return true;
  };
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (!all_stopped() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (auto& sh : shards) sh->io.stop();
  // 4. The pool's threads end (a batch being run finishes first). Handlers the loop never ran
  //    are destroyed with the shards, before the session table (see the members' order).
  for (std::thread& t : threads) {
    if (t.joinable() && t.get_id() != std::this_thread::get_id()) t.join();
  }
  {
    std::lock_guard<std::mutex> lock(stop_mu);
    stopped = true;
  }
  stop_cv.notify_all();
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() { stop(); }

std::vector<std::string> Server::urls() const {
  std::vector<std::string> v;
  for (auto& l : impl_->listeners) v.push_back(l->url().str());
  return v;
}

std::string Server::tls_fingerprint() const {
  for (auto& l : impl_->listeners)
    if (!l->tls_fingerprint().empty()) return l->tls_fingerprint();
  return {};
}

bool Server::tls_self_signed() const { return impl_->tls_self_signed; }

std::string Server::limits_summary() const {
  const ServerOptions& o = impl_->opts;
  std::ostringstream os;
  os << "devices=" << o.devices << " (" << o.backend << ") workers=" << impl_->worker_count
     << " max-sessions=" << o.max_sessions << " max-frame=" << human_bytes(o.max_frame_bytes)
     << " session-memory=" << human_bytes(o.session_memory_bytes)
     << " max-memory=" << human_bytes(impl_->totals.memory.limit())
     << " queue-depth=" << o.session_queue_depth << " max-graph-ops=" << o.max_graph_ops
     << " max-op-cost=" << o.max_op_cost << "s"
     << " handshake-timeout=" << o.handshake_timeout.count() / 1000.0 << "s";
  return os.str();
}

ServerStatsSnapshot Server::stats() const {
  proto::ServerStats s = impl_->snapshot(0);
  return {s.sessions,  s.sessions_opened, s.bytes_held, s.ops_executed,
          s.frames_in, s.frames_out,      s.bytes_in,   s.bytes_out};
}

std::string Server::metrics_url() const { return impl_->metrics ? impl_->metrics->url() : ""; }

void Server::stop() { impl_->do_stop(); }

void Server::wait() {
  std::unique_lock<std::mutex> lock(impl_->stop_mu);
  impl_->stop_cv.wait(lock, [&] { return impl_->stopped; });
}

namespace {

Result<std::unique_ptr<Server>> start_server(ServerOptions opts) {
  if (opts.devices < 1)
    return invalid_argument("a server hosts at least 1 device, got " +
                            std::to_string(opts.devices));
  if (opts.listen.empty()) return invalid_argument("no address to listen on");
  if (opts.session_queue_depth < 1) return invalid_argument("session queue depth must be >= 1");
  if (opts.max_frame_bytes < 1024) return invalid_argument("max frame size must be >= 1024 bytes");
  if (opts.handshake_timeout.count() <= 0)
    return invalid_argument("the handshake timeout must be > 0");
  if (!(opts.max_op_cost >= 0))
    return invalid_argument("--max-op-cost must be >= 0 seconds (0: no limit), got " +
                            std::to_string(opts.max_op_cost));
  TW_ASSIGN_OR_RETURN(std::vector<std::string> backends, device_backends(opts));
  opts.devices = static_cast<int>(backends.size());
  auto impl = std::make_unique<Server::Impl>();
  impl->opts = opts;
  impl->backends = std::move(backends);
  for (const std::string& spec : impl->backends) {
    TW_ASSIGN_OR_RETURN(std::unique_ptr<Backend> probe, make_backend(spec));
    impl->described.push_back(probe->describe());
    impl->probes.push_back(std::move(probe));
    const Backend::Description& d = impl->described.back();
    impl->device_memory.push_back(
        d.host_memory ? nullptr : std::make_unique<server::MemoryBudget>(d.memory_free / 10 * 9));
  }
  impl->totals.memory.set_limit(opts.max_memory_bytes ? opts.max_memory_bytes
                                                      : server::default_max_memory());
  if (!opts.store_dir.empty()) {
    TW_ASSIGN_OR_RETURN(
        std::unique_ptr<server::DiskStore> store,
        server::DiskStore::open(opts.store_dir,
                                opts.store_bytes ? opts.store_bytes : uint64_t{16} << 30,
                                opts.credential));
    impl->totals.content.set_store(std::move(store));
  }
  impl->totals.memory.set_pool(&BufferPool::global());
  impl->totals.memory.set_pinned(
      [caps = &impl->totals.capabilities] { return caps->pinned_bytes(); });
  std::random_device rd;
  std::ostringstream id;
  id << std::hex << (uint64_t{rd()} << 32 | rd());
  impl->server_id = id.str();
  impl->totals.capabilities.configure(impl->server_id, opts.capability_ttl);
  impl->worker_count = opts.worker_threads > 0 ? opts.worker_threads
                                               : std::max(1u, std::thread::hardware_concurrency());
  impl->spin_budget = std::make_unique<server::SpinBudget>(
      opts.spin_threads > 0 ? static_cast<int>(std::min<uint32_t>(opts.spin_threads, 4096))
                            : static_cast<int>(std::thread::hardware_concurrency()) - 1);
  try {
    for (int i = 0; i < impl->worker_count; ++i)
      impl->shards.push_back(std::make_unique<Server::Impl::Shard>());
    TW_RETURN_NOT_OK(server::open_listeners(*impl));
    impl->long_work = std::make_unique<server::LongWork>(impl->worker_count);
    impl->puller = std::make_unique<server::Puller>(server::Puller::kThreads, opts.transfer_timeout,
                                                    &impl->totals.metrics);
    impl->collectives = std::make_unique<server::Collectives>(
        opts.credential, server::collective_host(opts, impl->listeners), impl->self_name());
    if (opts.resume_grace.count() > 0) {
      server::Collectives* coll = impl->collectives.get();
      impl->resume = std::make_unique<server::ResumeRegistry>(
          opts.resume_grace, [coll](uint64_t id) { coll->forget(id); });
    }
    // The metrics endpoint last: its threads read what the lines above make (Impl::view(); make
    // tsan found the resume registry raced with a scrape that came early).
    if (!opts.metrics.empty()) {
      Server::Impl* srv = impl.get();
      TW_ASSIGN_OR_RETURN(impl->metrics,
                          server::MetricsEndpoint::start(opts.metrics, srv->totals.metrics,
                                                         [srv] { return srv->view(); }));
      impl->totals.metrics.enable_timing();
    }
    for (auto& l : impl->listeners) impl->accept(*l);
    for (auto& sh : impl->shards) impl->works.push_back(asio::make_work_guard(sh->io));
    for (auto& sh : impl->shards) {
      asio::io_context* io = &sh->io;
      const auto spin = std::chrono::microseconds(opts.spin_us);
      server::SpinBudget* budget = impl->spin_budget.get();
      impl->threads.emplace_back([io, spin, budget] { server::run_shard(*io, spin, *budget); });
    }
  } catch (const std::system_error& e) {
    return unavailable(std::string("cannot start the server: ") + e.what());
  }
  return std::make_unique<Server>(std::move(impl));
}

std::unique_ptr<Server> unwrap(Result<std::unique_ptr<Server>> r) {
  if (!r.ok()) throw Error(r.status().message());
  return std::move(r).value();
}

}  // namespace

std::unique_ptr<Server> serve(ServerOptions options) {
  return unwrap(start_server(std::move(options)));
}

}  // namespace tw
