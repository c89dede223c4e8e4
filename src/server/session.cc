#include "server/session.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <thread>
#include <variant>

#include "backend/registry.h"
#include "core/cancel.h"
#include "core/env.h"
#include "core/thread_pool.h"
#include "server/collective.h"

namespace tw::server {

namespace proto = protocol;

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

namespace {

Status over_device_limit(const std::string& what, const MemoryBudget& budget, uint64_t need,
                         const std::string& device) {
  return resource_exhausted(what + ": memory of device " + device +
                            " full: the server's sessions hold " + human_bytes(budget.used()) +
                            " of its budget of " + human_bytes(budget.limit()) +
                            " and this needs " + human_bytes(need) +
                            " more; free tensors (drop them), try again later, or use another "
                            "device");
}

Status over_server_limit(const std::string& what, const MemoryBudget& budget, uint64_t need) {
  const uint64_t pinned = budget.pinned();
  return resource_exhausted(
      what + ": server memory limit reached: the server's sessions hold " +
      human_bytes(budget.used()) +
      (pinned ? " (and exported tensors not yet moved " + human_bytes(pinned) + ")" : "") +
      " of its limit of " + human_bytes(budget.limit()) + " and this needs " + human_bytes(need) +
      " more; free tensors (drop them), try again later, or raise "
      "tensorwire-server --max-memory");
}

}  // namespace

ir::DeviceRate device_rate(const std::string& backend) {
  (void)backend;  // every backend of this build runs on the cpu's cores
  const double threads = std::max(1, get_num_threads());
  return {16e9 * threads, std::min(2e9 * threads, 10e9), 5e8 * threads};
}

Result<std::unique_ptr<Session>> Session::open(uint64_t id, const std::string& backend,
                                               uint64_t memory_quota, SessionTotals& totals,
                                               uint64_t max_graph_ops, OpLimits op_limits) {
  TW_ASSIGN_OR_RETURN(std::unique_ptr<Backend> b, make_backend(backend));
  std::unique_ptr<Session> s(
      new Session(id, std::move(b), totals, memory_quota, max_graph_ops, op_limits));
  s->set_backend_limit(0);
  return s;
}

void Session::set_backend_limit(uint64_t bytes) {
  // Limit 0: the backend asks admit() about every op that allocates, so the bytes are reserved
  // in the server's budget before the kernel allocates them. The backend is the session's own,
  // so `this` outlives it.
  backend_->set_memory_limit(bytes, [this](const ir::Op& op, uint64_t have, uint64_t need) {
    return admit(op, have, need);
  });
}

Session::~Session() {
  backend_.reset();
  tensor_memory().release(charged_);
  totals_.memory.release(reserved_.load());
  totals_.bytes_held.fetch_sub(static_cast<int64_t>(held_.load()));
}

Status Session::within_quota(const std::string& what, uint64_t holds, const char* taking,
                             uint64_t need, const char* more) const {
  if (holds + need <= memory_quota_ && totals_.capabilities.outstanding_hint() == 0) {
    return Status::OK();
  }
  uint64_t exported = totals_.capabilities.pinned_bytes(id_);
  // Expired capabilities give their bytes back once forgotten.
  if (holds + exported + need > memory_quota_ && exported && totals_.capabilities.sweep()) {
    exported = totals_.capabilities.pinned_bytes(id_);
  }
  if (holds + exported + need <= memory_quota_) return Status::OK();
  return resource_exhausted(
      what + ": session memory quota exceeded: the session holds " + human_bytes(holds + exported) +
      (exported ? " (exported tensors not yet moved " + human_bytes(exported) + " of it)" : "") +
      " and " + taking + " " + human_bytes(need) + more + ", over the quota of " +
      human_bytes(memory_quota_) + "; free tensors (drop them) or raise --session-memory");
}

Status Session::admit(const ir::Op& op, uint64_t have, uint64_t need) {
  if (need == 0) return Status::OK();
  // Graphs' constants are the session's too, beside what the backend holds.
  const uint64_t holds = have + graph_constant_bytes_;
  // (The op's name is only made when the quick check fails: it is a string built per op.)
  if (holds + need > memory_quota_ || totals_.capabilities.outstanding_hint() != 0) {
    TW_RETURN_NOT_OK(within_quota(ir::op_name(op), holds, "this op needs", need, " more"));
  }
  // What the buffer pool will hand out for it (settle() corrects the guess for several
  // outputs, views and other backends' storage); size_class() is for sizes that can exist.
  uint64_t want = need < (uint64_t{1} << 60) ? BufferPool::size_class(need) : need;
  // An upload's tensor views the frame it came in, whose bytes are reserved already: they move
  // from the frame's reservation to what the backend accounts for.
  // (Not on a device with memory of its own: the frame is host memory, the tensor is not.)
  uint64_t covered = 0;
  if (const auto* up = std::get_if<ir::FromHost>(&op);
      up && running_ && !device_memory_ &&
      up->data.data.storage_id() == running_->frame.storage_id()) {
    covered = take_frame_credit(want);
    reserved_.fetch_sub(covered);
    want -= covered;
  }
  if (device_memory_) {
    if (!device_memory_->try_reserve(want)) {
      return over_device_limit(ir::op_name(op), *device_memory_, want, device_name_);
    }
  } else if (want > 0 && !try_reserve(want)) {
    // The frame's share stays with the frame, released with it once the batch has run.
    reserved_.fetch_add(covered);
    give_frame_credit(covered);
    return over_server_limit(ir::op_name(op), totals_.memory, want);
  }
  charged_ += covered + want;
  return Status::OK();
}

uint64_t Session::take_frame_credit(uint64_t bytes) {
  if (!running_) return 0;
  const uint64_t take = std::min(bytes, running_->reserved);
  running_->reserved -= take;
  return take;
}

void Session::give_frame_credit(uint64_t bytes) {
  if (bytes) running_->reserved += bytes;  // only what take_frame_credit() took, in this batch
}

bool Session::try_reserve(uint64_t bytes) {
  if (totals_.memory.try_reserve(bytes)) return true;
  // Expired capabilities still pin their bytes until a sweep: sweep before refusing.
  return totals_.capabilities.sweep() && totals_.memory.try_reserve(bytes);
}

Status Session::reserve(uint64_t bytes, const std::string& what) {
  if (!try_reserve(bytes)) return over_server_limit(what, totals_.memory, bytes);
  reserved_.fetch_add(bytes);
  return Status::OK();
}

void Session::release(uint64_t bytes) {
  reserved_.fetch_sub(bytes);
  totals_.memory.release(bytes);
}

void Session::settle() {
  const uint64_t now = backend_->bytes_held();
  // What the op reserved and did not use (a view, a failure), what a drop freed; or storage
  // beyond the outputs' element bytes, which is charged although it passes the limit: it exists.
  if (now > charged_) {
    tensor_memory().charge(now - charged_);
  } else if (now < charged_) {
    tensor_memory().release(charged_ - now);
  }
  charged_ = now;
  // The backend's bytes include graphs' planned buffers; their constants are the session's.
  const uint64_t holds = now + graph_constant_bytes_;
  const uint64_t before = held_.load(std::memory_order_relaxed);
  if (holds == before) return;
  held_.store(holds);
  totals_.bytes_held.fetch_add(static_cast<int64_t>(holds) - static_cast<int64_t>(before));
}

// Test-only: TW_TEST_OP_DELAY_US in the server's environment makes every op take that much
// longer, a slow server for the flow-control bench (bench/net_bench.cc row F).
static std::chrono::microseconds test_op_delay() {
  static const std::chrono::microseconds d{
      [] { return static_cast<long>(env_number(Env::kTEST_OP_DELAY_US).value_or(0)); }()};
  return d;
}

void Session::run_task(proto::Task& task, SessionOutput& out, OpTimer& timer) {
  // The common case first, without a visit: an op neither replies nor interrupts the timer.
  if (proto::OpTask* t = std::get_if<proto::OpTask>(&task)) {
    if (const auto delay = test_op_delay(); delay.count() > 0) std::this_thread::sleep_for(delay);
    totals_.ops_executed.fetch_add(1, std::memory_order_relaxed);
    ops_.store(ops_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    // A failure (over a limit too) is recorded in the op's outputs; the metrics count it.
    const Status st = run_op(t->op, out, timer);
    if (long_) return;  // (settled when it has run)
    if (const auto* up = std::get_if<ir::FromHost>(&t->op); up && st.ok()) {
      // For a later UploadByHash (protocol 9): a large upload, or one whose hash was asked.
      const bool asked = !missed_.empty() && missed_.erase(up->out.id) > 0;
      if (asked || up->data.data.size() >= ContentCache::kMinBytes)
        totals_.content.remember(up->data.data, asked);
    }
    settle();
    return;
  }
  // A drop (which a client interleaves with its ops, one after the op that used a tensor last)
  // neither replies nor takes long: like settle() its few nanoseconds count in the next op's
  // time, and the ops' latencies are handed over at the next task that replies or runs long. (An
  // interrupt per drop cost a stream of 1-element adds 8% of its rate: a second clock read and a
  // flush per op.)
  if (proto::DropTask* t = std::get_if<proto::DropTask>(&task)) {
    for (auto id : t->ids) (void)backend_->drop(id);  // unknown ids: nothing to free
    settle();
    return;
  }
  timer.interrupt();
  proto::OutFrame f;
  // Each kind's handler; true when it wrote a reply into f.
  struct Run {
    Session& s;
    SessionOutput& out;
    proto::OutFrame& f;
    bool operator()(proto::OpTask&) { return false; }    // (above)
    bool operator()(proto::DropTask&) { return false; }  // (above)
    bool operator()(proto::ReadTask& t) {
      proto::encode_read_result(t.request_id, s.totals_.metrics.counted_read(s.read_for_wire(t.id)),
                                f);
      return true;
    }
    bool operator()(proto::SyncTask& t) {
      // Every op before it has been handed to the device; a device that runs them
      // asynchronously waits for them here and reports the first one that failed since the last
      // sync (Backend::sync(): the op's error, naming it), which the client's sync() returns.
      proto::encode_sync_result(t.request_id, s.backend_->sync(), f);
      return true;
    }
    bool operator()(proto::StatsTask& t) {
      proto::encode_stats_result(t.request_id, out.server_stats(s.id_), out.protocol_version(), f);
      return true;
    }
    bool operator()(proto::RegisterGraphTask& t) {
      Result<ir::GraphId> id = s.graph_names_ == GraphNames::kClient
                                   ? invalid_argument(
                                         "RegisterGraph: this session names its graphs itself "
                                         "(RegisterGraphAs); the two are not mixed")
                                   : s.register_graph(std::move(t.graph));
      if (id.ok()) s.graph_names_ = GraphNames::kServer;
      proto::encode_graph_result(t.request_id, id, f);
      s.settle();
      return true;
    }
    bool operator()(proto::RegisterGraphAsTask& t) {
      s.register_graph_as(t, out);
      s.settle();
      return false;
    }
    bool operator()(proto::RunGraphTask& t) {
      if (s.graph_seconds(t.graph_id) > OpLimits::kLongSeconds && out.runs_long()) {
        s.long_ = true;
        out.run_long([&s = s, t = std::move(t)] { s.run_graph(t); });
        return false;
      }
      s.run_graph(t);
      s.settle();
      return false;
    }
    bool operator()(proto::ExportTask& t) {
      proto::encode_capability_result(t.request_id, s.export_tensor(t.id), f);
      return true;
    }
    bool operator()(proto::ExportAsTask& t) {
      s.export_as(t);
      return false;
    }
    bool operator()(proto::MoveLocalTask& t) {
      s.land(
          t.id, t.meta,
          s.totals_.capabilities.redeem(t.source.capability, t.source.session_id, t.source.tensor));
      s.settle();
      return false;
    }
    bool operator()(proto::ImportTask& t) {
      s.start_import(t, out);
      return false;
    }
    bool operator()(proto::CollectiveTask& t) {
      s.start_collective(t, out);
      return false;
    }
    bool operator()(proto::FromSegmentTask& t) {
      s.totals_.ops_executed.fetch_add(1, std::memory_order_relaxed);
      s.from_segment(t);
      s.settle();
      return false;
    }
    bool operator()(proto::UploadByHashTask& t) {
      proto::encode_sync_result(t.request_id, s.upload_by_hash(t), f);
      return true;
    }
    bool operator()(proto::ReadToSegmentTask& t) {
      s.read_to_segment(t, f);
      return true;
    }
    bool operator()(proto::CompressRepliesTask& t) {
      s.compress_replies_ = t.on;
      out.compress_replies(s.compress_replies_);
      return false;
    }
  };
  if (std::visit(Run{*this, out, f}, task)) out.reply(std::move(f));
}

Status Session::run_op(ir::Op& op, SessionOutput& out, OpTimer& timer) {
  op_inputs_.clear();
  const ir::MetaLookup lookup = [this](ir::TensorId id) -> Result<TensorMeta> {
    for (const auto& [seen, meta] : op_inputs_)
      if (seen == id) return meta;
    Result<TensorMeta> m = backend_->meta(id);
    if (m.ok()) op_inputs_.emplace_back(id, *m);
    return m;
  };
  Result<std::vector<TensorMeta>> metas = ir::infer(op, lookup);
  // An op inference refuses: the backend reports it, as it always has (bad ids first).
  if (!metas.ok()) return timer.run(op, [&] { return backend_->execute(op); });
  // Most ops are small: a bound on their cost from their sizes alone (ir::size_bound) settles
  // that they are neither over --max-op-cost nor long work, without the estimate's visit of the
  // op (which cost a 1-element add's round trip 8% more server instructions: bench/op_cost.sh).
  double max_in = 1, in_bytes = 0;
  for (const auto& [seen, meta] : op_inputs_) {
    const double n = static_cast<double>(numel(meta.shape));
    max_in = std::max(max_in, n);
    in_bytes += n * static_cast<double>(dtype_size(meta.dtype));
  }
  const double bound = ir::cost_seconds(ir::size_bound(max_in, in_bytes, *metas), limits_.rate);
  if (bound <= OpLimits::kLongSeconds && (limits_.max_seconds <= 0 || bound <= limits_.max_seconds))
    return timer.run(op, [&] { return backend_->execute_inferred(op, std::move(*metas)); });
  const ir::OpCost cost = ir::op_cost(op, lookup, *metas);
  const double seconds = ir::cost_seconds(cost, limits_.rate);
  if (limits_.max_seconds > 0 && seconds > limits_.max_seconds) {
    // An op whose outputs could never fit the session's quota is refused for that (the backend
    // asks admit()), the plainer reason.
    double need = 0;
    for (const TensorMeta& m : *metas)
      need += static_cast<double>(numel(m.shape)) * static_cast<double>(dtype_size(m.dtype));
    if (need <= static_cast<double>(memory_quota_)) return refuse_op(op, cost, seconds);
  }
  // (An upload is a copy of bytes that arrived, and takes its bytes from the frame's
  // reservation, which only the running batch has: never handed over.)
  if (seconds > OpLimits::kLongSeconds && out.runs_long() &&
      !std::holds_alternative<ir::FromHost>(op)) {
    long_ = true;
    out.run_long([this, op = std::move(op), metas = std::move(*metas)]() mutable {
      run_long_op(op, std::move(metas));
    });
    return Status::OK();
  }
  return timer.run(op, [&] { return backend_->execute_inferred(op, std::move(*metas)); });
}

std::string Session::over_cost(const std::string& what, const ir::OpCost& cost,
                               double seconds) const {
  char buf[128];
  std::snprintf(buf, sizeof buf, "%.3g s of work on this device", seconds);
  char limit[64];
  std::snprintf(limit, sizeof limit, "%g s", limits_.max_seconds);
  return what + ": estimated cost " + buf + " (" + ir::cost_str(cost) +
         ") is over the server's limit of " + limit +
         " per op (tensorwire-server --max-op-cost); split the work into smaller ops or raise "
         "--max-op-cost";
}

Status Session::refuse_op(const ir::Op& op, const ir::OpCost& cost, double seconds) {
  // Bad output ids and poisoned inputs are reported as the backend reports them (it runs
  // nothing then): only an op that would otherwise run is refused for its cost.
  std::vector<ir::TensorId> ids = ir::op_inputs(op);
  for (ir::TensorId id : ids)
    if (!backend_->readable(id).ok()) return backend_->execute(op);
  ids = ir::op_outputs(op);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] == 0 || backend_->meta(ids[i]).ok() ||
        std::find(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(i), ids[i]) !=
            ids.begin() + static_cast<std::ptrdiff_t>(i)) {
      return backend_->execute(op);
    }
  }
  totals_.metrics.error(ErrorKind::kOverCost);
  Status err = resource_exhausted(over_cost(ir::op_name(op), cost, seconds));
  backend_->fail(op, err);
  return err;
}

void Session::run_long_op(ir::Op& op, std::vector<TensorMeta> metas) {
  const Status st = backend_->execute_inferred(op, std::move(metas));
  if (st.ok() && cancelled()) {
    // Its kernel stopped early: what it made is unfinished, and nobody is left to read it.
    for (ir::TensorId id : ir::op_outputs(op)) (void)backend_->drop(id);
    backend_->fail(op,
                   unavailable(ir::op_name(op) + ": cancelled: its session ended while it ran"));
  }
}

void Session::finish_long() {
  long_ = false;
  settle();
}

double Session::graph_seconds(ir::GraphId id) const {
  if (graph_names_ == GraphNames::kClient) {
    auto c = client_graphs_.find(id);
    if (c == client_graphs_.end()) return 0;
    id = c->second;
  }
  auto g = graph_ops_.find(id);
  return g == graph_ops_.end() ? 0 : g->second.seconds;
}

bool Session::run(Batch& batch, SessionOutput& out, Clock::time_point until) {
  if (parked()) return false;
  if (batch.attach) {
    proto::OutFrame f;
    proto::encode_sync_result(batch.attach->msg.request_id, attach_segment(*batch.attach), f);
    batch.attach.reset();
    out.reply(std::move(f));
  }
  OpTimer timer(totals_.metrics, &sampling_);
  totals_.capabilities.progress(id_);  // (fetches waiting for this session's exports wait on)
  running_ = &batch;
  while (batch.refill()) {
    run_task(batch.tasks[batch.next++], out, timer);
    if (parked() || (batch.refill() && Clock::now() >= until)) {
      running_ = nullptr;
      return false;
    }
  }
  running_ = nullptr;
  // The tensors made from the frame are charged as the backend holds them now; the rest of
  // the frame's reservation goes back (the frame itself lives on only in those tensors).
  release(batch.reserved);
  batch.reserved = 0;
  if (!batch.decoded.ok()) {
    totals_.metrics.error(ErrorKind::kMalformedBatch);
    proto::OutFrame f;
    proto::encode_session_error(
        batch.decoded.with_context("malformed batch (the tasks before it ran)"), f);
    out.reply(std::move(f));
  }
  return true;
}

void Session::run(std::vector<proto::Task>& tasks, const Status& decoded, SessionOutput& out) {
  Batch batch;
  batch.tasks = std::move(tasks);
  batch.count = batch.tasks.size();
  batch.decoded = decoded;
  const bool finished = run(batch, out, Clock::time_point::max());
  tasks = std::move(batch.tasks);
  if (finished) tasks.clear();  // (cleared Tasks otherwise: the vector comes back empty, as it did)
}

// ---- graphs ----

Result<ir::GraphId> Session::register_graph(ir::Graph graph) {
  // A graph of no ops still takes a table entry: it counts as one, so the count bounds both.
  const uint64_t ops = std::max<uint64_t>(graph.ops.size(), 1);
  if (graph_ops_total_ + ops > max_graph_ops_) {
    return resource_exhausted("register_graph: the graph has " + std::to_string(graph.ops.size()) +
                              " ops and this session's graphs hold " +
                              std::to_string(graph_ops_total_) + ", over the limit of " +
                              std::to_string(max_graph_ops_) +
                              " graph ops per session (tensorwire-server --max-graph-ops)");
  }
  // Every op's cost against --max-op-cost (a graph that does not validate is refused by the
  // backend below, naming why), and a run's estimated time, to run a long one as long work.
  double seconds = 0;
  if (Result<std::vector<ir::OpCost>> costs = ir::graph_op_costs(graph); costs.ok()) {
    for (size_t i = 0; i < graph.ops.size(); ++i) {
      const double s = ir::cost_seconds((*costs)[i], limits_.rate);
      if (limits_.max_seconds > 0 && s > limits_.max_seconds) {
        totals_.metrics.error(ErrorKind::kOverCost);
        return resource_exhausted(over_cost("register_graph: graph op " + std::to_string(i) + " (" +
                                                ir::op_name(graph.ops[i]) + ")",
                                            (*costs)[i], s));
      }
      seconds += s;
    }
  }
  // Constants (FromHost ops) stay in the graph for as long as it is registered.
  uint64_t constants = 0;
  for (const ir::Op& op : graph.ops) {
    if (auto* fh = std::get_if<ir::FromHost>(&op)) constants += fh->data.data.size();
  }
  const uint64_t held = backend_->bytes_held() + graph_constant_bytes_;
  TW_RETURN_NOT_OK(within_quota("register_graph", held, "the graph's constants take", constants));
  // The constants are held outside the backend: the server's budget counts them by reserve(),
  // those the frame brought by its reservation already.
  const uint64_t covered = take_frame_credit(constants);
  if (Status st = reserve(constants - covered, "register_graph"); !st.ok()) {
    give_frame_credit(covered);
    return st;
  }
  graph_constant_bytes_ += constants;
  // The backend plans the graph's buffers against one limit: what the quota leaves beside the
  // constants, or what the server's budget has free, whichever is less. settle() then counts
  // them in the budget.
  const uint64_t backend_held = backend_->bytes_held();
  const uint64_t by_quota = memory_quota_ - std::min(memory_quota_, graph_constant_bytes_);
  const MemoryBudget& budget = tensor_memory();
  const uint64_t server_free = budget.limit() - std::min(budget.limit(), budget.used());
  const uint64_t by_server =
      server_free > UINT64_MAX - backend_held ? UINT64_MAX : backend_held + server_free;
  set_backend_limit(std::min(by_quota, by_server));
  Result<ir::GraphId> id = backend_->register_graph(std::move(graph));
  set_backend_limit(0);
  if (!id.ok()) {
    graph_constant_bytes_ -= constants;
    release(constants);
    if (id.status().code() == StatusCode::kResourceExhausted) {
      if (by_server < by_quota) {
        if (device_memory_) {
          return id.status().with_context("memory budget of device " + device_name_ + ", " +
                                          human_bytes(budget.limit()));
        }
        return id.status().with_context("server memory limit of " + human_bytes(budget.limit()) +
                                        " (tensorwire-server --max-memory)");
      }
      return id.status().with_context("session memory quota of " + human_bytes(memory_quota_) +
                                      " (tensorwire-server --session-memory)");
    }
    return id.status();
  }
  graph_ops_[*id] = {ops, seconds};
  graph_ops_total_ += ops;
  totals_.metrics.graph_registered();
  return id;
}

void Session::register_graph_as(proto::RegisterGraphAsTask& t, SessionOutput& out) {
  const ir::GraphId name = t.graph_id;
  std::string bad;
  if (graph_names_ == GraphNames::kServer) {
    bad =
        "this session registered graphs by RegisterGraph (ids the server chose); the two "
        "are not mixed";
  } else if (name == 0) {
    bad = "graph id 0 is reserved";
  } else if (client_graphs_.count(name) != 0 || refused_graphs_.count(name) != 0) {
    bad = "graph id " + std::to_string(name) + " is in use";
  }
  if (!bad.empty()) {
    totals_.metrics.error(ErrorKind::kMalformedBatch);
    proto::OutFrame f;
    proto::encode_session_error(invalid_argument("RegisterGraphAs: " + bad), f);
    out.reply(std::move(f));
    return;
  }
  graph_names_ = GraphNames::kClient;
  Result<ir::GraphId> id = register_graph(std::move(t.graph));
  if (id.ok()) {
    client_graphs_.emplace(name, *id);
    return;
  }
  if (refused_graphs_.size() >= kMaxRefusals) refused_graphs_.clear();
  refused_graphs_.emplace(name, id.status().with_context("register_graph of graph " +
                                                         std::to_string(name) + " (refused)"));
}

void Session::run_graph(const proto::RunGraphTask& t) {
  ir::GraphId id = t.graph_id;
  if (graph_names_ == GraphNames::kClient) {
    auto c = client_graphs_.find(id);
    if (c == client_graphs_.end()) {
      // Nothing runs; the outputs carry the registration's refusal, or that the id is unknown.
      auto r = refused_graphs_.find(id);
      const Status why = r != refused_graphs_.end()
                             ? r->second
                             : not_found("run_graph: unknown graph " + std::to_string(id));
      for (ir::TensorId o : t.outputs)
        backend_->fail(ir::FromHost{ir::Out{o}, {}, kF32, ir::Bytes{}}, why);
      return;
    }
    id = c->second;
  }
  auto g = graph_ops_.find(id);
  if (g != graph_ops_.end()) {
    totals_.ops_executed.fetch_add(g->second.ops, std::memory_order_relaxed);
    totals_.metrics.graph_run();
  }
  // A failure (an unknown graph included) is recorded in the run's outputs.
  (void)backend_->run_graph(id, t.inputs, t.outputs);
}

// ---- moves ----

Result<proto::Exported> Session::export_tensor(ir::TensorId id) {
  // A CPU tensor's read shares its storage: the capability holds the bytes without a copy.
  Result<TensorData> d = backend_->read(id);
  if (!d.ok()) return d.status().with_context("export of tensor " + std::to_string(id));
  TensorMeta meta = d->meta;
  TW_ASSIGN_OR_RETURN(std::string cap, totals_.capabilities.issue(id_, id, std::move(d).value()));
  return proto::Exported{std::move(cap), std::move(meta)};
}

void Session::export_as(const proto::ExportAsTask& t) {
  Result<TensorData> d = backend_->read(t.id);
  if (!d.ok()) d = d.status().with_context("export of tensor " + std::to_string(t.id));
  totals_.capabilities.issue_ticket(id_, t.id, t.ticket, std::move(d));
}

void Session::land(ir::TensorId id, const TensorMeta& meta, Result<TensorData> got) {
  if (got.ok() && !(got->meta == meta)) {
    got = invalid_argument("move: the capability grants a tensor " + meta_str(got->meta) +
                           ", the task names one " + meta_str(meta));
  }
  if (!got.ok()) {
    backend_->fail(ir::FromHost{ir::Out{id}, meta.shape, meta.dtype, ir::Bytes{}}, got.status());
    return;
  }
  // FromHost adopts the storage (no copy on CPU); a failure, over the quota say, is recorded in
  // the tensor.
  (void)backend_->execute(from_host_of(std::move(got).value(), id));
}

void Session::start_import(const proto::ImportTask& t, SessionOutput& out) {
  const uint64_t bytes = static_cast<uint64_t>(numel(t.meta.shape)) * dtype_size(t.meta.dtype);
  Status st = within_quota("import", held(), "the tensor takes", bytes);
  if (st.ok()) {
    // The bytes being received count in the server's budget until the tensor holds them.
    st = reserve(bytes, "import");
    if (st.ok()) {
      st = out.begin_import(t);
      if (!st.ok()) release(bytes);
    }
  }
  if (!st.ok()) {
    land(t.id, t.meta, st);
    settle();
    return;
  }
  parked_ = Parked{t.id, t.meta, bytes};
}

void Session::finish_import(Result<TensorData> got) {
  if (!parked_) return;
  if (got.ok()) totals_.metrics.transfer(Direction::kIn, got->bytes.size());
  unpark(std::move(got));
}

void Session::unpark(Result<TensorData> got) {
  Parked p = std::move(*parked_);
  parked_.reset();
  release(p.reserved);
  land(p.id, p.meta, std::move(got));
  settle();
}

void Session::start_collective(const proto::CollectiveTask& t, SessionOutput& out) {
  const proto::CollectiveSpec& c = t.collective;
  Result<TensorData> in = backend_->read(c.input);
  // An output naming the input donates it: the session lets go of the input here, so the
  // collective may reduce in its storage when nothing else shares it, and the id is rebound to
  // the result.
  if (c.output == c.input) (void)backend_->drop(c.input);
  Status st = in.ok() ? check_collective(c, in->meta) : in.status();
  const uint64_t bytes =
      static_cast<uint64_t>(numel(c.out_meta.shape)) * dtype_size(c.out_meta.dtype);
  if (st.ok()) st = within_quota("collective", held(), "the output takes", bytes);
  if (st.ok()) st = reserve(bytes, "collective");
  if (st.ok()) {
    st = out.begin_collective(t, std::move(in).value());
    if (!st.ok()) release(bytes);
  }
  if (!st.ok()) {
    land(c.output, c.out_meta, st);
    settle();
    return;
  }
  parked_ = Parked{c.output, c.out_meta, bytes};
}

void Session::finish_collective(Result<TensorData> got) {
  if (!parked_) return;
  unpark(std::move(got));
}

// ---- segments ----

Status Session::attach_segment(Batch::Attach& a) {
  const std::string what = "attach of segment " + std::to_string(a.msg.segment);
  if (!a.adopted.ok()) return a.adopted.with_context(what);
  if (!a.segment) return internal_error(what + ": no segment");
  auto old = segments_.find(a.msg.segment);
  const uint64_t replaced = old == segments_.end() ? 0 : old->second->capacity();
  if (old == segments_.end() && segments_.size() >= kMaxSegments) {
    return resource_exhausted(what + ": the session has " + std::to_string(segments_.size()) +
                              " segments attached, the most a session may hold");
  }
  const uint64_t bytes = a.segment->capacity();
  // The pages are the client's memfd, but the server maps them and writes reads into them, so
  // they count in the server's budget (--max-memory). Not in the session's quota, which bounds
  // its tensors (the device memory a program sizes its work by): there a large upload would
  // need its tensor and its segment, and fail where the socket path succeeds. Segments have an
  // allowance of their own instead, the size of the quota.
  if (segment_bytes_ - replaced + bytes > memory_quota_) {
    return resource_exhausted(what + ": the session's segments would map " +
                              human_bytes(segment_bytes_ - replaced + bytes) +
                              ", over its allowance of " + human_bytes(memory_quota_) +
                              " (segments may map as much as the session memory quota, "
                              "tensorwire-server --session-memory)");
  }
  if (replaced) {
    release(replaced);
    segment_bytes_ -= replaced;
    segments_.erase(old);
  }
  TW_RETURN_NOT_OK(reserve(bytes, what));
  segment_bytes_ += bytes;
  segments_[a.msg.segment] = std::move(a.segment);
  return Status::OK();
}

Result<net::SharedSegment*> Session::segment_range(const proto::SegmentRange& r, const char* what) {
  auto it = segments_.find(r.segment);
  if (it == segments_.end()) {
    return invalid_argument(std::string(what) + ": segment " + std::to_string(r.segment) +
                            " is not attached to this session");
  }
  const uint64_t cap = it->second->capacity();
  if (r.offset > cap || r.length > cap - r.offset) {
    return out_of_range(std::string(what) + ": bytes [" + std::to_string(r.offset) + ", +" +
                        std::to_string(r.length) + ") outside segment " +
                        std::to_string(r.segment) + " of " + std::to_string(cap) + " bytes");
  }
  return it->second.get();
}

void Session::from_segment(const proto::FromSegmentTask& t) {
  const std::string what = "upload of tensor " + std::to_string(t.id) + " from a segment";
  auto poison = [&](const Status& st) {
    backend_->fail(ir::FromHost{ir::Out{t.id}, t.meta.shape, t.meta.dtype, ir::Bytes{}}, st);
  };
  auto seg = segment_range(t.range, what.c_str());
  if (!seg.ok()) {
    // A segment that exists is done with, whatever its range: the client may write it again.
    if (auto it = segments_.find(t.range.segment); it != segments_.end()) {
      it->second->consumed().store(t.range.sequence, std::memory_order_release);
    }
    return poison(seg.status());
  }
  net::SharedSegment& s = **seg;
  const uint64_t want = static_cast<uint64_t>(numel(t.meta.shape)) * dtype_size(t.meta.dtype);
  Status st;
  if (t.range.length != want) {
    st = invalid_argument(what + ": " + std::to_string(t.range.length) + " bytes for a tensor " +
                          meta_str(t.meta) + " of " + std::to_string(want));
  }
  if (st.ok()) {
    st = within_quota(what, backend_->bytes_held() + graph_constant_bytes_, "the tensor takes",
                      want);
  }
  // The bytes are copied out before anything looks at them: the client can still write the
  // mapping, so nothing computed from it could be trusted to stay what was checked. The copy's
  // buffer is reserved while it is made; the op then reserves the tensor as any upload's.
  Buffer bytes;
  if (st.ok()) st = reserve(BufferPool::size_class(want), what);
  if (st.ok()) {
    bytes = Buffer::allocate(want);
    net::parallel_copy(bytes.data(), s.data() + t.range.offset, want);
    release(BufferPool::size_class(want));
  }
  s.consumed().store(t.range.sequence, std::memory_order_release);
  if (!st.ok()) return poison(st);
  // A failure (an id in use, the quota) is recorded in the tensor, as for any upload.
  (void)backend_->execute(
      ir::FromHost{ir::Out{t.id}, t.meta.shape, t.meta.dtype, ir::Bytes{std::move(bytes)}});
}

void Session::read_to_segment(const proto::ReadToSegmentTask& t, proto::OutFrame& f) {
  const std::string what = "read of tensor " + std::to_string(t.id) + " into a segment";
  auto seg = segment_range(t.range, what.c_str());
  if (!seg.ok()) {
    proto::encode_read_result(t.request_id,
                              totals_.metrics.counted_read(Result<TensorData>(seg.status())), f);
    return;
  }
  Result<TensorData> d = totals_.metrics.counted_read(backend_->read(t.id));
  if (!d.ok() || d->bytes.size() > t.range.length) {
    // An error, or a tensor larger than the room offered: answered through the socket.
    proto::encode_read_result(t.request_id, d.ok() ? read_for_wire(t.id) : d, f);
    return;
  }
  net::parallel_copy((*seg)->data() + t.range.offset, d->bytes.data(), d->bytes.size());
  proto::encode_read_result_in_segment(t.request_id, d->meta, f);
}

// A tensor too large for one frame (whose length is a u32) is refused, not truncated; a
// poisoned one reports its poisoning error first, whatever its size.
Result<TensorData> Session::read_for_wire(ir::TensorId id) {
  TW_ASSIGN_OR_RETURN(uint64_t bytes, backend_->nbytes(id));
  constexpr uint64_t kRoom = 0xFFFFFFFFull - 4096;  // the frame's head beside the data
  if (bytes > kRoom) {
    TW_RETURN_NOT_OK(backend_->readable(id));
    return resource_exhausted("read: tensor " + std::to_string(id) + " holds " +
                              human_bytes(bytes) +
                              ", more than one frame can carry (4 GiB); read it in slices");
  }
  return backend_->read(id);
}

// A deduplicated upload (protocol 9): the tensor from the bytes the server's cache holds, made
// as an upload of them would be (its quota admitted, a failure recorded in the tensor).
Status Session::upload_by_hash(const proto::UploadByHashTask& t) {
  const uint64_t want = static_cast<uint64_t>(numel(t.meta.shape)) * dtype_size(t.meta.dtype);
  Buffer bytes = totals_.content.find({t.hash_lo, t.hash_hi}, want);
  if (bytes.size() == 0) {
    // The client sends the bytes next (client/dedup.cc): keep them, whatever their size.
    if (missed_.size() < kMaxMissed) missed_.insert(t.id);
    return not_found("upload of tensor " + std::to_string(t.id) +
                     " by hash: this server holds no such bytes; send them");
  }
  totals_.ops_executed.fetch_add(1, std::memory_order_relaxed);
  (void)backend_->execute(
      ir::FromHost{ir::Out{t.id}, t.meta.shape, t.meta.dtype, ir::Bytes{std::move(bytes)}});
  settle();
  return Status::OK();
}

}  // namespace tw::server
