// The Backend interface: the one executor interface of tensorwire, behind every tw::Device.
// Implementations: cpu/ (built in) and torch/ (LibTorch, a module loaded on first use), both on
// TableBackend (table_backend.h), which execute ops here; the remote device
// (client/remote_backend.h), which ships them to a server; and the capture device
// (api/capture.h), which records them for an inner device. An executing backend never trusts its
// caller: execute() validates every op with ir::infer before running it, and no input can make
// it abort. Like ggml's backend interface (cpy_tensor_async, graph_compute, optional slots with
// defaults) it also copies tensors to another backend and runs registered graphs; the
// asynchronous slots (submit, read_async, flush, sync, host_copy, collective) have the eager
// defaults an executing backend wants, and the remote backend overrides them.
#pragma once
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backend/upload.h"
#include "core/host_info.h"
#include "core/status.h"
#include "core/tensor_data.h"
#include "ir/collective.h"
#include "ir/graph.h"
#include "ir/ops.h"
#include "tensorwire/device_kind.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw {

class Backend {
 public:
  virtual ~Backend() = default;
  // "cpu", "torch", "remote(tcp://host:port, 0)", "capture(cpu)": what tw::Device::str() says.
  virtual std::string name() const = 0;
  virtual DeviceKind kind() const = 0;
  // Whether this backend runs ops of this code (every op of the IR for the CPU backend; a remote
  // backend: whether its server's protocol has them, which may connect). Callers with a
  // composite fallback, such as optim::Adam for AdamStep, ask first.
  virtual bool supports(ir::OpCode code) = 0;
  // Whether a server may host it (tw::serve, a session's backend): OK for a backend that
  // executes ops itself; a remote or capture backend says why not.
  virtual Status hostable() const { return Status::OK(); }
  // Compute work this backend has given its device so far (a GPU backend's dispatches), for the
  // op table's check that each case on such a device ran there (host-side computing would pass
  // on a device whose memory the host can see, as lavapipe's); 0 for backends that compute on
  // the host.
  virtual uint64_t device_dispatches() const { return 0; }
  virtual bool counts_dispatches() const { return false; }  // whether the above is counted
  // A device's debugging layer, when one is loaded (Vulkan's VK_LAYER_KHRONOS_validation, with
  // TW_VULKAN_VALIDATION=1): its name and the warnings and errors it reported, with the last
  // one's text. Null: none loaded.
  struct DebugLayer {
    std::string name;
    uint64_t messages = 0;
    std::string last;
  };
  virtual std::optional<DebugLayer> debug_layer() const { return std::nullopt; }
  // What this device is: the hardware, its memory, and the dtypes and ops it runs. The server
  // lists it for each hosted device in its Welcome (protocol 16) and `tensorwire info` prints it.
  // The default describes a device whose tensors live in host memory (cpu, torch): the host's
  // CPU and memory, every dtype, and the ops supports() accepts; a GPU backend overrides it.
  struct Description {
    std::string model;          // "AMD EPYC 7B13 64-Core Processor (2 threads)", a GPU's name
    uint64_t memory_total = 0;  // bytes of the memory its tensors live in
    uint64_t memory_free = 0;   // of which free now
    bool host_memory = true;    // tensors in host RAM: the server's --max-memory covers them
    uint32_t dtype_mask = 0;    // bit i: DType i (a dtype it refuses for every op is not set)
    std::vector<uint16_t> ops;  // the op codes it runs, ascending
  };
  virtual Description describe() {
    const HostInfo host = host_info();
    Description d;
    d.model = host.cpu_model + " (" + std::to_string(host.threads) + " threads)";
    d.memory_total = host.memory_total;
    d.memory_free = host.memory_available;
    for (int i = 0; i < kNumDTypes; ++i) d.dtype_mask |= 1u << i;
    for (int c = 1; c <= ir::kNumOps; ++c) {
      if (supports(static_cast<ir::OpCode>(c))) d.ops.push_back(static_cast<uint16_t>(c));
    }
    return d;
  }
  // Whether calls may come from several threads at once without the caller's lock: the API
  // (api/sink.h) serialises every call to a backend that is not, and none to one that is (the
  // remote backend, whose reads wait without blocking other threads' ops).
  virtual bool thread_safe() const { return false; }

  // Validates and runs one op. On failure the op's outputs are recorded as poisoned with the
  // error (a later read of them, or of anything computed from them, returns that error) and the
  // error is returned. Output ids must not exist yet.
  //
  // The error contract of a device that runs ops asynchronously (a GPU queue): what the host can
  // check (validation, unknown or poisoned inputs, memory) still fails execute(); a kernel's own
  // failure may instead be found later, and execute() then returned OK. Such a failure must
  // (1) poison the op's outputs, and what was computed from them, with an error that names the
  // op (its number on this device and its name), before any read of them answers; (2) be
  // returned by the next sync(), once; and (3) leave the device usable for work that does not
  // depend on it. The cpu backend finds every failure in execute() and its sync() is always OK.
  // A test-only backend under tests/backends/ is a device of that kind, and the suites run it.
  virtual Status execute(const ir::Op& op) = 0;
  // execute() for an op whose output metas the caller has just inferred with ir::infer from the
  // metas of the same inputs (a device of this process: api/emit.cc validates every op where it
  // is called): the backend skips its own inference, which for a small op cost as much as
  // running it. Never for ops from elsewhere: the server runs execute() on everything it gets.
  virtual Status execute_inferred(const ir::Op& op, std::vector<TensorMeta> metas) {
    (void)metas;
    return execute(op);
  }
  // What the API calls with an op a program issued: runs it now (these defaults) or queues it (a
  // remote backend). An op's own error is recorded in its outputs, where a read reports it, so
  // submit() fails only when the device is unusable (a lost connection, say). `metas`, when
  // given, are the output metas the API has just inferred (execute_inferred).
  virtual Status submit(const ir::Op& op) {
    (void)execute(op);
    return Status::OK();
  }
  virtual Status submit_inferred(const ir::Op& op, std::vector<TensorMeta> metas) {
    (void)execute_inferred(op, std::move(metas));
    return Status::OK();
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
  // read() of a tensor the caller knows to hold `nbytes` bytes (from its meta; 0: not known),
  // which lets a remote backend over unix:// offer shared memory for a large one.
  virtual Result<TensorData> read_expecting(ir::TensorId id, uint64_t nbytes) {
    (void)nbytes;
    return read(id);
  }
  // The same as a future, for a program that does not need the values yet: ready at once here,
  // answered by the server for a remote backend. Wait for it with await().
  virtual std::future<Result<TensorData>> read_async(ir::TensorId id, uint64_t nbytes) {
    std::promise<Result<TensorData>> p;
    p.set_value(read_expecting(id, nbytes));
    return p.get_future();
  }
  virtual Result<TensorData> await(std::future<Result<TensorData>>& f) { return f.get(); }
  // A copy, taken now, of `n` bytes the caller owns, to upload as a FromHost op to this backend.
  // A remote backend over unix:// copies a large one straight into shared memory, and
  // submitting the op then sends no tensor bytes through the socket.
  virtual Buffer host_copy(const void* data, size_t n) { return Buffer::copy_of(data, n); }
  // Opens the device now rather than on first use (remote: the connection and handshake).
  virtual Status connect() { return Status::OK(); }
  // Sends queued ops now (remote); waits until every op submitted so far has run, and returns
  // the first failure found since the last sync() of an op whose execute() returned OK (an
  // asynchronous device's kernel error, naming the op; see execute()). The server's Sync runs it.
  virtual void flush() {}
  virtual Status sync() { return Status::OK(); }
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
  // When both ends can hand a tensor over directly (two remote backends: the source server
  // signs a capability and the destination takes the tensor from it), copy_to() does that
  // instead, and the bytes never pass through this process.
  virtual Status copy_to(ir::TensorId src, Backend& dst, ir::TensorId dst_id) {
    if (exports() && dst.imports()) {
      TW_ASSIGN_OR_RETURN(TensorHandoff h, export_tensor(src));
      return dst.import_tensor(h, dst_id);
    }
    TW_ASSIGN_OR_RETURN(TensorData data, read(src));
    return dst.execute(from_host_of(std::move(data), dst_id));
  }
  // A tensor made ready to be taken by another backend without a copy through this process.
  struct TensorHandoff {
    std::string domain;  // who holds it: the server's id (a destination of the same one moves it)
    std::string url;     // where to fetch it from, as this process reached the holder
    std::string fingerprint;  // the holder's TLS certificate fingerprint to pin ("": CAs)
    uint64_t session = 0;     // the holder's session, and the tensor's id in it
    ir::TensorId id = 0;
    std::string capability;  // signed by the holder: single use, expiring
    TensorMeta meta;
  };
  virtual bool exports() { return false; }
  virtual bool imports() { return false; }
  virtual Result<TensorHandoff> export_tensor(ir::TensorId id) {
    return unimplemented(name() + " cannot hand tensor %" + std::to_string(id) + " over");
  }
  virtual Status import_tensor(const TensorHandoff& h, ir::TensorId dst_id) {
    (void)h;
    return unimplemented(name() + " cannot take a tensor handed over as %" +
                         std::to_string(dst_id));
  }

  // Collectives across servers (tw::dist): the server this backend can join one on (empty
  // server_id when it cannot: every local backend, and a remote one whose server is too old),
  // with where the others reach it (rank 0's is the rendezvous), and this backend's part of one.
  // The API runs a collective among backends without a server with ops instead.
  struct CollectiveDomain {
    std::string server_id, url, fingerprint;
  };
  virtual Result<CollectiveDomain> collective_domain() { return CollectiveDomain{}; }
  virtual Status collective(const ir::CollectiveSpec& spec) {
    return unimplemented(name() + " takes no part in collectives across servers (" +
                         ir::collective_name(spec.kind) + ")");
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

  // How a backend that replays registered graphs in its device's own recorded form (a CUDA
  // Graph; a recorded Vulkan command buffer could) ran graph `id` so far; zeros for one that runs
  // every graph op by op. A debugging counter (tests, device checks).
  struct GraphReplay {
    uint64_t recorded = 0;     // recordings made (captures that succeeded)
    uint64_t replays = 0;      // runs that launched the recording
    uint64_t eager = 0;        // runs op by op (the run that prepares a recording included)
    std::string eager_reason;  // why the last op-by-op run was one ("": none was, or it prepared)
  };
  virtual Result<GraphReplay> graph_replay(ir::GraphId) const { return GraphReplay{}; }
};

}  // namespace tw
TW_INTERNAL_END
