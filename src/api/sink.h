// The device-side contract behind tw::Device: a Sink accepts ops (ir::Op, already validated by
// the API), answers reads and forgets dropped tensors, copies a tensor to another sink and runs
// registered graphs. The local devices execute eagerly on a Backend; the remote device (client/)
// queues ops and ships them in batches.
#pragma once
#include <atomic>
#include <future>
#include <memory>
#include <mutex>
#include <span>
#include <string>

#include "backend/backend.h"
#include "core/tensor_data.h"
#include "ir/graph.h"
#include "ir/ops.h"
#include "tensorwire/device.h"

namespace tw::autograd {
struct AutogradMeta;
}

namespace tw::detail {

class Sink {
 public:
  virtual ~Sink() = default;
  virtual Device::Kind kind() const = 0;
  virtual std::string str() const = 0;
  // Whether the device runs ops of this kind (a remote device: whether its server's protocol has
  // them). Callers with a composite fallback, such as optim::Adam for AdamStep, ask first.
  virtual bool supports(ir::OpCode code) { return (void)code, true; }
  // A fresh tensor id (ids are chosen by the client, so creating a tensor never waits).
  ir::TensorId new_id() { return next_id_.fetch_add(1, std::memory_order_relaxed); }
  // Queues or runs one op. An error of an eagerly executed op is recorded in its outputs (a
  // read of them reports it), exactly as a remote device does; submit itself fails only when
  // the device is unusable.
  virtual Status submit(ir::Op op) = 0;
  // submit() of an op emit() has validated, with the output metas it inferred: a device that
  // executes in this process may skip inferring them again (Backend::execute_inferred).
  virtual Status submit_inferred(ir::Op op, std::vector<TensorMeta> metas) {
    (void)metas;
    return submit(std::move(op));
  }
  virtual std::future<Result<TensorData>> read_async(ir::TensorId id) = 0;
  virtual Result<TensorData> read(ir::TensorId id) { return read_async(id).get(); }
  // Waits for a read_async() result.
  virtual Result<TensorData> await(std::future<Result<TensorData>>& f) { return f.get(); }
  // read()/read_async() of a tensor the caller knows to hold `nbytes` bytes (from its meta),
  // which lets a remote sink over unix:// offer shared memory for a large one (the bytes then
  // land there, no copy through the socket).
  virtual Result<TensorData> read_expecting(ir::TensorId id, uint64_t nbytes) {
    (void)nbytes;
    return read(id);
  }
  virtual std::future<Result<TensorData>> read_async_expecting(ir::TensorId id, uint64_t nbytes) {
    (void)nbytes;
    return read_async(id);
  }
  // A copy, taken now, of `n` bytes the caller owns, to upload as a FromHost op to this sink. A
  // remote sink over unix:// copies a large one straight into shared memory, and submitting the
  // op then sends no tensor bytes through the socket.
  virtual Buffer host_copy(const void* data, size_t n) { return Buffer::copy_of(data, n); }
  virtual void drop(ir::TensorId id) = 0;
  virtual Status sync() = 0;
  virtual Status connect() { return Status::OK(); }
  virtual void flush() {}

  // Makes `dst_id` (a fresh id from dst.new_id(); dst may be this sink) a copy of tensor `src`.
  // This default reads the tensor and uploads it to dst as FromHost (a host round trip); sinks
  // that can do better, such as two local backends, override it. On failure (an unknown or
  // poisoned `src`, an unusable device) nothing is created at dst_id.
  virtual Status copy_to(ir::TensorId src, Sink& dst, ir::TensorId dst_id) {
    TW_ASSIGN_OR_RETURN(TensorData data, read(src));
    return dst.submit(from_host_of(std::move(data), dst_id));
  }
  // Validates every op of `graph` once and keeps it (Backend::register_graph); an invalid graph
  // is refused here, naming the op.
  virtual Result<ir::GraphId> register_graph(ir::Graph graph) = 0;
  // Runs a registered graph on this sink's tensors `inputs`, storing its outputs under
  // `outputs` (fresh ids from new_id()). A bad call fails; an op's failure is recorded in the
  // outputs it reaches (a read reports it), and an eager sink also returns it.
  virtual Status run_graph(ir::GraphId graph, std::span<const ir::TensorId> inputs,
                           std::span<const ir::TensorId> outputs) = 0;

 private:
  std::atomic<ir::TensorId> next_id_{1};
};

// A sink over a local Backend: eager, one op at a time (a mutex makes it safe to share across
// threads).
class BackendSink final : public Sink {
 public:
  BackendSink(std::unique_ptr<Backend> backend, Device::Kind kind)
      : backend_(std::move(backend)), kind_(kind) {}
  Device::Kind kind() const override { return kind_; }
  std::string str() const override { return backend_->name(); }
  bool supports(ir::OpCode code) override { return backend_->supports(code); }
  Status submit(ir::Op op) override;
  Status submit_inferred(ir::Op op, std::vector<TensorMeta> metas) override;
  std::future<Result<TensorData>> read_async(ir::TensorId id) override;
  void drop(ir::TensorId id) override;
  Status sync() override { return Status::OK(); }
  // Between two local sinks the backends copy directly (Backend::copy_to: no future, and
  // between CPU backends the storage is shared instead of copied).
  Status copy_to(ir::TensorId src, Sink& dst, ir::TensorId dst_id) override;
  Result<ir::GraphId> register_graph(ir::Graph graph) override;
  Status run_graph(ir::GraphId graph, std::span<const ir::TensorId> inputs,
                   std::span<const ir::TensorId> outputs) override;
  Backend& backend() { return *backend_; }

 private:
  std::mutex mu_;
  std::unique_ptr<Backend> backend_;
  const Device::Kind kind_;
};

// Drops an id when the last of several TensorImpls naming it goes (see TensorImpl::shared_owner).
struct IdOwner {
  std::shared_ptr<Sink> sink;
  ir::TensorId id = 0;
  IdOwner() = default;
  IdOwner(const IdOwner&) = delete;  // two owners of one id would drop it twice
  IdOwner& operator=(const IdOwner&) = delete;
  ~IdOwner() {
    if (sink && id) sink->drop(id);
  }
};

struct TensorImpl {
  std::shared_ptr<Sink> sink;
  ir::TensorId id = 0;
  TensorMeta meta;
  // Autograd's state (api/autograd.h); null for a tensor that takes no part in it.
  std::shared_ptr<autograd::AutogradMeta> autograd;
  // Set once a second TensorImpl names the same id (Tensor::detach, and autograd saving an op's
  // output without its graph links, which would otherwise form a cycle): then the id is dropped
  // by whichever impl goes last, through this owner.
  std::shared_ptr<IdOwner> shared_owner;
  ~TensorImpl() {
    if (!shared_owner && sink && id) sink->drop(id);
  }
};

}  // namespace tw::detail
