// The server's counters, read by `tensorwire-server --metrics` (Prometheus text at /metrics and
// the dashboard at /). They live where the events happen and are written with relaxed atomics
// only: no lock, no allocation, no map lookup on the path of an op, so they stay on in every
// server. The one cost that depends on --metrics is timing each op (OpTimer: a clock read per
// op), which is off unless an endpoint serves the figures.
#pragma once
#include <algorithm>
#include <array>
#include <atomic>
#include <bitset>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tensorwire/export.h"
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include "core/status.h"
#include "ir/ops.h"
#include "protocol/messages.h"

TW_INTERNAL_BEGIN

namespace tw::server {

// Upper bounds of the op latency histogram's buckets, in nanoseconds (a last bucket, +Inf,
// takes the rest): from a tiny elementwise op (about a microsecond) to a large convolution.
inline constexpr std::array<uint64_t, 18> kLatencyBoundsNs = {
    1'000,      2'000,      5'000,      10'000,      20'000,      50'000,
    100'000,    200'000,    500'000,    1'000'000,   2'000'000,   5'000'000,
    10'000'000, 20'000'000, 50'000'000, 100'000'000, 500'000'000, 1'000'000'000};
inline constexpr size_t kLatencyBuckets = kLatencyBoundsNs.size() + 1;
// Ops faster than this are timed one run in several (OpSampling).
inline constexpr uint64_t kFastOpNs = 2'000;

// One slot per wire op code (codes are append-only and small, so an array indexed by code is
// the lookup: no map, no lock).
#define TW_METRICS_MAX_CODE(Name, code, since) std::max(code,
#define TW_METRICS_CLOSE(Name, code, since) )
inline constexpr int kOpCodeSlots =
    TW_OP_LIST(TW_METRICS_MAX_CODE) 0 TW_OP_LIST(TW_METRICS_CLOSE) + 1;
#undef TW_METRICS_MAX_CODE
#undef TW_METRICS_CLOSE

// Errors by kind, declared once: (enumerator, label value, what it counts).
#define TW_SERVER_ERROR_KINDS(X)                                                               \
  X(kOpFailed, "op_failed", "an op failed (its outputs are poisoned with the error)")          \
  X(kOverQuota, "over_quota", "an op was refused by the session's memory quota")               \
  X(kOverCost, "over_cost", "an op or graph was refused over --max-op-cost")                   \
  X(kReadFailed, "read_failed", "a read answered an error")                                    \
  X(kMalformedBatch, "malformed_batch", "a batch did not decode")                              \
  X(kFrameTooLarge, "frame_too_large", "a frame exceeded --max-frame; the session was closed") \
  X(kRefusedBadVersion, "refused_bad_version", "a handshake was refused: no common version")   \
  X(kRefusedBadDevice, "refused_bad_device_index", "a handshake named a device not hosted")    \
  X(kRefusedUnauthorized, "refused_unauthorized", "a handshake had a wrong credential")        \
  X(kRefusedBusy, "refused_server_busy", "a handshake was refused at --max-sessions")          \
  X(kRefusedMalformed, "refused_malformed", "a hello did not decode")                          \
  X(kRefusedCannotHost, "refused_cannot_host", "the device's backend could not be opened")

enum class ErrorKind : uint8_t {
#define TW_ERROR_KIND_ENUM(e, label, help) e,
  TW_SERVER_ERROR_KINDS(TW_ERROR_KIND_ENUM)
#undef TW_ERROR_KIND_ENUM
};
#define TW_ERROR_KIND_COUNT(e, label, help) +1
inline constexpr int kNumErrorKinds = 0 TW_SERVER_ERROR_KINDS(TW_ERROR_KIND_COUNT);
#undef TW_ERROR_KIND_COUNT
const char* error_kind_label(ErrorKind k);
ErrorKind error_kind_of(protocol::RefuseReason r);

enum class Direction : uint8_t { kIn = 0, kOut = 1 };

// The clock of op timing. Reading it is most of what --metrics costs per op, and on a VM
// steady_clock::now() costs about twice the TSC (44 ns against 19 ns measured here), so where the
// CPU has an invariant TSC it is read directly and converted at a rate measured once
// (calibrate()); elsewhere ticks are steady_clock nanoseconds.
class OpClock {
 public:
  static uint64_t ticks() {
#if defined(__x86_64__)
    if (use_tsc_) return __rdtsc();
#endif
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now().time_since_epoch())
                                     .count());
  }
  static uint64_t to_ns(uint64_t ticks) {
    return static_cast<uint64_t>(static_cast<double>(ticks) * ns_per_tick_);
  }
  static uint64_t from_ns(uint64_t ns) {
    return static_cast<uint64_t>(static_cast<double>(ns) / ns_per_tick_);
  }
  // Decides between TSC and steady_clock and measures the TSC's rate (blocks about 20 ms).
  // Call before any ticks() are compared, once per process (ServerMetrics::enable_timing).
  static void calibrate();

 private:
  static inline bool use_tsc_ = false;
  static inline double ns_per_tick_ = 1.0;
};

// Server-wide counters. Every writer is a relaxed atomic add; readers (a scrape) see each
// counter on its own, which is all a monotonic counter needs.
class ServerMetrics {
 public:
  struct Latency {
    uint64_t count = 0;
    uint64_t sum_ns = 0;
    std::array<uint64_t, kLatencyBuckets> buckets{};  // not cumulative
  };

  // Op timing: on only while an endpoint serves the figures (see the file comment).
  void enable_timing() {
    OpClock::calibrate();
    for (size_t i = 0; i < kLatencyBoundsNs.size(); ++i) {
      bounds_ticks_[i] = OpClock::from_ns(kLatencyBoundsNs[i]);
    }
    fast_ticks_ = OpClock::from_ns(kFastOpNs);
    timing_.store(true, std::memory_order_release);  // publishes the calibration
  }
  bool timing() const { return timing_.load(std::memory_order_acquire); }
  uint64_t fast_ticks() const { return fast_ticks_; }  // kFastOpNs in ticks

  // The histogram bucket of a latency.
  // The bucket of a time in OpClock ticks (after enable_timing()), as bucket_of() of its ns.
  size_t bucket_of_ticks(uint64_t ticks) const {
    return static_cast<size_t>(std::lower_bound(bounds_ticks_.begin(), bounds_ticks_.end(), ticks) -
                               bounds_ticks_.begin());
  }
  static size_t bucket_of(uint64_t ns) {
    return static_cast<size_t>(
        std::lower_bound(kLatencyBoundsNs.begin(), kLatencyBoundsNs.end(), ns) -
        kLatencyBoundsNs.begin());
  }
  // One op of `code` took `ns`.
  void op_ran(ir::OpCode code, uint64_t ns) {
    std::array<uint32_t, kLatencyBuckets> one{};
    one[bucket_of(ns)] = 1;
    add_latency(static_cast<size_t>(code), one, ns);
  }
  // Ops of the op code `slot`: `buckets[b]` of them in bucket b, taking `sum_ns` in all.
  void add_latency(size_t slot, const std::array<uint32_t, kLatencyBuckets>& buckets,
                   uint64_t sum_ns) {
    if (slot >= latency_.size()) return;
    Slot& s = latency_[slot];
    for (size_t b = 0; b < kLatencyBuckets; ++b) {
      if (buckets[b])
        s.buckets[b].fetch_add(buckets[b], std::memory_order_relaxed);  // (count: their sum)
    }
    s.sum_ns.fetch_add(sum_ns, std::memory_order_relaxed);
  }
  void error(ErrorKind k) {
    errors_[static_cast<size_t>(k)].fetch_add(1, std::memory_order_relaxed);
  }

  // A failed op's status, counted (op_failed or over_quota).
  Status count_op(Status st) {
    if (!st.ok()) {
      error(st.code() == StatusCode::kResourceExhausted ? ErrorKind::kOverQuota
                                                        : ErrorKind::kOpFailed);
    }
    return st;
  }
  // A read's result, its failure counted.
  template <class T>
  T counted_read(T r) {
    if (!r.ok()) error(ErrorKind::kReadFailed);
    return r;
  }

  // Graphs (Session::register_graph counts a registration that succeeded, Session::run_graph a
  // run of a graph the session holds) and tensor moves between servers (bytes of each move in
  // or out).
  void graph_registered() { graphs_registered_.fetch_add(1, std::memory_order_relaxed); }
  void graph_run() { graph_runs_.fetch_add(1, std::memory_order_relaxed); }
  void transfer(Direction d, uint64_t bytes) {
    transfers_[static_cast<size_t>(d)].fetch_add(1, std::memory_order_relaxed);
    transfer_bytes_[static_cast<size_t>(d)].fetch_add(bytes, std::memory_order_relaxed);
  }

  // A pull tried again after its connection was cut (Puller): `kept` bytes it had received stay
  // (protocol 11's FetchFrom asks only for the rest), `refetched` ones are fetched again.
  void pull_retried(uint64_t kept, uint64_t refetched) {
    pull_retries_.fetch_add(1, std::memory_order_relaxed);
    pull_bytes_kept_.fetch_add(kept, std::memory_order_relaxed);
    pull_bytes_refetched_.fetch_add(refetched, std::memory_order_relaxed);
  }

  // ---- reading (a scrape) ----
  Latency latency(ir::OpCode code) const;
  uint64_t errors(ErrorKind k) const {
    return errors_[static_cast<size_t>(k)].load(std::memory_order_relaxed);
  }
  uint64_t graphs_registered() const { return graphs_registered_.load(std::memory_order_relaxed); }
  uint64_t graph_runs() const { return graph_runs_.load(std::memory_order_relaxed); }
  uint64_t transfers(Direction d) const {
    return transfers_[static_cast<size_t>(d)].load(std::memory_order_relaxed);
  }
  uint64_t transfer_bytes(Direction d) const {
    return transfer_bytes_[static_cast<size_t>(d)].load(std::memory_order_relaxed);
  }
  uint64_t pull_retries() const { return pull_retries_.load(std::memory_order_relaxed); }
  uint64_t pull_bytes_kept() const { return pull_bytes_kept_.load(std::memory_order_relaxed); }
  uint64_t pull_bytes_refetched() const {
    return pull_bytes_refetched_.load(std::memory_order_relaxed);
  }

 private:
  // Own cache lines: sessions on different threads running different ops do not share one.
  struct alignas(64) Slot {
    std::atomic<uint64_t> sum_ns{0};
    std::array<std::atomic<uint64_t>, kLatencyBuckets> buckets{};
  };
  std::atomic<bool> timing_{false};
  std::array<uint64_t, kLatencyBoundsNs.size()> bounds_ticks_{};  // kLatencyBoundsNs in ticks
  uint64_t fast_ticks_ = 0;
  std::array<Slot, kOpCodeSlots> latency_{};
  std::array<std::atomic<uint64_t>, kNumErrorKinds> errors_{};
  std::atomic<uint64_t> graphs_registered_{0}, graph_runs_{0};
  std::array<std::atomic<uint64_t>, 2> transfers_{}, transfer_bytes_{};
  std::atomic<uint64_t> pull_retries_{0}, pull_bytes_kept_{0}, pull_bytes_refetched_{0};
};

// Which fast ops a session times (OpTimer), kept from batch to batch. An op kind whose last
// timed run took under kFastOpNs is timed once in kEvery runs; each run between is counted in
// the bucket, and with the time, of the last timed one. A clock read (the TSC: 7.5 ns on the
// build VM) and its bookkeeping were 1.7% of a stream of 1-element adds (~620 ns an op on the
// server), more than --metrics may cost; ops over kFastOpNs are timed every time (a clock read
// is then < 0.4% of them). The counts stay exact; for fast kinds the histogram's shape and sum
// are those of a one-in-kEvery sample.
struct OpSampling {
  static constexpr uint32_t kEvery = 16;
  struct Kind {
    uint32_t skip = 0;    // runs left to count without timing
    uint32_t bucket = 0;  // the last timed run's bucket and ticks
    uint64_t ticks = 0;
  };
  std::array<Kind, kOpCodeSlots> kinds{};
};

// Times the ops of one batch as a Session runs them, while timing() is on. Per op it costs one
// clock read (one op's end is the next one's start; a task of another kind between two ops
// restarts the clock, interrupt()) and a few plain adds, or, for an op that `sampling` leaves
// untimed, the adds alone: the histogram is kept here, for the op codes the batch used, and
// added to the server's atomics when a task of another kind comes (before the reply it may
// send) and at the batch's end.
class OpTimer {
 public:
  explicit OpTimer(ServerMetrics& m, OpSampling* sampling = nullptr)
      : m_(m), on_(m.timing()), sampling_(sampling) {}
  ~OpTimer() { flush(); }
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

  // Runs `op` by `execute()` (returning its Status), timed, its failure counted.
  template <class Execute>
  Status run(const ir::Op& op, Execute&& execute) {
    if (!on_) return m_.count_op(execute());
    const size_t slot = slot_of(op);
    OpSampling::Kind* kind = sampling_ && slot < kOpCodeSlots ? &sampling_->kinds[slot] : nullptr;
    if (kind && kind->skip > 0) {
      --kind->skip;
      Status st = execute();
      running_ = false;  // its end was not read: the next timed op reads its own start
      add(slot, kind->bucket, kind->ticks);
      return m_.count_op(std::move(st));
    }
    if (!running_) start_ = OpClock::ticks();
    Status st = execute();
    uint64_t end = OpClock::ticks();
    const uint64_t ticks = end - start_;  // (converted to ns once per batch, in flush())
    start_ = end;
    running_ = true;
    if (slot < kOpCodeSlots) {
      const size_t bucket = m_.bucket_of_ticks(ticks);
      add(slot, bucket, ticks);
      if (kind) {
        kind->bucket = static_cast<uint32_t>(bucket);
        kind->ticks = ticks;
        kind->skip = ticks < m_.fast_ticks() ? OpSampling::kEvery - 1 : 0;
      }
    }
    return m_.count_op(std::move(st));
  }
  // A task of another kind comes: the next op's time starts when it does, and what was timed
  // so far is handed over (a client that saw the reply sees the ops' latencies).
  void interrupt() {
    running_ = false;
    flush();
  }
  // Hands the latencies so far to the server's counters (the destructor does).
  void flush() {
    if (used_.none()) return;
    for (size_t slot = 0; slot < kOpCodeSlots; ++slot) {
      if (used_.test(slot))
        m_.add_latency(slot, local_[slot].buckets, OpClock::to_ns(local_[slot].sum_ticks));
    }
    used_.reset();
  }

 private:
  void add(size_t slot, size_t bucket, uint64_t ticks) {
    Local& l = local_[slot];
    if (!used_.test(slot)) {
      used_.set(slot);
      l = Local{};
    }
    ++l.buckets[bucket];
    l.sum_ticks += ticks;
  }
  // An op's code without a call: the variant's alternatives are TW_OP_LIST in order.
  static size_t slot_of(const ir::Op& op) {
#define TW_OP_TIMER_CODE(Name, code, since) code,
    static constexpr uint16_t kCodeOfIndex[] = {TW_OP_LIST(TW_OP_TIMER_CODE)};
#undef TW_OP_TIMER_CODE
    return op.index() < std::size(kCodeOfIndex) ? kCodeOfIndex[op.index()] : kOpCodeSlots;
  }
  // No initialisers: a slot is zeroed when a batch first uses it, not all at every batch.
  struct Local {
    std::array<uint32_t, kLatencyBuckets> buckets;  // a batch holds far fewer than 2^32 ops
    uint64_t sum_ticks;
  };

  ServerMetrics& m_;
  const bool on_;
  OpSampling* const sampling_;
  bool running_ = false;
  uint64_t start_ = 0;              // OpClock ticks
  std::bitset<kOpCodeSlots> used_;  // the slots of local_ this batch has written (and zeroed)
  std::array<Local, kOpCodeSlots> local_;
};

// What a scrape reads of one session (server.cc fills it from the connection and its Session).
struct SessionView {
  uint64_t id = 0;
  uint32_t device = 0;
  uint64_t bytes_held = 0;
  uint64_t ops = 0;
  uint32_t queued = 0;  // batches received, not yet finished
};

// What a scrape reads of the server as a whole.
struct ServerView {
  protocol::ServerStats stats;  // sessions, ops, frames and bytes by direction, memory
  std::vector<protocol::DeviceInfo> devices;
  std::vector<SessionView> sessions;
  int64_t batches_queued = 0;  // all sessions
  // The spin budget (server/spin_budget.h): threads spinning now, at most, refusals so far.
  int spinning_threads = 0, spin_threads_max = 0;
  uint64_t spin_refused = 0;
};

// Prometheus text exposition of `view` and `m` (prometheus-cpp's serializer).
std::string metrics_text(const ServerView& view, const ServerMetrics& m);

// The HTTP endpoint of `tensorwire-server --metrics`: /metrics (Prometheus text) and / (the
// dashboard, src/server/dashboard/index.html, embedded in the binary). It runs on threads of its
// own, so a scrape never delays a session.
class MetricsEndpoint {
 public:
  // Listens on `url` (tcp://host:port; port 0 picks a free one). `view` is called per scrape,
  // on the endpoint's threads; it and `m` outlive the endpoint.
  static Result<std::unique_ptr<MetricsEndpoint>> start(const std::string& url,
                                                        const ServerMetrics& m,
                                                        std::function<ServerView()> view);
  ~MetricsEndpoint();  // stops it
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;
  // http://127.0.0.1:41234 (the port resolved).
  const std::string& url() const { return url_; }
  void stop();

  struct Impl;

 private:
  explicit MetricsEndpoint(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  std::string url_;
};

}  // namespace tw::server
TW_INTERNAL_END
