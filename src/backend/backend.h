// The Backend interface: an executor of the op IR over its own tensor table. Implementations:
// cpu/ (built in) and torch/ (LibTorch, a module loaded on first use), both on TableBackend
// (table_backend.h). A backend never trusts its caller: execute() validates every op with
// ir::infer before running it, and no input can make it abort. Like ggml's backend interface
// (cpy_tensor_async, graph_compute) it also copies tensors to another backend and runs
// registered graphs.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "backend/upload.h"
#include "core/status.h"
#include "core/tensor_data.h"
#include "ir/graph.h"
#include "ir/ops.h"

namespace tw {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Whether this backend has a kernel for the op (every op of the IR for the CPU backend).
  virtual bool supports(ir::OpCode code) const = 0;

  // Validates and runs one op. On failure the op's outputs are recorded as poisoned with the
  // error (a later read of them, or of anything computed from them, returns that error) and the
  // error is returned. Output ids must not exist yet.
  virtual Status execute(const ir::Op& op) = 0;
  // execute() for an op whose output metas the caller has just inferred with ir::infer from the
  // metas of the same inputs (a device of this process: api/emit.cc validates every op where it
  // is called): the backend skips its own inference, which for a small op cost as much as
  // running it. Never for ops from elsewhere: the server runs execute() on everything it gets.
  virtual Status execute_inferred(const ir::Op& op, std::vector<TensorMeta> metas) {
    (void)metas;
    return execute(op);
  }
  // Caps the tensor bytes this backend holds: execute() asks refuse(op, bytes held, bytes
  // needed) about an op whose outputs would take it past `bytes`, checked on the inference
  // execute() does anyway; an error poisons the outputs, OK lets the op run after all. The
  // server's sessions set 0, so that they are asked about every op that allocates and can
  // reserve its bytes in the server-wide budget first (src/server/session.cc).
  using RefuseFn = std::function<Status(const ir::Op& op, uint64_t have, uint64_t need)>;
  virtual void set_memory_limit(uint64_t bytes, RefuseFn refuse) = 0;
  // Records `op` as failed with `error` without running it (its outputs become poisoned), as
  // when the server refuses an op over a session's memory quota.
  virtual void fail(const ir::Op& op, const Status& error) = 0;
  // A contiguous host copy of a tensor, or the error it was poisoned with.
  virtual Result<TensorData> read(ir::TensorId id) = 0;
  // OK when read(id) would give the tensor, else the error it would give (the poisoning error,
  // an unknown id), without the copy a read may make: the server asks before refusing a read
  // too large for a frame, so that a poisoned tensor reports why it was poisoned.
  virtual Status readable(ir::TensorId id) { return read(id).status(); }
  virtual Result<TensorMeta> meta(ir::TensorId id) const = 0;
  // The bytes read(id) would give (numel times the dtype's size), or meta()'s error; without the
  // copy of the shape meta() makes (the server sizes every read before it makes it).
  virtual Result<uint64_t> nbytes(ir::TensorId id) const {
    Result<TensorMeta> m = meta(id);
    if (!m.ok()) return m.status();
    return static_cast<uint64_t>(numel(m->shape)) * dtype_size(m->dtype);
  }
  // Forgets a tensor; its memory is freed once no view refers to it. Unknown ids: kNotFound.
  virtual Status drop(ir::TensorId id) = 0;
  // Bytes of tensor storage held by this backend's table (views counted once per buffer).
  virtual size_t bytes_held() const = 0;

  // Makes `dst_id` (a fresh id of `dst`, which may be this backend) a copy of tensor `src`.
  // This default reads a host copy and hands it to dst as FromHost; a CPU backend's read shares
  // the storage and its FromHost adopts it, so a copy between CPU backends moves no byte. On
  // failure (an unknown or poisoned `src`) nothing is created at dst_id.
  virtual Status copy_to(ir::TensorId src, Backend& dst, ir::TensorId dst_id) {
    TW_ASSIGN_OR_RETURN(TensorData data, read(src));
    return dst.execute(from_host_of(std::move(data), dst_id));
  }
  // Validates every op of `graph` once (ir::validate_graph) and keeps it; an invalid graph is
  // refused here, naming the op, and never runs.
  virtual Result<ir::GraphId> register_graph(ir::Graph graph) = 0;
  // Runs a registered graph with its inputs bound to `inputs` (live tensors of this backend
  // whose metas equal the graph's declared ones) and its outputs stored under `outputs` (fresh
  // ids). The ops execute one by one exactly as execute() runs them eagerly, so the results are
  // bit-identical; intermediates are freed after their last reader. A bad call (unknown graph,
  // wrong inputs, used output ids) fails before anything runs and poisons the output ids that
  // are free with its error (so a peer that sent the run unanswered reads the reason); an op's
  // failure poisons the outputs it reaches and is returned.
  virtual Status run_graph(ir::GraphId graph, std::span<const ir::TensorId> inputs,
                           std::span<const ir::TensorId> outputs) = 0;

  // What a registered graph's planned buffers (its arena) hold: a backend that plans them
  // allocates a run's intermediates from storage reserved at registration, so a steady-state run
  // takes no fresh memory. Zeros where the backend plans nothing.
  struct GraphMemory {
    uint64_t planned_bytes = 0;      // reserved at registration; counted in bytes_held()
    uint64_t allocations = 0;        // intermediates taken from the arena, all runs together
    uint64_t fresh_allocations = 0;  // of those, the ones the reservation did not cover
  };
  virtual Result<GraphMemory> graph_memory(ir::GraphId) const { return GraphMemory{}; }
};

std::unique_ptr<Backend> make_cpu_backend();

}  // namespace tw
