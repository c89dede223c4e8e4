#include "api/sink.h"
#include "backend/registry.h"
#include "core/thread_pool.h"
#include "tensorwire/tensor.h"

namespace tw {
namespace detail {

Status BackendSink::submit(ir::Op op) {
  std::lock_guard<std::mutex> lock(mu_);
  // The error, if any, is recorded in the op's outputs by the backend; a read reports it.
  (void)backend_->execute(op);
  return Status::OK();
}

Status BackendSink::submit_inferred(ir::Op op, std::vector<TensorMeta> metas) {
  std::lock_guard<std::mutex> lock(mu_);
  (void)backend_->execute_inferred(op, std::move(metas));  // errors: as submit()
  return Status::OK();
}

std::future<Result<TensorData>> BackendSink::read_async(ir::TensorId id) {
  std::promise<Result<TensorData>> p;
  {
    std::lock_guard<std::mutex> lock(mu_);
    p.set_value(backend_->read(id));
  }
  return p.get_future();
}

void BackendSink::drop(ir::TensorId id) {
  std::lock_guard<std::mutex> lock(mu_);
  (void)backend_->drop(id);  // an id unknown to the backend (never created) needs no freeing
}

Status BackendSink::copy_to(ir::TensorId src, Sink& dst, ir::TensorId dst_id) {
  auto* local = dynamic_cast<BackendSink*>(&dst);
  if (!local) return Sink::copy_to(src, dst, dst_id);
  if (local == this) {
    std::lock_guard<std::mutex> lock(mu_);
    return backend_->copy_to(src, *backend_, dst_id);
  }
  std::scoped_lock lock(mu_, local->mu_);  // both at once, in an order that cannot deadlock
  return backend_->copy_to(src, *local->backend_, dst_id);
}

Result<ir::GraphId> BackendSink::register_graph(ir::Graph graph) {
  std::lock_guard<std::mutex> lock(mu_);
  return backend_->register_graph(std::move(graph));
}

Status BackendSink::run_graph(ir::GraphId graph, std::span<const ir::TensorId> inputs,
                              std::span<const ir::TensorId> outputs) {
  std::lock_guard<std::mutex> lock(mu_);
  return backend_->run_graph(graph, inputs, outputs);
}

}  // namespace detail

namespace {

// One device per local backend and process; leaked on purpose so that tensors in static storage
// can still drop their ids during exit.
std::shared_ptr<detail::Sink>* local_sink(const std::string& backend, Device::Kind kind) {
  Result<std::unique_ptr<Backend>> b = make_backend(backend);
  if (!b.ok()) throw Error(b.status().message());
  return new std::shared_ptr<detail::Sink>(
      std::make_shared<detail::BackendSink>(std::move(b).value(), kind));
}

}  // namespace

Device Device::cpu() {
  static auto* sink = local_sink("cpu", Kind::kCpu);
  return Device(*sink);
}

Device Device::torch() {
  static auto* sink = local_sink("torch", Kind::kTorch);  // a throw leaves it for a retry
  return Device(*sink);
}

bool Device::torch_available() { return has_backend("torch"); }

Device::Kind Device::kind() const { return sink_->kind(); }
std::string Device::str() const { return sink_->str(); }
void Device::sync() const {
  Status st = sink_->sync();
  if (!st.ok()) throw Error(st.message());
}

}  // namespace tw
