// The --metrics endpoint: prometheus-cpp builds and serialises the exposition (its
// MetricFamily/ClientMetric types and TextSerializer) and cpp-httplib serves it, with the
// dashboard page, on threads of its own. A scrape reads the counters of metrics.h and the
// sessions the server lists; it never takes a lock a session's execution takes.
#include "server/metrics.h"

#include <httplib.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include <chrono>
#include <cstdio>
#include <deque>
#include <mutex>
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <limits>
#include <thread>

#include "net/url.h"
#include "server/dashboard_html.h"

namespace tw::server {

namespace {

namespace prom = prometheus;

// Every op code of this build, with its struct name (the histogram's `op` label).
struct OpSlotName {
  ir::OpCode code;
  const char* name;
};
#define TW_METRICS_OP_ENTRY(Name, code, since) OpSlotName{ir::OpCode::k##Name, #Name},
constexpr OpSlotName kOps[] = {TW_OP_LIST(TW_METRICS_OP_ENTRY)};
#undef TW_METRICS_OP_ENTRY

#define TW_ERROR_KIND_LABEL(e, label, help) label,
constexpr const char* kErrorLabels[] = {TW_SERVER_ERROR_KINDS(TW_ERROR_KIND_LABEL)};
#undef TW_ERROR_KIND_LABEL

// The exposition, family by family; a family's name, type and help are written once here.
class Exposition {
 public:
  prom::MetricFamily& family(std::string name, prom::MetricType type, std::string help) {
    families_.push_back({std::move(name), std::move(help), type, {}});
    return families_.back();
  }
  static void add(prom::MetricFamily& f, double value,
                  std::vector<prom::ClientMetric::Label> labels = {}) {
    prom::ClientMetric m;
    m.label = std::move(labels);
    if (f.type == prom::MetricType::Counter)
      m.counter.value = value;
    else
      m.gauge.value = value;
    f.metric.push_back(std::move(m));
  }
  void scalar(std::string name, prom::MetricType type, std::string help, double value) {
    add(family(std::move(name), type, std::move(help)), value);
  }
  void by_direction(std::string name, std::string help, uint64_t in, uint64_t out) {
    prom::MetricFamily& f = family(std::move(name), prom::MetricType::Counter, std::move(help));
    add(f, static_cast<double>(in), {{"direction", "in"}});
    add(f, static_cast<double>(out), {{"direction", "out"}});
  }
  std::string text() const {
    return prom::TextSerializer().Serialize(
        std::vector<prom::MetricFamily>(families_.begin(), families_.end()));
  }

 private:
  std::deque<prom::MetricFamily> families_;  // stable references while families are added
};

std::string to_s(uint64_t v) { return std::to_string(v); }

}  // namespace

const char* error_kind_label(ErrorKind k) { return kErrorLabels[static_cast<size_t>(k)]; }

ErrorKind error_kind_of(protocol::RefuseReason r) {
  using R = protocol::RefuseReason;
  switch (r) {
    case R::kBadVersion: return ErrorKind::kRefusedBadVersion;
    case R::kBadDeviceIndex: return ErrorKind::kRefusedBadDevice;
    case R::kUnauthorized: return ErrorKind::kRefusedUnauthorized;
    case R::kServerBusy:
    case R::kDraining: return ErrorKind::kRefusedBusy;  // not taking sessions now
    case R::kCannotResume: return ErrorKind::kRefusedMalformed;
    case R::kMalformed: return ErrorKind::kRefusedMalformed;
    case R::kCannotHost: return ErrorKind::kRefusedCannotHost;
  }
  return ErrorKind::kRefusedMalformed;
}

void OpClock::calibrate() {
  static std::once_flag once;
  std::call_once(once, [] {
#if defined(__x86_64__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    // CPUID 0x80000007, EDX bit 8: the TSC runs at a constant rate in every power state.
    if (!__get_cpuid(0x80000007, &a, &b, &c, &d) || !(d & (1u << 8))) return;
    auto t0 = std::chrono::steady_clock::now();
    uint64_t k0 = __rdtsc();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    auto t1 = std::chrono::steady_clock::now();
    uint64_t k1 = __rdtsc();
    if (k1 <= k0) return;
    ns_per_tick_ =
        static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count()) /
        static_cast<double>(k1 - k0);
    use_tsc_ = true;
#endif
  });
}

ServerMetrics::Latency ServerMetrics::latency(ir::OpCode code) const {
  Latency l;
  size_t slot = static_cast<size_t>(code);
  if (slot >= latency_.size()) return l;
  const Slot& s = latency_[slot];
  // The count is the buckets' sum, so that the +Inf bucket equals it even while ops run.
  for (size_t b = 0; b < kLatencyBuckets; ++b) {
    l.buckets[b] = s.buckets[b].load(std::memory_order_relaxed);
    l.count += l.buckets[b];
  }
  l.sum_ns = s.sum_ns.load(std::memory_order_relaxed);
  return l;
}

std::string metrics_text(const ServerView& v, const ServerMetrics& m) {
  using T = prom::MetricType;
  const protocol::ServerStats& s = v.stats;
  Exposition e;
  e.scalar("tensorwire_sessions", T::Gauge, "Sessions open now", s.sessions);
  e.scalar("tensorwire_sessions_opened_total", T::Counter,
           "Sessions opened since the server started", static_cast<double>(s.sessions_opened));
  e.scalar("tensorwire_ops_total", T::Counter, "Ops executed, all sessions",
           static_cast<double>(s.ops_executed));
  e.by_direction("tensorwire_frames_total", "Frames received (in) and sent (out)", s.frames_in,
                 s.frames_out);
  e.by_direction("tensorwire_bytes_total",
                 "Bytes received (in) and sent (out), frame headers included", s.bytes_in,
                 s.bytes_out);
  e.scalar("tensorwire_queued_batches", T::Gauge,
           "Batches received and not yet finished, all sessions",
           static_cast<double>(v.batches_queued));
  e.scalar("tensorwire_memory_bytes", T::Gauge, "Tensor bytes held by all sessions",
           static_cast<double>(s.bytes_held));
  e.scalar("tensorwire_spinning_threads", T::Gauge,
           "Server threads polling for work without sleeping now (--spin-us)",
           static_cast<double>(v.spinning_threads));
  e.scalar("tensorwire_spin_threads_max", T::Gauge,
           "Server threads that may spin at once (--spin-threads)",
           static_cast<double>(v.spin_threads_max));
  e.scalar("tensorwire_spin_refused_total", T::Counter,
           "Times a server thread would have spun and found --spin-threads spinning already",
           static_cast<double>(v.spin_refused));

  prom::MetricFamily& dev =
      e.family("tensorwire_device_session_memory_limit_bytes", T::Gauge,
               "Tensor bytes a session on the device may hold, per hosted device");
  for (size_t i = 0; i < v.devices.size(); ++i) {
    Exposition::add(
        dev, static_cast<double>(v.devices[i].memory_bytes),
        {{"device", to_s(i)}, {"name", v.devices[i].name}, {"backend", v.devices[i].backend}});
  }

  prom::MetricFamily& mem =
      e.family("tensorwire_session_memory_bytes", T::Gauge, "Tensor bytes a session holds");
  prom::MetricFamily& ops =
      e.family("tensorwire_session_ops_total", T::Counter, "Ops a session executed");
  prom::MetricFamily& queued = e.family("tensorwire_session_queued_batches", T::Gauge,
                                        "Batches a session has received and not finished");
  for (const SessionView& sv : v.sessions) {
    std::vector<prom::ClientMetric::Label> labels = {{"device", to_s(sv.device)},
                                                     {"session", to_s(sv.id)}};
    Exposition::add(mem, static_cast<double>(sv.bytes_held), labels);
    Exposition::add(ops, static_cast<double>(sv.ops), labels);
    Exposition::add(queued, sv.queued, labels);
  }

  prom::MetricFamily& lat =
      e.family("tensorwire_op_latency_seconds", T::Histogram,
               "Time to execute an op on the server, by op struct (--metrics only)");
  for (const OpSlotName& op : kOps) {
    ServerMetrics::Latency l = m.latency(op.code);
    if (l.count == 0)
      continue;  // an op never run has no series (a histogram per op would be noise)
    prom::ClientMetric c;
    c.label = {{"op", op.name}};
    c.histogram.sample_count = l.count;
    c.histogram.sample_sum = static_cast<double>(l.sum_ns) * 1e-9;
    uint64_t cumulative = 0;
    for (size_t b = 0; b < kLatencyBuckets; ++b) {
      cumulative += l.buckets[b];
      double bound = b < kLatencyBoundsNs.size() ? static_cast<double>(kLatencyBoundsNs[b]) * 1e-9
                                                 : std::numeric_limits<double>::infinity();
      c.histogram.bucket.push_back({cumulative, bound});
    }
    lat.metric.push_back(std::move(c));
  }

  prom::MetricFamily& err = e.family("tensorwire_errors_total", T::Counter, "Errors, by kind");
  for (int k = 0; k < kNumErrorKinds; ++k) {
    Exposition::add(err, static_cast<double>(m.errors(static_cast<ErrorKind>(k))),
                    {{"kind", kErrorLabels[k]}});
  }
  e.scalar("tensorwire_graphs_registered_total", T::Counter,
           "Graphs registered by sessions (refused ones not counted)",
           static_cast<double>(m.graphs_registered()));
  e.scalar("tensorwire_graph_runs_total", T::Counter, "Runs of registered graphs",
           static_cast<double>(m.graph_runs()));
  e.by_direction("tensorwire_transfers_total",
                 "Tensors moved between servers: received (in), sent (out)",
                 m.transfers(Direction::kIn), m.transfers(Direction::kOut));
  e.by_direction("tensorwire_transfer_bytes_total", "Tensor bytes moved between servers",
                 m.transfer_bytes(Direction::kIn), m.transfer_bytes(Direction::kOut));
  e.scalar("tensorwire_pull_retries_total", T::Counter,
           "Pulls of a tensor from another server tried again after their connection was cut",
           static_cast<double>(m.pull_retries()));
  e.scalar("tensorwire_pull_bytes_kept_total", T::Counter,
           "Tensor bytes a retried pull had received and kept (the retry asked for the rest)",
           static_cast<double>(m.pull_bytes_kept()));
  e.scalar("tensorwire_pull_bytes_refetched_total", T::Counter,
           "Tensor bytes a retried pull had received and fetched again (a source before "
           "protocol 11 sends the tensor whole)",
           static_cast<double>(m.pull_bytes_refetched()));
  return e.text();
}

struct MetricsEndpoint::Impl {
  httplib::Server http;
  std::thread thread;
};

MetricsEndpoint::MetricsEndpoint(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MetricsEndpoint::~MetricsEndpoint() { stop(); }

void MetricsEndpoint::stop() {
  if (!impl_->thread.joinable()) return;
  impl_->http.stop();
  impl_->thread.join();
}

Result<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::start(const std::string& text,
                                                                const ServerMetrics& m,
                                                                std::function<ServerView()> view) {
  TW_ASSIGN_OR_RETURN(net::Url url, net::parse_url(text));
  if (url.scheme != net::Url::Scheme::kTcp) {
    return invalid_argument("--metrics " + text +
                            ": the metrics endpoint listens on tcp://host:port only");
  }
  auto impl = std::make_unique<Impl>();
  // Two threads: a scraper and a dashboard at once; a scrape takes well under a millisecond.
  constexpr size_t kHttpThreads = 2;
  impl->http.new_task_queue = [] { return new httplib::ThreadPool(kHttpThreads); };
  impl->http.Get("/metrics", [&m, view](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_text(view(), m), "text/plain; version=0.0.4; charset=utf-8");
  });
  impl->http.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(kDashboardHtml.data(), kDashboardHtml.size(), "text/html; charset=utf-8");
  });
  int port = url.port;
  if (port == 0) {
    port = impl->http.bind_to_any_port(url.host);
  } else if (!impl->http.bind_to_port(url.host, port)) {
    port = -1;
  }
  if (port <= 0) {
    return unavailable("--metrics " + text +
                       ": cannot listen there (address in use, or not an address of this host)");
  }
  httplib::Server* http = &impl->http;
  impl->thread = std::thread([http] { http->listen_after_bind(); });
  // stop() is a no-op until the loop runs, so wait for it: stopping right after starting must
  // work. (Bounded: a loop that ended at once, which a bound socket does not do, must not hang.)
  for (int i = 0; i < 1000 && !impl->http.is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::unique_ptr<MetricsEndpoint> e(new MetricsEndpoint(std::move(impl)));
  e->url_ = "http://" + url.host + ":" + std::to_string(port);
  if (!url.is_loopback()) {
    std::fprintf(stderr,
                 "warning: metrics endpoint %s on a non-loopback address: it has no "
                 "authentication, and shows every session's figures to anyone who can reach it\n",
                 e->url_.c_str());
  }
  return e;
}

}  // namespace tw::server
