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
