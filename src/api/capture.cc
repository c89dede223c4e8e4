// The capture device (api/capture.h) and tw::graph::Capture.
#include "api/capture.h"

#include "ir/printer.h"
#include "tensorwire/graph.h"

namespace tw {
namespace detail {

std::string CaptureSink::not_recordable(ir::TensorId id, const std::string& what) const {
  std::string made_by = "a trace input";
  auto it = producer_.find(id);
  if (it != producer_.end()) {
    const size_t i = it->second;
    made_by = "made by recorded op " + std::to_string(i) + " (" + ir::op_name(graph_.ops[i]) + ")";
  }
  return what + " of tensor %" + std::to_string(id) + ", " + made_by + ", inside a recording on " +
         str() + ": a trace cannot depend on values read while recording; make the tensor a " +
         "trace output and read it after Capture::finish()";
}

Status CaptureSink::submit(ir::Op op) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string name = ir::op_name(op);
  if (!recording_) {
    return invalid_argument(name + ": " + str() +
                            " has finished recording; release() its tensors to the inner "
                            "device to keep computing on them");
  }
  const std::vector<ir::TensorId> outs = ir::op_outputs(op);
  std::unordered_map<ir::TensorId, ir::TensorId> fresh;
  for (ir::TensorId o : outs) {
    if (to_inner_.count(o))
      return invalid_argument(name + ": output id %" + std::to_string(o) + " is taken");
    fresh.emplace(o, inner_->new_id());
  }
  ir::Op inner_op = op;
  Status bad;
  ir::remap_op(inner_op, [&](ir::TensorId id) -> ir::TensorId {
    if (auto f = fresh.find(id); f != fresh.end()) return f->second;
    auto it = to_inner_.find(id);
    if (it != to_inner_.end()) return it->second;
    bad = not_found(name + ": tensor %" + std::to_string(id) + " is not on " + str());
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
  graph_.ops.push_back(std::move(op));
  return inner_->submit(std::move(inner_op));
}

std::future<Result<TensorData>> CaptureSink::read_async(ir::TensorId id) {
  std::unique_lock<std::mutex> lock(mu_);
  if (recording_) {
    std::promise<Result<TensorData>> p;
    p.set_value(invalid_argument(not_recordable(id, "read")));
    return p.get_future();
  }
  auto it = to_inner_.find(id);
  if (it == to_inner_.end()) {
    std::promise<Result<TensorData>> p;
    p.set_value(not_found("read: tensor %" + std::to_string(id) + " is not on " + str()));
    return p.get_future();
  }
  const ir::TensorId inner_id = it->second;
  lock.unlock();
  // The inner sink's future; waiting on it through the inner sink's own read path.
  return std::async(std::launch::deferred,
                    [inner = inner_, inner_id] { return inner->read(inner_id); });
}

void CaptureSink::drop(ir::TensorId id) {
  std::unique_lock<std::mutex> lock(mu_);
  live_.erase(id);
  auto it = to_inner_.find(id);
  if (it == to_inner_.end()) return;
  const ir::TensorId inner_id = it->second;
  const bool is_input = input_set_.count(id) > 0;  // input_tensors_ owns the inner id
  to_inner_.erase(it);
  lock.unlock();
  if (!is_input) inner_->drop(inner_id);
}

Status CaptureSink::copy_to(ir::TensorId src, Sink& dst, ir::TensorId dst_id) {
  std::unique_lock<std::mutex> lock(mu_);
  if (recording_) return invalid_argument(not_recordable(src, "to(): a copy"));
  auto it = to_inner_.find(src);
  if (it == to_inner_.end()) {
    return not_found("to: tensor %" + std::to_string(src) + " is not on " + str());
  }
  const ir::TensorId inner_id = it->second;
  lock.unlock();
  return inner_->copy_to(inner_id, dst, dst_id);
}

Result<ir::GraphId> CaptureSink::register_graph(ir::Graph) {
  return unimplemented(str() + " records ops; replay the trace on the device it wraps");
}

Status CaptureSink::run_graph(ir::GraphId, std::span<const ir::TensorId>,
                              std::span<const ir::TensorId>) {
  return unimplemented(str() + " records ops; replay the trace on the device it wraps");
}

Tensor CaptureSink::input(const Tensor& t) {
  if (!t.defined()) throw Error("Capture::input: the tensor is undefined");
  if (t.impl()->sink != inner_) {
    throw Error("Capture::input: the tensor is on " + t.impl()->sink->str() + ", the capture on " +
                str() + "; move it with .to(device) first");
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!recording_) throw Error("Capture::input: " + str() + " has finished recording");
  auto impl = std::make_shared<TensorImpl>();
  impl->sink = shared_from_this();
  impl->id = new_id();
  impl->meta = t.impl()->meta;
  graph_.input_ids.push_back(impl->id);
  graph_.inputs.push_back(impl->meta);
  input_set_.insert(impl->id);
  to_inner_.emplace(impl->id, t.impl()->id);
  input_tensors_.push_back(t.detach());
  return Tensor(std::move(impl));
}

ir::Graph CaptureSink::finish(const std::vector<ir::TensorId>* outputs) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!recording_) throw Error("Capture::finish: " + str() + " has finished already");
  ir::Graph g = graph_;
  if (outputs) {
    for (size_t i = 0; i < outputs->size(); ++i) {
      if (!producer_.count((*outputs)[i])) {
        throw Error("Capture::finish: output " + std::to_string(i) +
                    " was not made by an op recorded on " + str() +
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

Tensor CaptureSink::release(const Tensor& captured) {
  if (!captured.defined() || captured.impl()->sink.get() != this) {
    throw Error("Capture::release: the tensor is not on " + str());
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (recording_) throw Error("Capture::release: " + str() + " is still recording");
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
  return Device(std::make_shared<detail::CaptureSink>(inner.sink()));
}

namespace graph {
namespace {
detail::CaptureSink& capture_sink(const Device& d) {
  return static_cast<detail::CaptureSink&>(*d.sink());
}
}  // namespace

Capture::Capture(const Device& inner) : device_(Device::capture(inner)) {}
Capture::~Capture() = default;
Tensor Capture::input(const Tensor& t) { return capture_sink(device_).input(t); }
Tensor Capture::release(const Tensor& captured) { return capture_sink(device_).release(captured); }

}  // namespace graph
}  // namespace tw
