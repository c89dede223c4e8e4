// The capture device's sink (tw::graph::Capture, tensorwire/graph.h): records each op it is
// given, in its own ids, and runs the op on the inner sink under ids of the inner sink's.
#pragma once
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "api/sink.h"
#include "ir/graph.h"
#include "tensorwire/tensor.h"

namespace tw::detail {

class CaptureSink final : public Sink, public std::enable_shared_from_this<CaptureSink> {
 public:
  explicit CaptureSink(std::shared_ptr<Sink> inner) : inner_(std::move(inner)) {}
  Device::Kind kind() const override { return Device::Kind::kCapture; }
  std::string str() const override { return "capture(" + inner_->str() + ")"; }
  bool supports(ir::OpCode code) override { return inner_->supports(code); }
  Status submit(ir::Op op) override;
  std::future<Result<TensorData>> read_async(ir::TensorId id) override;
  void drop(ir::TensorId id) override;
  Status sync() override { return inner_->sync(); }
  Status copy_to(ir::TensorId src, Sink& dst, ir::TensorId dst_id) override;
  Result<ir::GraphId> register_graph(ir::Graph graph) override;
  Status run_graph(ir::GraphId graph, std::span<const ir::TensorId> inputs,
                   std::span<const ir::TensorId> outputs) override;

  Tensor input(const Tensor& t);
  // Ends the recording; outputs: the given capture ids, or (null) the live recorded ones.
  ir::Graph finish(const std::vector<ir::TensorId>* outputs);
  Tensor release(const Tensor& captured);

 private:
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
