// What a tw::Device holds: any Backend (backend/backend.h: cpu, torch, the remote backend of
// client/remote_backend.h, the capture backend of api/capture.h), the counter its tensor ids
// come from (ids are chosen by the client, so creating a tensor never waits), and a lock that
// serialises calls to a backend that is not thread_safe(). Nothing else: what a device does is
// its backend's.
#pragma once
#include <atomic>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>

#include "backend/backend.h"
#include "core/tensor_data.h"
#include "ir/graph.h"
#include "ir/ops.h"
#include "tensorwire/device.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw::autograd {
struct AutogradMeta;
}

namespace tw::detail {

class Sink {
  // (first: the calls below deduce their types from it)
  // The lock is recursive: a decorator (capture) calls its inner device, which may be the other
  // end of a copy whose locks this thread holds already.
  template <class F>
  auto locked(F&& f) {
    std::unique_lock<std::recursive_mutex> lock(mu_, std::defer_lock);
    if (locks_) lock.lock();
    return f();
  }

 public:
  explicit Sink(std::unique_ptr<Backend> backend)
      : backend_(std::move(backend)), locks_(!backend_->thread_safe()) {}
  Sink(const Sink&) = delete;
  Sink& operator=(const Sink&) = delete;

  Device::Kind kind() const { return backend_->kind(); }
  std::string str() const { return backend_->name(); }
  ir::TensorId new_id() { return next_id_.fetch_add(1, std::memory_order_relaxed); }
  // The backend itself, for calls that hold no lock of their own (a decorator's inner device, or
  // an API extension such as tw::remote_stats on a backend it knows is thread-safe).
  Backend& backend() { return *backend_; }

  // Each of these is the backend's call of the same name under the lock (Backend documents it).
  bool supports(ir::OpCode code) {
    return locked([&] { return backend_->supports(code); });
  }
  Status submit(const ir::Op& op) {
    return locked([&] { return backend_->submit(op); });
  }
  Status submit_inferred(const ir::Op& op, std::vector<TensorMeta> metas) {
    return locked([&] { return backend_->submit_inferred(op, std::move(metas)); });
  }
  Result<TensorData> read(ir::TensorId id, uint64_t nbytes = 0) {
    return locked([&] { return backend_->read_expecting(id, nbytes); });
  }
  std::future<Result<TensorData>> read_async(ir::TensorId id, uint64_t nbytes = 0) {
    return locked([&] { return backend_->read_async(id, nbytes); });
  }
  // Waits for a read_async() result (without the lock: other threads' ops go on meanwhile).
  Result<TensorData> await(std::future<Result<TensorData>>& f) { return backend_->await(f); }
  Buffer host_copy(const void* data, size_t n) {
    return locked([&] { return backend_->host_copy(data, n); });
  }
  // An id unknown to the backend (never created) needs no freeing: the error is dropped.
  void drop(ir::TensorId id) {
    (void)locked([&] { return backend_->drop(id); });
  }
  Status sync() {
    return locked([&] { return backend_->sync(); });
  }
  Status connect() {
    return locked([&] { return backend_->connect(); });
  }
  void flush() {
    (void)locked([&] {
      backend_->flush();
      return 0;
    });
  }
  Result<ir::GraphId> register_graph(ir::Graph graph) {
    return locked([&] { return backend_->register_graph(std::move(graph)); });
  }
  Status run_graph(ir::GraphId graph, std::span<const ir::TensorId> inputs,
                   std::span<const ir::TensorId> outputs) {
    return locked([&] { return backend_->run_graph(graph, inputs, outputs); });
  }
  Status collective(const ir::CollectiveSpec& spec) {
    return locked([&] { return backend_->collective(spec); });
  }
  Result<Backend::CollectiveDomain> collective_domain() {
    return locked([&] { return backend_->collective_domain(); });
  }
  // Makes `dst_id` (a fresh id from dst.new_id(); dst may be this sink) a copy of tensor `src`
  // (Backend::copy_to), with both sinks' locks held (taken together, so two copies in opposite
  // directions cannot deadlock). On failure nothing is created at dst_id.
  Status copy_to(ir::TensorId src, Sink& dst, ir::TensorId dst_id);
  // copy_to() for a decorator's inner device (CaptureBackend), whose destination backend the
  // caller holds the lock of already.
  Status copy_to_backend(ir::TensorId src, Backend& dst, ir::TensorId dst_id) {
    return locked([&] { return backend_->copy_to(src, dst, dst_id); });
  }

 private:
  std::unique_ptr<Backend> backend_;
  const bool locks_;
  std::recursive_mutex mu_;
  std::atomic<ir::TensorId> next_id_{1};
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
TW_INTERNAL_END
