// The compute server: an Asio io_context thread owns every socket; a fixed pool of worker threads
// executes sessions, each session a strand (a serial queue) on that pool, so tasks of one session
// run in submission order, sessions run in parallel, and no thread exists per session.
#include "tensorwire/server.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <asio.hpp>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "backend/registry.h"
#include "ir/infer.h"
#include "net/framing.h"
#include "net/url.h"
#include "protocol/messages.h"
#include "tensorwire/error.h"

namespace tw {

using Proto = asio::generic::stream_protocol;
namespace proto = protocol;

namespace {

std::string human_bytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  std::ostringstream os;
  os.precision(u ? 1 : 0);
  os << std::fixed << v << units[u];
  return os.str();
}

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

uint32_t all_compute_dtypes() {
  uint32_t m = 0;
  for (int i = 0; i < kNumDTypes; ++i) m |= 1u << i;
  return m;
}

class Connection;

}  // namespace

struct Server::Impl {
  // Members are destroyed in reverse order, and the order matters: a Connection can outlive the
  // io loop (held by a handler that never ran, such as a write to a client that stopped
  // reading), and its destructor uses the session table and counters, its strand on `workers`
  // and its socket on `io`. So the io_context (with those handlers) goes first, then the pool,
  // then what the sessions share.
  ServerOptions opts;
  std::vector<std::string> backends;  // per device index (device_backends)
  std::string server_id;
  int worker_count = 1;
  std::vector<net::Url> bound;

  std::mutex sessions_mu;
  std::unordered_map<uint64_t, std::weak_ptr<Connection>> sessions;
  std::atomic<uint64_t> next_session{1};
  std::atomic<uint64_t> sessions_opened{0}, ops_executed{0}, frames_in{0}, frames_out{0},
      bytes_in{0}, bytes_out{0};
  std::atomic<int64_t> bytes_held{0};
  std::atomic<int64_t> batches_in_flight{0};  // posted to a strand, not yet finished
  std::atomic<bool> stopping{false};

  std::mutex stop_mu;
  std::condition_variable stop_cv;
  bool stopped = false;

  std::unique_ptr<asio::thread_pool> workers;
  asio::io_context io;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::thread io_thread;
  std::vector<std::unique_ptr<asio::basic_socket_acceptor<Proto>>> acceptors;

  void accept(asio::basic_socket_acceptor<Proto>& acc, bool tcp);
  proto::ServerStats snapshot(uint64_t asking_session);
  std::vector<proto::DeviceInfo> device_infos() const {
    std::vector<proto::DeviceInfo> v;
    for (int i = 0; i < opts.devices; ++i) {
      v.push_back({backends[i] + ":" + std::to_string(i), backends[i], opts.session_memory_bytes,
                   all_compute_dtypes()});
    }
    return v;
  }
  void do_stop();
  void wait_for_batches() const {
    while (batches_in_flight.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
};

namespace {

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(Server::Impl& srv, Proto::socket sock)
      : srv_(srv), sock_(std::move(sock)), strand_(asio::make_strand(srv.workers->get_executor())) {}

  ~Connection() {
    // Last reference gone (socket closed, no task in flight): free the session's tensors.
    srv_.bytes_held.fetch_sub(static_cast<int64_t>(held_.load()));
    backend_.reset();
    if (id_) {
      std::lock_guard<std::mutex> lock(srv_.sessions_mu);
      srv_.sessions.erase(id_);
    }
  }

  void start() { read_header(); }
  uint64_t id() const { return id_; }
  uint64_t held() const { return held_.load(); }

  // io thread only.
  void close() {
    if (closed_) return;
    closed_ = true;
    asio::error_code ec;
    sock_.close(ec);
  }
  void close_when_flushed() {
    if (write_q_.empty() && !writing_) {
      close();
    } else {
      close_after_write_ = true;
    }
  }

 private:
  void read_header() {
    if (closed_ || srv_.stopping) return;
    auto self = shared_from_this();
    asio::async_read(sock_, asio::buffer(header_, 4), [self](asio::error_code ec, size_t) {
      if (ec) return self->close();
      self->on_header(net::frame_length(self->header_));
    });
  }

  void on_header(uint32_t len) {
    if (len > srv_.opts.max_frame_bytes) {
      // The payload cannot be read safely: answer and close this session only.
      send_error(resource_exhausted("frame of " + std::to_string(len) +
                                    " bytes exceeds the server's limit of " +
                                    std::to_string(srv_.opts.max_frame_bytes) +
                                    " bytes (tensorwire-server --max-frame)"));
      close_when_flushed();
      return;
    }
    if (len == 0) {
      send_error(data_loss("empty frame"));
      return read_header();
    }
    payload_ = Buffer::allocate(len);
    auto self = shared_from_this();
    asio::async_read(sock_, asio::buffer(payload_.data(), len), net::TransferAll(), [self, len](asio::error_code ec, size_t) {
      if (ec) return self->close();
      self->srv_.frames_in.fetch_add(1, std::memory_order_relaxed);
      self->srv_.bytes_in.fetch_add(len + 4, std::memory_order_relaxed);
      self->on_frame();
    });
  }

  void on_frame() {
    Buffer frame = std::move(payload_);
    if (!welcomed_) return on_hello(frame);
    auto tasks = std::make_shared<std::vector<proto::Task>>();
    Status decoded = proto::decode_batch(frame, *tasks);
    ++queued_;
    srv_.batches_in_flight.fetch_add(1);
    auto self = shared_from_this();
    asio::post(strand_, [self, tasks, decoded, frame]() mutable {
      self->run_tasks(*tasks);
      if (!decoded.ok()) {
        self->post_error(decoded.with_context("malformed batch (the tasks before it ran)"));
      }
      frame = Buffer();  // release the frame (its bytes may back uploaded tensors until dropped)
      asio::post(self->srv_.io, [self] { self->task_done(); });
      self->srv_.batches_in_flight.fetch_sub(1);
    });
    if (queued_ < srv_.opts.session_queue_depth) {
      read_header();
    } else {
      read_paused_ = true;  // backpressure: resume once the strand catches up
    }
  }

  void task_done() {
    --queued_;
    if (read_paused_ && queued_ < srv_.opts.session_queue_depth) {
      read_paused_ = false;
      read_header();
    }
  }

  void refuse(proto::RefuseReason reason, const std::string& message) {
    proto::OutFrame f;
    proto::encode_refuse({reason, message}, f);
    send(std::move(f));
    close_when_flushed();
  }

  void on_hello(const Buffer& frame) {
    auto hello = proto::decode_hello(frame);
    if (!hello.ok()) return refuse(proto::RefuseReason::kMalformed, hello.status().message());
    const proto::Hello& h = *hello;
    uint16_t lo = std::max(h.min_version, proto::kMinProtocolVersion);
    uint16_t hi = std::min(h.max_version, proto::kProtocolVersion);
    if (lo > hi) {
      return refuse(proto::RefuseReason::kBadVersion,
                    "client speaks protocol versions " + std::to_string(h.min_version) + ".." +
                        std::to_string(h.max_version) + ", this server " +
                        std::to_string(proto::kMinProtocolVersion) + ".." +
                        std::to_string(proto::kProtocolVersion) + "; upgrade the older side");
    }
    if (!srv_.opts.credential.empty() && h.credential != srv_.opts.credential) {
      return refuse(proto::RefuseReason::kUnauthorized, "bad or missing credential");
    }
    proto::Welcome w;
    w.version = hi;
    w.server_id = srv_.server_id;
    w.devices = srv_.device_infos();
    w.limits = {srv_.opts.max_frame_bytes, srv_.opts.session_memory_bytes, srv_.opts.max_sessions,
                srv_.opts.session_queue_depth};
    w.device_index = h.device_index;
    if (h.device_index == proto::kEnumerateOnly) {
      proto::OutFrame f;
      proto::encode_welcome(w, f);
      send(std::move(f));
      close_when_flushed();
      return;
    }
    if (h.device_index >= static_cast<uint32_t>(srv_.opts.devices)) {
      return refuse(proto::RefuseReason::kBadDeviceIndex,
                    "device index " + std::to_string(h.device_index) + " out of range: server " +
                        srv_.server_id + " hosts " + std::to_string(srv_.opts.devices) +
                        " device(s) (0.." + std::to_string(srv_.opts.devices - 1) + ")");
    }
    {
      std::lock_guard<std::mutex> lock(srv_.sessions_mu);
      if (srv_.sessions.size() >= srv_.opts.max_sessions) {
        return refuse(proto::RefuseReason::kServerBusy,
                      "server has reached its limit of " + std::to_string(srv_.opts.max_sessions) +
                          " sessions (tensorwire-server --max-sessions); try again later");
      }
      id_ = srv_.next_session.fetch_add(1);
      srv_.sessions[id_] = weak_from_this();
    }
    auto backend = make_backend(srv_.backends[h.device_index]);
    if (!backend.ok()) return refuse(proto::RefuseReason::kCannotHost, backend.status().message());
    backend_ = std::move(backend).value();
    srv_.sessions_opened.fetch_add(1);
    welcomed_ = true;
    w.session_id = id_;
    proto::OutFrame f;
    proto::encode_welcome(w, f);
    send(std::move(f));
    read_header();
  }

  // ---- strand: execution ----
  void run_tasks(std::vector<proto::Task>& tasks) {
    for (proto::Task& t : tasks) {
      switch (t.kind) {
        case proto::TaskKind::kOp: run_op(t.op); break;
        case proto::TaskKind::kRead: {
          proto::OutFrame f;
          proto::encode_read_result(t.request_id, backend_->read(t.id), f);
          post_send(std::move(f));
          break;
        }
        case proto::TaskKind::kSync: {
          proto::OutFrame f;
          proto::encode_sync_result(t.request_id, Status::OK(), f);
          post_send(std::move(f));
          break;
        }
        case proto::TaskKind::kDrop:
          for (auto id : t.ids) (void)backend_->drop(id);  // unknown ids: nothing to free
          break;
        case proto::TaskKind::kStats: {
          update_held();
          proto::OutFrame f;
          proto::encode_stats_result(t.request_id, srv_.snapshot(id_), f);
          post_send(std::move(f));
          break;
        }
      }
    }
    update_held();
  }

  void run_op(const ir::Op& op) {
    srv_.ops_executed.fetch_add(1, std::memory_order_relaxed);
    // Quota: refuse an op whose outputs would take the session past its memory limit.
    auto metas = ir::infer(op, [this](ir::TensorId id) { return backend_->meta(id); });
    if (metas.ok()) {
      uint64_t need = 0;
      for (auto& m : *metas) need += static_cast<uint64_t>(numel(m.shape)) * dtype_size(m.dtype);
      uint64_t have = backend_->bytes_held();
      if (have + need > srv_.opts.session_memory_bytes) {
        backend_->fail(op, resource_exhausted(
                               ir::op_name(op) + ": session memory quota exceeded: the session holds " +
                               human_bytes(have) + " and this op needs " + human_bytes(need) +
                               " more, over the quota of " +
                               human_bytes(srv_.opts.session_memory_bytes) +
                               "; free tensors (drop them) or raise --session-memory"));
        return;
      }
    }
    (void)backend_->execute(op);  // a failure is recorded in the op's outputs
  }

  void update_held() {
    uint64_t now = backend_ ? backend_->bytes_held() : 0;
    uint64_t before = held_.exchange(now);
    srv_.bytes_held.fetch_add(static_cast<int64_t>(now) - static_cast<int64_t>(before));
  }

  void post_error(const Status& s) {
    proto::OutFrame f;
    proto::encode_session_error(s, f);
    post_send(std::move(f));
  }

  void post_send(proto::OutFrame f) {
    auto self = shared_from_this();
    asio::post(srv_.io, [self, f = std::move(f)]() mutable { self->send(std::move(f)); });
  }

  // ---- io thread: writing ----
  void send_error(const Status& s) {
    proto::OutFrame f;
    proto::encode_session_error(s, f);
    send(std::move(f));
  }

  void send(proto::OutFrame f) {
    if (closed_) return;
    write_q_.push_back(std::move(f));
    if (!writing_) do_write();
  }

  void do_write() {
    proto::OutFrame& f = write_q_.front();
    uint64_t n = f.payload_size();
    net::frame_buffers(f, out_header_, bufs_);
    writing_ = true;
    auto self = shared_from_this();
    asio::async_write(sock_, bufs_, net::TransferAll(), [self, n](asio::error_code ec, size_t) {
      self->writing_ = false;
      self->write_q_.pop_front();
      if (ec) return self->close();
      self->srv_.frames_out.fetch_add(1, std::memory_order_relaxed);
      self->srv_.bytes_out.fetch_add(n + 4, std::memory_order_relaxed);
      if (!self->write_q_.empty()) return self->do_write();
      if (self->close_after_write_) self->close();
    });
  }

  Server::Impl& srv_;
  Proto::socket sock_;
  asio::strand<asio::thread_pool::executor_type> strand_;
  uint64_t id_ = 0;
  std::unique_ptr<Backend> backend_;  // strand only
  std::atomic<uint64_t> held_{0};
  // io thread state
  uint8_t header_[4] = {};
  uint8_t out_header_[4] = {};
  Buffer payload_;
  bool welcomed_ = false;
  bool closed_ = false;
  bool writing_ = false;
  bool close_after_write_ = false;
  bool read_paused_ = false;
  uint32_t queued_ = 0;
  std::deque<proto::OutFrame> write_q_;
  std::vector<asio::const_buffer> bufs_;
};

}  // namespace

proto::ServerStats Server::Impl::snapshot(uint64_t asking) {
  proto::ServerStats s;
  {
    std::lock_guard<std::mutex> lock(sessions_mu);
    s.sessions = static_cast<uint32_t>(sessions.size());
    for (auto& [id, w] : sessions) {
      if (auto c = w.lock()) {
        s.per_session_bytes.emplace_back(id, c->held());
        if (id == asking) s.session_bytes_held = c->held();
      }
    }
  }
  s.bytes_held = static_cast<uint64_t>(std::max<int64_t>(0, bytes_held.load()));
  s.ops_executed = ops_executed.load();
  s.frames_in = frames_in.load();
  s.frames_out = frames_out.load();
  s.bytes_in = bytes_in.load();
  s.bytes_out = bytes_out.load();
  s.sessions_opened = sessions_opened.load();
  return s;
}

void Server::Impl::accept(asio::basic_socket_acceptor<Proto>& acc, bool tcp) {
  acc.async_accept([this, &acc, tcp](asio::error_code ec, Proto::socket sock) {
    if (ec) {
      if (ec == asio::error::operation_aborted || stopping) return;
      // Out of descriptors and similar: keep serving existing sessions, retry shortly.
      auto t = std::make_shared<asio::steady_timer>(io, std::chrono::milliseconds(50));
      t->async_wait([this, &acc, tcp, t](asio::error_code) { accept(acc, tcp); });
      return;
    }
    if (tcp) {
      int one = 1;
      ::setsockopt(sock.native_handle(), IPPROTO_TCP, 1 /* TCP_NODELAY */, &one, sizeof one);
    }
    std::make_shared<Connection>(*this, std::move(sock))->start();
    accept(acc, tcp);
  });
}

void Server::Impl::do_stop() {
  {
    std::lock_guard<std::mutex> lock(stop_mu);
    if (stopped || stopping.exchange(true)) return;
  }
  // 1. Stop accepting and reading (the flag stops each session's read loop).
  asio::post(io, [this] {
    for (auto& a : acceptors) {
      asio::error_code ec;
      a->close(ec);
    }
  });
  // 2. Let queued work finish (a read under way when the flag was set may still deliver one
  //    more batch per session; it runs too). The pool keeps running: see step 4.
  wait_for_batches();
  // 3. Flush pending replies and close every session.
  asio::post(io, [this] {
    std::vector<std::shared_ptr<Connection>> live;
    {
      std::lock_guard<std::mutex> lock(sessions_mu);
      for (auto& [id, w] : sessions)
        if (auto c = w.lock()) live.push_back(c);
    }
    for (auto& c : live) c->close_when_flushed();
  });
  work.reset();
  // The loop ends by itself once every socket is closed; a client that never reads its replies
  // gets 2 seconds before the loop is stopped regardless.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (!io.stopped() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  io.stop();
  if (io_thread.joinable() && io_thread.get_id() != std::this_thread::get_id()) io_thread.join();
  // 4. Batches that arrived while sessions were closing finish (their replies are dropped),
  //    then the pool's threads end. Handlers the io loop never ran are destroyed with `io`,
  //    before the pool and the session table (see the members' order).
  wait_for_batches();
  workers->join();
  for (const auto& u : bound)
    if (u.scheme == net::Url::Scheme::kUnix) ::unlink(u.path.c_str());
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
  for (auto& u : impl_->bound) v.push_back(u.str());
  return v;
}

std::string Server::limits_summary() const {
  const ServerOptions& o = impl_->opts;
  std::ostringstream os;
  os << "devices=" << o.devices << " (" << o.backend << ") workers=" << impl_->worker_count
     << " max-sessions=" << o.max_sessions << " max-frame=" << human_bytes(o.max_frame_bytes)
     << " session-memory=" << human_bytes(o.session_memory_bytes)
     << " queue-depth=" << o.session_queue_depth;
  return os.str();
}

ServerStatsSnapshot Server::stats() const {
  proto::ServerStats s = impl_->snapshot(0);
  return {s.sessions, s.sessions_opened, s.bytes_held, s.ops_executed, s.frames_in, s.frames_out,
          s.bytes_in, s.bytes_out};
}

void Server::stop() { impl_->do_stop(); }

void Server::wait() {
  std::unique_lock<std::mutex> lock(impl_->stop_mu);
  impl_->stop_cv.wait(lock, [&] { return impl_->stopped; });
}

namespace {

Result<std::unique_ptr<Server>> start_server(ServerOptions opts) {
  if (opts.devices < 1) return invalid_argument("a server hosts at least 1 device, got " + std::to_string(opts.devices));
  if (opts.listen.empty()) return invalid_argument("no address to listen on");
  if (opts.session_queue_depth < 1) return invalid_argument("session queue depth must be >= 1");
  if (opts.max_frame_bytes < 1024) return invalid_argument("max frame size must be >= 1024 bytes");
  TW_ASSIGN_OR_RETURN(std::vector<std::string> backends, device_backends(opts));
  opts.devices = static_cast<int>(backends.size());
  auto impl = std::make_unique<Server::Impl>();
  impl->opts = opts;
  impl->backends = std::move(backends);
  std::random_device rd;
  std::ostringstream id;
  id << std::hex << (uint64_t{rd()} << 32 | rd());
  impl->server_id = id.str();
  impl->worker_count = opts.worker_threads > 0 ? opts.worker_threads
                                               : std::max(1u, std::thread::hardware_concurrency());
  try {
    impl->workers = std::make_unique<asio::thread_pool>(impl->worker_count);
    for (const std::string& text : opts.listen) {
      TW_ASSIGN_OR_RETURN(net::Url url, net::parse_url(text));
      auto acc = std::make_unique<asio::basic_socket_acceptor<Proto>>(impl->io);
      asio::error_code ec;
      if (url.scheme == net::Url::Scheme::kTcp) {
        asio::ip::tcp::resolver resolver(impl->io);
        auto results = resolver.resolve(url.host, std::to_string(url.port), ec);
        if (ec || results.empty()) {
          return invalid_argument("cannot resolve listen address " + text + ": " + ec.message());
        }
        asio::ip::tcp::endpoint ep = results.begin()->endpoint();
        Proto::endpoint gep(ep.data(), ep.size());
        acc->open(gep.protocol(), ec);
        if (!ec) acc->set_option(asio::socket_base::reuse_address(true), ec);
        if (!ec) acc->bind(gep, ec);
        if (!ec) acc->listen(asio::socket_base::max_listen_connections, ec);
        if (ec) return unavailable("cannot listen on " + text + ": " + ec.message());
        Proto::endpoint local = acc->local_endpoint(ec);
        asio::ip::tcp::endpoint tep;
        std::memcpy(tep.data(), local.data(), std::min<size_t>(local.size(), sizeof(sockaddr_in6)));
        url.port = tep.port();
        if (!url.is_loopback()) {
          std::fprintf(stderr,
                       "warning: listening on non-loopback address %s without authentication: "
                       "anyone who can reach it can run ops on this machine\n",
                       url.str().c_str());
        }
      } else {
        struct stat st;
        if (::stat(url.path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) ::unlink(url.path.c_str());
        asio::local::stream_protocol::endpoint lep(url.path);
        Proto::endpoint gep(lep);
        acc->open(gep.protocol(), ec);
        if (!ec) acc->bind(gep, ec);
        if (!ec) acc->listen(asio::socket_base::max_listen_connections, ec);
        if (ec) return unavailable("cannot listen on " + text + ": " + ec.message());
      }
      impl->bound.push_back(url);
      impl->acceptors.push_back(std::move(acc));
    }
    for (size_t i = 0; i < impl->acceptors.size(); ++i) {
      impl->accept(*impl->acceptors[i], impl->bound[i].scheme == net::Url::Scheme::kTcp);
    }
    impl->work.emplace(impl->io.get_executor());
    Server::Impl* raw = impl.get();
    impl->io_thread = std::thread([raw] { raw->io.run(); });
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

std::unique_ptr<Server> serve(ServerOptions options) { return unwrap(start_server(std::move(options))); }

std::unique_ptr<Server> serve(const Device& device, ServerOptions options) {
  switch (device.kind()) {
    case Device::Kind::kCpu:
      options.backend = "cpu";
      return serve(std::move(options));
    case Device::Kind::kTorch:
      options.backend = "torch";
      return serve(std::move(options));
    case Device::Kind::kRemote:
      throw Error("cannot serve " + device.str() +
                  ": a remote device only forwards ops to another server; a server hosts devices "
                  "that execute ops itself. Host tw::Device::cpu() here, or let clients connect "
                  "to that server directly");
    case Device::Kind::kCapture:
      throw Error("cannot serve " + device.str() +
                  ": a capture device records ops instead of executing them; host the device it "
                  "wraps instead");
  }
  throw Error("cannot serve device " + device.str() + ": unknown device kind");
}

}  // namespace tw
