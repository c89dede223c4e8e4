// The capture device (api/capture.h) and tw::graph::Capture.
#include "api/capture.h"

#include "ir/printer.h"
#include "tensorwire/graph.h"

namespace tw {
namespace detail {

std::string CaptureBackend::not_recordable(ir::TensorId id, const std::string& what) const {
  std::string made_by = "a trace input";
  auto it = producer_.find(id);
  if (it != producer_.end()) {
    const size_t i = it->second;
    made_by = "made by recorded op " + std::to_string(i) + " (" + ir::op_name(graph_.ops[i]) + ")";
  }
  return what + " of tensor %" + std::to_string(id) + ", " + made_by + ", inside a recording on " +
         name() + ": a trace cannot depend on values read while recording; make the tensor a " +
         "trace output and read it after Capture::finish()";
}

Status CaptureBackend::hostable() const {
  return invalid_argument("cannot serve " + name() +
                          ": a capture device records the ops a program issues to it, for replay "
                          "elsewhere; host the device it wraps instead");
}

Result<TensorMeta> CaptureBackend::meta(ir::TensorId id) const {
  return unimplemented(name() + ": the meta of tensor %" + std::to_string(id) +
                       " is kept by the program's tensor");
}

Status CaptureBackend::execute(const ir::Op& op) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string op_name = ir::op_name(op);
  if (!recording_) {
    return invalid_argument(op_name + ": " + name() +
                            " has finished recording; release() its tensors to the inner "
                            "device to keep computing on them");
  }
  const std::vector<ir::TensorId> outs = ir::op_outputs(op);
  std::unordered_map<ir::TensorId, ir::TensorId> fresh;
  for (ir::TensorId o : outs) {
    if (to_inner_.count(o))
      return invalid_argument(op_name + ": output id %" + std::to_string(o) + " is taken");
    fresh.emplace(o, inner_->new_id());
  }
  ir::Op inner_op = op;
  Status bad;
  ir::remap_op(inner_op, [&](ir::TensorId id) -> ir::TensorId {
    if (auto f = fresh.find(id); f != fresh.end()) return f->second;
    auto it = to_inner_.find(id);
    if (it != to_inner_.end()) return it->second;
    bad = not_found(op_name + ": tensor %" + std::to_string(id) + " is not on " + name());
    return id;
  });
  TW_RETURN_NOT_OK(bad);
  const size_t index = graph_.ops.size();
  for (auto& [o, inner_id] : fresh) to_inner_.emplace(o, inner_id);
  for (ir::TensorId o : outs) {
    producer_.emplace(o, index);
    produced_.push_back(o);
    live_.insert(o);
  }
  graph_.ops.push_back(op);
  return inner_->submit(inner_op);
}

Result<ir::TensorId> CaptureBackend::readable_inner(ir::TensorId id) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (recording_) return invalid_argument(not_recordable(id, "read"));
  auto it = to_inner_.find(id);
  if (it == to_inner_.end()) {
    return not_found("read: tensor %" + std::to_string(id) + " is not on " + name());
  }
  return it->second;
}

Result<TensorData> CaptureBackend::read(ir::TensorId id) { return read_expecting(id, 0); }

Result<TensorData> CaptureBackend::read_expecting(ir::TensorId id, uint64_t nbytes) {
  TW_ASSIGN_OR_RETURN(ir::TensorId inner_id, readable_inner(id));
  return inner_->read(inner_id, nbytes);
}

std::future<Result<TensorData>> CaptureBackend::read_async(ir::TensorId id, uint64_t nbytes) {
  Result<ir::TensorId> inner_id = readable_inner(id);
  if (!inner_id.ok()) {
    std::promise<Result<TensorData>> p;
    p.set_value(inner_id.status());
    return p.get_future();
  }
  return inner_->read_async(*inner_id, nbytes);
}

Status CaptureBackend::drop(ir::TensorId id) {
  std::unique_lock<std::mutex> lock(mu_);
  live_.erase(id);
  auto it = to_inner_.find(id);
  if (it == to_inner_.end()) return Status::OK();
  const ir::TensorId inner_id = it->second;
  const bool is_input = input_set_.count(id) > 0;  // input_tensors_ owns the inner id
  to_inner_.erase(it);
  lock.unlock();
  if (!is_input) inner_->drop(inner_id);
  return Status::OK();
}

Status CaptureBackend::copy_to(ir::TensorId src, Backend& dst, ir::TensorId dst_id) {
  std::unique_lock<std::mutex> lock(mu_);
  if (recording_) return invalid_argument(not_recordable(src, "to(): a copy"));
  auto it = to_inner_.find(src);
  if (it == to_inner_.end()) {
    return not_found("to: tensor %" + std::to_string(src) + " is not on " + name());
  }
  const ir::TensorId inner_id = it->second;
  lock.unlock();
  return inner_->copy_to_backend(inner_id, dst, dst_id);
}

Result<ir::GraphId> CaptureBackend::register_graph(ir::Graph) {
  return unimplemented(name() + " records ops; replay the trace on the device it wraps");
}

Status CaptureBackend::run_graph(ir::GraphId, std::span<const ir::TensorId>,
                                 std::span<const ir::TensorId>) {
  return unimplemented(name() + " records ops; replay the trace on the device it wraps");
}

void CaptureBackend::add_input(ir::TensorId id, const Tensor& t) {
  if (!t.defined()) throw Error("Capture::input: the tensor is undefined");
  if (t.impl()->sink != inner_) {
    throw Error("Capture::input: the tensor is on " + t.impl()->sink->str() + ", the capture on " +
                name() + "; move it with .to(device) first");
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!recording_) throw Error("Capture::input: " + name() + " has finished recording");
  graph_.input_ids.push_back(id);
  graph_.inputs.push_back(t.impl()->meta);
  input_set_.insert(id);
  to_inner_.emplace(id, t.impl()->id);
  input_tensors_.push_back(t.detach());
}

ir::Graph CaptureBackend::finish(const std::vector<ir::TensorId>* outputs) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!recording_) throw Error("Capture::finish: " + name() + " has finished already");
  ir::Graph g = graph_;
  if (outputs) {
    for (size_t i = 0; i < outputs->size(); ++i) {
      if (!producer_.count((*outputs)[i])) {
        throw Error("Capture::finish: output " + std::to_string(i) +
                    " was not made by an op recorded on " + name() +
                    (input_set_.count((*outputs)[i]) ? " (it is a trace input)" : ""));
      }
    }
    g.output_ids = *outputs;
  } else {
    for (ir::TensorId id : produced_)
      if (live_.count(id)) g.output_ids.push_back(id);
  }
  recording_ = false;
  return g;
}

Tensor CaptureBackend::release(const Tensor& captured) {
  if (!captured.defined() || &captured.impl()->sink->backend() != this) {
    throw Error("Capture::release: the tensor is not on " + name());
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (recording_) throw Error("Capture::release: " + name() + " is still recording");
  const ir::TensorId id = captured.impl()->id;
  auto it = to_inner_.find(id);
  if (it == to_inner_.end())
    throw Error("Capture::release: tensor %" + std::to_string(id) + " is gone");
  if (input_set_.count(id)) {
    for (size_t i = 0; i < graph_.input_ids.size(); ++i)
      if (graph_.input_ids[i] == id) return input_tensors_[i];
  }
  // The inner id passes to a tensor of the inner device: the capture tensor no longer drops it.
  auto impl = std::make_shared<TensorImpl>();
  impl->sink = inner_;
  impl->id = it->second;
  impl->meta = captured.impl()->meta;
  to_inner_.erase(it);
  return Tensor(std::move(impl));
}

}  // namespace detail

Device Device::capture(const Device& inner) {
  if (inner.kind() == Kind::kCapture)
    throw Error("Device::capture: " + inner.str() + " is a capture device already");
  return Device(
      std::make_shared<detail::Sink>(std::make_unique<detail::CaptureBackend>(inner.sink())));
}

namespace graph {
namespace {
// The backend of the device Capture made (Device::capture), so of kind kCapture.
detail::CaptureBackend& capture_backend(const Device& d) {
  return static_cast<detail::CaptureBackend&>(d.sink()->backend());
}
}  // namespace

Capture::Capture(const Device& inner) : device_(Device::capture(inner)) {}
Capture::~Capture() = default;
Tensor Capture::input(const Tensor& t) {
  auto impl = std::make_shared<detail::TensorImpl>();
  impl->sink = device_.sink();
  impl->id = impl->sink->new_id();
  impl->meta = t.defined() ? t.impl()->meta : TensorMeta{};
  capture_backend(device_).add_input(impl->id, t);
  return Tensor(std::move(impl));
}
Tensor Capture::release(const Tensor& captured) {
  return capture_backend(device_).release(captured);
}

}  // namespace graph
}  // namespace tw
