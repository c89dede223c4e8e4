// The capture device's backend (tw::graph::Capture, tensorwire/graph.h): a decorator that records
// each op it is given, in its own ids, and runs the op on the inner device under ids of the
// inner device's. A server never hosts it (hostable()).
#pragma once
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "api/sink.h"
#include "ir/graph.h"
#include "tensorwire/export.h"
#include "tensorwire/tensor.h"

TW_INTERNAL_BEGIN

namespace tw::detail {

class CaptureBackend final : public Backend {
 public:
  explicit CaptureBackend(std::shared_ptr<Sink> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return "capture(" + inner_->str() + ")"; }
  DeviceKind kind() const override { return DeviceKind::kCapture; }
  bool supports(ir::OpCode code) override { return inner_->supports(code); }
  Status hostable() const override;
  bool thread_safe() const override { return true; }  // its own lock, then the inner device's
  // Records the op and submits it to the inner device; fails only for an op it cannot record.
  Status execute(const ir::Op& op) override;
  Status submit(const ir::Op& op) override { return execute(op); }
  Status submit_inferred(const ir::Op& op, std::vector<TensorMeta>) override { return execute(op); }
  // Reads (after the recording) are the inner device's, under its id.
  Result<TensorData> read(ir::TensorId id) override;
  Result<TensorData> read_expecting(ir::TensorId id, uint64_t nbytes) override;
  std::future<Result<TensorData>> read_async(ir::TensorId id, uint64_t nbytes) override;
  Result<TensorData> await(std::future<Result<TensorData>>& f) override { return inner_->await(f); }
  Status drop(ir::TensorId id) override;
  Status sync() override { return inner_->sync(); }
  void flush() override { inner_->flush(); }
  Status copy_to(ir::TensorId src, Backend& dst, ir::TensorId dst_id) override;
  Result<ir::GraphId> register_graph(ir::Graph graph) override;
  Status run_graph(ir::GraphId graph, std::span<const ir::TensorId> inputs,
                   std::span<const ir::TensorId> outputs) override;
  // A server never hosts it, so a session never asks these; the tensors live on the inner device.
  void set_memory_limit(uint64_t, RefuseFn) override {}
  void fail(const ir::Op&, const Status&) override {}
  Result<TensorMeta> meta(ir::TensorId id) const override;
  size_t bytes_held() const override { return 0; }

  // A trace input `id` (a fresh id of the capture device) standing for inner tensor `t`.
  void add_input(ir::TensorId id, const Tensor& t);
  // Ends the recording; outputs: the given capture ids, or (null) the live recorded ones.
  ir::Graph finish(const std::vector<ir::TensorId>* outputs);
  Tensor release(const Tensor& captured);
  const std::shared_ptr<Sink>& inner() const { return inner_; }

 private:
  // The inner id a read of `id` reads, or why there is none.
  Result<ir::TensorId> readable_inner(ir::TensorId id) const;
  std::string not_recordable(ir::TensorId id, const std::string& what) const;

  const std::shared_ptr<Sink> inner_;
  mutable std::mutex mu_;
  bool recording_ = true;
  ir::Graph graph_;
  std::vector<Tensor> input_tensors_;  // the inner tensors behind the inputs, kept alive
  std::unordered_set<ir::TensorId> input_set_;
  std::unordered_map<ir::TensorId, ir::TensorId> to_inner_;
  std::unordered_map<ir::TensorId, size_t> producer_;  // recorded id -> index of its op
  std::vector<ir::TensorId> produced_;                 // in the order ops made them
  std::unordered_set<ir::TensorId> live_;              // produced and not dropped
};

}  // namespace tw::detail
TW_INTERNAL_END
