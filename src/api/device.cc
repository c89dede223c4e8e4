#include <map>
#include <mutex>

#include "api/sink.h"
#include "backend/registry.h"
#include "core/thread_pool.h"
#include "tensorwire/tensor.h"

namespace tw {
namespace detail {

Status Sink::copy_to(ir::TensorId src, Sink& dst, ir::TensorId dst_id) {
  std::unique_lock<std::recursive_mutex> mine(mu_, std::defer_lock),
      theirs(dst.mu_, std::defer_lock);
  if (&dst == this) {
    if (locks_) mine.lock();
  } else if (locks_ && dst.locks_) {
    std::lock(mine, theirs);
  } else if (locks_) {
    mine.lock();
  } else if (dst.locks_) {
    theirs.lock();
  }
  return backend_->copy_to(src, *dst.backend_, dst_id);
}

}  // namespace detail

namespace {

// One device per local backend and process; leaked on purpose so that tensors in static storage
// can still drop their ids during exit.
std::shared_ptr<detail::Sink>* local_sink(const std::string& backend) {
  Result<std::unique_ptr<Backend>> b = make_backend(backend);
  if (!b.ok()) throw Error(b.status().message());
  return new std::shared_ptr<detail::Sink>(std::make_shared<detail::Sink>(std::move(b).value()));
}

}  // namespace

Device Device::cpu() {
  static auto* sink = local_sink("cpu");
  return Device(*sink);
}

Device Device::torch() {
  static auto* sink = local_sink("torch");  // a throw leaves it for a retry
  return Device(*sink);
}

bool Device::torch_available() { return has_backend("torch"); }

Device Device::local(const std::string& backend, int ordinal) {
  if (backend == "cpu" && ordinal == 0) return cpu();
  if (backend == "torch" && ordinal == 0) return torch();
  static std::mutex mu;
  static auto* sinks = new std::map<std::string, std::shared_ptr<detail::Sink>*>;  // leaked
  const std::string spec = DeviceSpec{backend, ordinal}.str();
  std::lock_guard<std::mutex> lock(mu);
  auto it = sinks->find(spec);
  if (it == sinks->end()) it = sinks->emplace(spec, local_sink(spec)).first;  // throws: retried
  return Device(*it->second);
}

Device Device::local(const std::string& spec) {
  Result<DeviceSpec> s = parse_device_spec(spec);
  if (!s.ok()) throw Error(s.status().message());
  return local(s->backend, s->ordinal);
}

Device::Kind Device::kind() const { return sink_->kind(); }
std::string Device::str() const { return sink_->str(); }
void Device::sync() const {
  Status st = sink_->sync();
  if (!st.ok()) throw Error(st.message());
}

}  // namespace tw
