// A backend that passes every call to another one (by default a cpu backend), for tests that
// change one thing about a device: what it says it is (describe), how it fails. Subclass it and
// override what the test is about.
#pragma once
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/registry.h"

namespace tw::testing {

class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(std::unique_ptr<Backend> inner = make_cpu_backend())
      : inner_(std::move(inner)) {}

  std::string name() const override { return inner_->name(); }
  DeviceKind kind() const override { return inner_->kind(); }
  bool supports(ir::OpCode code) override { return inner_->supports(code); }
  Description describe() override { return inner_->describe(); }
  Status execute(const ir::Op& op) override { return inner_->execute(op); }
  Status execute_inferred(const ir::Op& op, std::vector<TensorMeta> metas) override {
    return inner_->execute_inferred(op, std::move(metas));
  }
  Status submit(const ir::Op& op) override { return inner_->submit(op); }
  Status submit_inferred(const ir::Op& op, std::vector<TensorMeta> metas) override {
    return inner_->submit_inferred(op, std::move(metas));
  }
  void set_memory_limit(uint64_t bytes, RefuseFn refuse) override {
    inner_->set_memory_limit(bytes, std::move(refuse));
  }
  void fail(const ir::Op& op, const Status& error) override { inner_->fail(op, error); }
  Result<TensorData> read(ir::TensorId id) override { return inner_->read(id); }
  Result<TensorData> read_expecting(ir::TensorId id, uint64_t nbytes) override {
    return inner_->read_expecting(id, nbytes);
  }
  Status sync() override { return inner_->sync(); }
  Status readable(ir::TensorId id) override { return inner_->readable(id); }
  Result<TensorMeta> meta(ir::TensorId id) const override { return inner_->meta(id); }
  Result<uint64_t> nbytes(ir::TensorId id) const override { return inner_->nbytes(id); }
  Status drop(ir::TensorId id) override { return inner_->drop(id); }
  size_t bytes_held() const override { return inner_->bytes_held(); }
  Result<ir::GraphId> register_graph(ir::Graph graph) override {
    return inner_->register_graph(std::move(graph));
  }
  Status run_graph(ir::GraphId graph, std::span<const ir::TensorId> inputs,
                   std::span<const ir::TensorId> outputs) override {
    return inner_->run_graph(graph, inputs, outputs);
  }
  Result<GraphMemory> graph_memory(ir::GraphId graph) const override {
    return inner_->graph_memory(graph);
  }

 protected:
  std::unique_ptr<Backend> inner_;
};

}  // namespace tw::testing
