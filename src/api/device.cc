#include "api/sink.h"
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

Device Device::cpu() {
  // One CPU device per process; leaked on purpose so that tensors in static storage can still
  // drop their ids during exit.
  static auto* sink =
      new std::shared_ptr<detail::Sink>(std::make_shared<detail::BackendSink>(make_cpu_backend()));
  return Device(*sink);
}

Device::Kind Device::kind() const { return sink_->kind(); }
std::string Device::str() const { return sink_->str(); }
void Device::sync() const {
  Status st = sink_->sync();
  if (!st.ok()) throw Error(st.message());
}

}  // namespace tw
