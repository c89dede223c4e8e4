// The cuda backend's executor: a table of CuTensors (table_backend.h) on a stream of its own, the
// dispatch of each op it runs to its kernel (kernels.h), reads, and the module's entry
// (backend/module.h). Ops are queued on the stream and return at once; an error the device
// reports later (a kernel's illegal address) comes back from the next read or sync, naming the
// last op queued, and a sticky one marks the device failed (context.h). An op it has no kernel
// for is refused by supports() (TableBackend names op and device); a dtype or case a kernel does
// not run is refused by the kernel. Nothing runs on the host in the device's place.
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <unordered_map>

#include "backend/cuda/kernels.h"
#include "backend/kernel_dispatch.h"
#include "backend/module.h"

namespace tw::cuda {
namespace {

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && std::string(v) == "1";
}
bool env_off(const char* name) {
  const char* v = std::getenv(name);
  return v && std::string(v) == "0";
}

class CudaBackend final : public TableBackend<CuTensor> {
 public:
  explicit CudaBackend(Exec ex)
      : ex_(std::move(ex)), name_(ex_.dev->name()), kernels_(&ex_, name_, this) {}
  ~CudaBackend() override {
    // Queued work may still use the handle: let it finish first (the tensors' blocks are freed
    // in stream order afterwards, and keep the stream alive until then).
    if (ex_.dev->enter().ok()) (void)cudaStreamSynchronize(ex_.stream->s);
    captured_.clear();  // the CUDA Graphs (their buffers go once no tensor views them)
    if (ex_.lt) cublasLtDestroy(ex_.lt);
#if TW_CUDA_CUDNN
    ex_.sdpa.reset();  // cuDNN's plans, before their handle
    if (ex_.dnn) cudnnDestroy(ex_.dnn);
#endif
  }
  std::string name() const override { return name_; }
  DeviceKind kind() const override { return DeviceKind::kLocal; }
  bool supports(ir::OpCode code) override {
    return kernel_codes<Kernels>()[static_cast<size_t>(code)];
  }
  uint64_t device_dispatches() const override { return ex_.dev->dispatches(); }
  bool counts_dispatches() const override { return true; }
  // The GPU, its memory (total from the device's properties, free from cudaMemGetInfo: what the
  // whole device has free, other processes' use included), and every dtype but i8.
  Description describe() override {
    Description d = Backend::describe();  // the ops supports() accepts, every dtype
    const DeviceInfo& info = ex_.dev->info();
    d.model = info.name + " (sm_" + std::to_string(info.major) + std::to_string(info.minor) + ", " +
              std::to_string(info.sms) + " SMs)";
    d.host_memory = false;
    d.memory_total = info.memory_bytes;
    size_t free = 0, total = 0;
    d.memory_free =
        ex_.dev->enter().ok() && cudaMemGetInfo(&free, &total) == cudaSuccess ? free : 0;
    d.dtype_mask &= ~(1u << static_cast<int>(kI8));  // no kernel type for i8 (docs/cuda.md)
    return d;
  }

  Result<GraphReplay> graph_replay(ir::GraphId id) const override {
    auto it = captured_.find(id);
    if (it == captured_.end()) return GraphReplay{};
    return it->second->counts;
  }

  Status sync() override {
    TW_RETURN_NOT_OK(ex_.dev->enter());
    TW_RETURN_NOT_OK(queued_error(cudaStreamSynchronize(ex_.stream->s)));
    return ex_.index_check ? ex_.index_check->take(ex_.index_check->seq) : Status::OK();
  }

  Result<TensorData> read(ir::TensorId id) override {
    std::future<Result<TensorData>> f = read_async(id, 0);
    return f.get();
  }

  // The copy to pinned memory is queued now with an event after it; the future waits on the
  // event, and the pinned block becomes the bytes handed back (no further copy).
  std::future<Result<TensorData>> read_async(ir::TensorId id, uint64_t) override {
    Result<std::function<Result<TensorData>()>> waiter = queue_read(id);
    if (!waiter.ok()) {
      std::promise<Result<TensorData>> p;
      p.set_value(waiter.status());
      return p.get_future();
    }
    return std::async(std::launch::deferred, std::move(*waiter));
  }

 protected:
  Result<std::vector<CuTensor>> run(const ir::Op& op,
                                    const std::vector<TensorMeta>& metas) override {
    TW_RETURN_NOT_OK(ex_.dev->enter());
    // i8 (the quantized element type) has no kernel type here yet: refused whole, in or out.
    for (const TensorMeta& m : metas) {
      if (m.dtype == kI8) return unsupported_dtype(ir::op_name(op), kI8, name_, "no i8 kernels");
    }
    for (ir::TensorId id : ir::op_inputs(op)) {
      Result<const CuTensor*> t = tensor(id);
      if (t.ok() && (*t)->dtype == kI8) {
        return unsupported_dtype(ir::op_name(op), kI8, name_, "no i8 kernels");
      }
    }
    kernels_.set_metas(&metas);
    Result<std::vector<CuTensor>> r = run_kernel<CuTensor>(kernels_, op, name_);
    kernels_.set_metas(nullptr);
    return r;
  }

  // A registered graph as a CUDA Graph (capture_plan.h says the steps): recorded op by op on its
  // first run, captured and launched on its second, launched on every later one.
  Status run_graph_program(GraphRun& run) override {
    std::unique_ptr<Captured>& slot = captured_[run.id()];
    if (!slot) slot = std::make_unique<Captured>();
    Captured& c = *slot;
    bool poisoned = false;
    for (size_t i = 0; i < run.program().input_metas.size(); ++i) poisoned |= !run.input(i);
    EagerReason why = EagerReason::kNone;
    switch (next_graph_step(c.state, graphs_enabled_, poisoned, &why)) {
      case GraphStep::kRecord: return record(run, c);
      case GraphStep::kCapture: return capture(run, c);
      case GraphStep::kReplay: return replay(run, c, true);
      case GraphStep::kEager: break;
    }
    ++c.counts.eager;
    c.counts.eager_reason = eager_reason_name(why);
    return run.run_ops();
  }

 private:
  // A registered graph's CUDA Graph and what it reads and writes.
  struct Captured {
    GraphCaptureState state;
    std::shared_ptr<GraphArena> arena;
    std::vector<CuTensor> inputs;   // the graph's own dense input buffers
    std::vector<CuTensor> sources;  // the tensor each was last copied from (kept: same values)
    std::vector<CuTensor> outputs;  // as captured: views of the arena or of the input buffers
    CaptureHost host;
    cudaGraphExec_t exec = nullptr;
    uint64_t launches = 0;  // kernel launches in the graph (the dispatch counter's share)
    int64_t counted = 0;    // bytes of the input buffers and arena counted in bytes_held()
    std::vector<std::pair<int64_t, IndexCheck::Launch>> index_launches;
    GraphReplay counts;
    ~Captured() {
      if (exec) (void)cudaGraphExecDestroy(exec);
    }
  };

  // Copies the caller's inputs into the graph's input buffers (made on first use), but for an
  // input that is the tensor copied last time: tensors never change, so the buffer holds it.
  Status copy_inputs(GraphRun& run, Captured& c) {
    const std::vector<TensorMeta>& metas = run.program().input_metas;
    if (c.inputs.size() != metas.size()) {
      c.inputs.clear();
      for (const TensorMeta& m : metas) {
        TW_ASSIGN_OR_RETURN(CuTensor t, kernels_.fresh(m));
        const auto bytes = static_cast<int64_t>(t.numel() * dtype_size(t.dtype));
        run.count_bytes(bytes);
        c.counted += bytes;
        c.inputs.push_back(std::move(t));
      }
      c.sources.assign(metas.size(), CuTensor{});
    }
    for (size_t i = 0; i < metas.size(); ++i) {
      const CuTensor& x = *run.input(i);
      CuTensor& last = c.sources[i];
      if (last.storage && last.storage == x.storage && last.offset == x.offset &&
          last.strides == x.strides && last.shape == x.shape) {
        continue;
      }
      const uint64_t n = static_cast<uint64_t>(x.numel()) * dtype_size(x.dtype);
      if (n > 0 && x.contiguous()) {
        TW_RETURN_NOT_OK(ex_.dev->check(cudaMemcpyAsync(c.inputs[i].storage->ptr, x.data(), n,
                                                        cudaMemcpyDeviceToDevice, ex_.stream->s),
                                        "copying graph input " + std::to_string(i)));
      } else if (n > 0) {
        TW_RETURN_NOT_OK(kernels_.copy_into(x, c.inputs[i], "graph input copy"));
      }
      last = x;
    }
    return Status::OK();
  }
  // Output k a copy of its own where it views memory the next run writes again (the arena, the
  // input buffers); `all`: every output (after a launch).
  void copy_outputs(GraphRun& run, const Captured& c, bool all) {
    for (size_t k = 0; k < run.program().output_slots.size(); ++k) {
      const CuTensor* t = all ? &c.outputs[k] : run.output(k);
      if (!t || !t->storage) {
        if (all) run.set_output(k, *t);  // an empty tensor
        continue;
      }
      bool shared = all || !t->storage->pooled;
      for (const CuTensor& in : c.inputs) shared = shared || in.storage == t->storage;
      if (!shared) continue;
      Result<CuTensor> copy = kernels_.contiguous(*t);
      if (copy.ok()) {
        run.set_output(k, std::move(*copy));
      } else {
        run.set_output_error(
            k, copy.status().with_context("copying graph output " + std::to_string(k)));
      }
    }
  }
  // Every output poisoned with `err` (a launch that could not happen), which is returned.
  Status fail_outputs(GraphRun& run, const Status& err) {
    for (size_t k = 0; k < run.program().output_slots.size(); ++k) run.set_output_error(k, err);
    return err;
  }

  // The first run: op by op on the input buffers, noting every allocation in a new arena.
  Status record(GraphRun& run, Captured& c) {
    ++c.counts.eager;
    Status in = copy_inputs(run, c);
    if (!in.ok()) {  // (out of memory for the buffers, say): op by op, and again next time
      forget(run, c, EagerReason::kNone);
      return run.run_ops();
    }
    for (size_t i = 0; i < c.inputs.size(); ++i) run.bind_input(i, c.inputs[i]);
    c.arena = std::make_shared<GraphArena>(ex_.stream);
    ex_.arena = c.arena;
    const Status st = run.run_ops();
    ex_.arena = nullptr;
    after_graph_step(c.state, GraphStep::kRecord,
                     st.ok() ? EagerReason::kNone : EagerReason::kOpFailed);
    copy_outputs(run, c, false);
    if (!st.ok()) forget(run, c, EagerReason::kOpFailed);
    return st;
  }

  // The second run: the ops captured on the stream with every allocation from the arena, the
  // CUDA Graph instantiated and launched. Where that fails, the graph runs op by op from now on,
  // this run too (the capture computed nothing).
  Status capture(GraphRun& run, Captured& c) {
    Status prep = copy_inputs(run, c);
    c.host = CaptureHost{};
    for (const GraphOp& op : run.program().ops) {
      const auto* up = std::get_if<ir::FromHost>(&op.op);
      if (!prep.ok() || !up || up->data.data.empty()) continue;
      Result<std::shared_ptr<void>> p = ex_.dev->pinned(up->data.data.size());
      if (p.ok())
        c.host.staging.push_back(std::move(*p));
      else
        prep = p.status();
    }
    if (prep.ok()) prep = c.arena->make_blocks();
    if (prep.ok()) {
      const auto bytes = static_cast<int64_t>(c.arena->planner.total_bytes());
      run.count_bytes(bytes);
      c.counted += bytes;
    }
    if (!prep.ok()) {  // memory for the graph's buffers: op by op this time, capture next time
      ++c.counts.eager;
      c.counts.eager_reason = prep.message();
      run.reset();
      return run.run_ops();
    }
    for (size_t i = 0; i < c.inputs.size(); ++i) run.bind_input(i, c.inputs[i]);
    const int64_t seq0 = ex_.index_check ? ex_.index_check->seq : 0;
    const uint64_t launches0 = ex_.launches;
    cudaStream_t s = ex_.stream->s;
    ex_.arena = c.arena;
    ex_.capture = &c.host;
    // Thread-local: only this thread's unsafe calls (a synchronisation, a cudaMalloc) break the
    // capture; other sessions on the device go on.
    const cudaError_t begin = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    const Status st = begin == cudaSuccess ? run.run_ops() : Status::OK();
    cudaGraph_t graph = nullptr;
    const cudaError_t end = begin == cudaSuccess ? cudaStreamEndCapture(s, &graph) : begin;
    ex_.arena = nullptr;
    ex_.capture = nullptr;
    EagerReason failure = EagerReason::kNone;
    std::string detail;
    if (c.arena->missed) {
      failure = EagerReason::kArenaMiss;
      detail = std::to_string(c.arena->missed) + " bytes";
    } else if (!st.ok() || end != cudaSuccess) {
      failure = EagerReason::kCaptureRefused;
      detail = !st.ok() ? st.message() : std::string(cudaGetErrorName(end));
    } else {
      const cudaError_t inst = cudaGraphInstantiate(&c.exec, graph, 0);
      if (inst != cudaSuccess) {
        failure = EagerReason::kInstantiate;
        detail = cudaGetErrorName(inst);
        c.exec = nullptr;
      }
    }
    if (graph) (void)cudaGraphDestroy(graph);
    (void)cudaGetLastError();  // a capture's refusal is not sticky: nothing else should see it
    after_graph_step(c.state, GraphStep::kCapture, failure);
    if (failure != EagerReason::kNone) {
      run.reset();
      forget(run, c, failure);
      ++c.counts.eager;
      c.counts.eager_reason += " (" + detail + ")";
      return run.run_ops();
    }
    ++c.counts.recorded;
    c.launches = ex_.launches - launches0;
    if (ex_.index_check) {
      for (auto it = ex_.index_check->launches.upper_bound(seq0);
           it != ex_.index_check->launches.end(); ++it) {
        c.index_launches.emplace_back(it->first, it->second);
      }
    }
    c.outputs.clear();
    for (size_t k = 0; k < run.program().output_slots.size(); ++k) {
      c.outputs.push_back(*run.output(k));  // every op ran (st is OK), so each is a tensor
    }
    return replay(run, c, false);
  }

  // A launch of the CUDA Graph (inputs copied in first unless the capture just did), with the
  // outputs copied out.
  Status replay(GraphRun& run, Captured& c, bool inputs) {
    if (inputs) {
      Status in = copy_inputs(run, c);
      if (!in.ok()) return fail_outputs(run, in);
    }
    Status st = ex_.dev->check(cudaGraphLaunch(c.exec, ex_.stream->s),
                               "launching graph " + std::to_string(run.id()) + " (a CUDA Graph)");
    if (!st.ok()) return fail_outputs(run, st);
    ex_.launches += c.launches;
    ex_.dev->count_dispatch(c.launches);
    ex_.last_op = "graph " + std::to_string(run.id()) + " (a CUDA Graph launch)";
    // The graph's index ops check their indices as when captured: their launches are known
    // again, so a bad index fails the next read or sync with the op's message.
    if (ex_.index_check) {
      for (const auto& [seq, l] : c.index_launches) ex_.index_check->launches[seq] = l;
    }
    ++c.counts.replays;
    copy_outputs(run, c, true);
    return Status::OK();
  }

  // A graph refused for good (`why`; kNone: its buffers only), its buffers gone.
  void forget(GraphRun& run, Captured& c, EagerReason why) {
    if (why != EagerReason::kNone) c.counts.eager_reason = eager_reason_name(why);
    run.count_bytes(-c.counted);
    c.counted = 0;
    c.arena.reset();
    c.inputs.clear();
    c.sources.clear();
    c.outputs.clear();
    c.host = CaptureHost{};
  }

  // An error a synchronisation found: it belongs to work queued earlier.
  Status queued_error(cudaError_t err) {
    if (err == cudaSuccess) return Status::OK();
    return ex_.dev->check(err, "work queued on the stream (the last op queued: " +
                                   (ex_.last_op.empty() ? std::string("none") : ex_.last_op) + ")");
  }

  Result<std::function<Result<TensorData>()>> queue_read(ir::TensorId id) {
    TW_ASSIGN_OR_RETURN(const CuTensor* t0, tensor(id));
    TW_RETURN_NOT_OK(ex_.dev->enter());
    auto data = std::make_shared<TensorData>();
    data->meta = t0->meta();
    const uint64_t n = static_cast<uint64_t>(t0->numel()) * dtype_size(t0->dtype);
    if (n == 0) return std::function<Result<TensorData>()>([data] { return *data; });
    CuTensor keep;
    const CuTensor* t = t0;
    if (!t0->contiguous()) {
      TW_ASSIGN_OR_RETURN(keep, kernels_.contiguous(*t0));
      t = &keep;
    }
    Device* dev = ex_.dev;
    cudaStream_t s = ex_.stream->s;
    TW_ASSIGN_OR_RETURN(std::shared_ptr<void> pinned, dev->pinned(n));
    TW_RETURN_NOT_OK(
        dev->check(cudaMemcpyAsync(pinned.get(), t->data(), n, cudaMemcpyDeviceToHost, s),
                   "read of " + tensor_id_str(id)));
    cudaEvent_t ev = nullptr;
    TW_RETURN_NOT_OK(
        dev->check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate"));
    const cudaError_t rec = cudaEventRecord(ev, s);
    if (rec != cudaSuccess) {
      (void)cudaEventDestroy(ev);
      TW_RETURN_NOT_OK(dev->check(rec, "cudaEventRecord"));
    }
    // The device block (for a contiguous copy) must outlive the copy: the stream orders its
    // free after the copy, so dropping `keep` here is safe.
    const std::string last = ex_.last_op;
    auto stream = ex_.stream;
    std::shared_ptr<IndexCheck> check = ex_.index_check;
    const int64_t upto = check ? check->seq : 0;
    return std::function<Result<TensorData>()>([data, pinned, ev, n, dev, stream, last, id, check,
                                                upto]() -> Result<TensorData> {
      (void)cudaSetDevice(dev->ordinal());
      const cudaError_t err = cudaEventSynchronize(ev);
      (void)cudaEventDestroy(ev);
      if (err != cudaSuccess) {
        return dev->check(err, "read of " + tensor_id_str(id) +
                                   " (an op queued before it failed; the last op queued: " + last +
                                   ")");
      }
      // An index out of range found by an index kernel queued before the read.
      if (check) TW_RETURN_NOT_OK(check->take(upto));
      data->bytes = Buffer::wrap(pinned.get(), n, pinned);
      return std::move(*data);
    });
  }

  Exec ex_;
  std::string name_;
  Kernels kernels_;
  bool graphs_enabled_ = !env_off("TW_CUDA_GRAPHS");  // TW_CUDA_GRAPHS=0: every graph op by op
  std::unordered_map<ir::GraphId, std::unique_ptr<Captured>> captured_;
};

// A backend's execution state on device `dev`: its stream, cuBLASLt handle and workspace.
Result<Exec> make_exec(Device* dev) {
  TW_RETURN_NOT_OK(dev->enter());
  Exec ex;
  ex.dev = dev;
  ex.tf32 = env_flag("TW_CUDA_TF32");
  if (const char* m = std::getenv("TW_CUDA_SDPA")) {
    const std::string mode = m;
    ex.sdpa_mode = mode == "cudnn"    ? SdpaMode::kCudnn
                   : mode == "kernel" ? SdpaMode::kKernel
                                      : SdpaMode::kAuto;
  }
  ex.stream = std::make_shared<Stream>();
  ex.stream->dev = dev;
  TW_RETURN_NOT_OK(dev->check(cudaStreamCreateWithFlags(&ex.stream->s, cudaStreamNonBlocking),
                              "cudaStreamCreate"));
  if (cublasLtCreate(&ex.lt) != CUBLAS_STATUS_SUCCESS) {
    return unavailable(dev->name() + ": cublasLtCreate failed (is libcublasLt usable here?)");
  }
#if TW_CUDA_CUDNN
  if (cudnnCreate(&ex.dnn) != CUDNN_STATUS_SUCCESS ||
      cudnnSetStream(ex.dnn, ex.stream->s) != CUDNN_STATUS_SUCCESS) {
    if (ex.dnn) cudnnDestroy(ex.dnn);
    cublasLtDestroy(ex.lt);
    return unavailable(dev->name() + ": cudnnCreate failed (is libcudnn usable here?)");
  }
#endif
  // Without mapped host memory the index ops are refused (index.cc); everything else runs.
  Result<std::shared_ptr<IndexCheck>> check = make_index_check(dev);
  if (check.ok()) ex.index_check = std::move(*check);
  ex.workspace = std::make_shared<DeviceBlock>();
  ex.workspace->stream = ex.stream;
  Status st = dev->check(
      cudaMallocFromPoolAsync(&ex.workspace->ptr, kWorkspaceBytes, dev->pool(), ex.stream->s),
      "cuBLASLt workspace");
  if (!st.ok()) {
    cublasLtDestroy(ex.lt);
#if TW_CUDA_CUDNN
    cudnnDestroy(ex.dnn);
#endif
    return st;
  }
  ex.workspace->size = kWorkspaceBytes;
  return ex;
}

}  // namespace
}  // namespace tw::cuda

// The module's entry (backend/module.h): CUDA device `ordinal` of this machine.
extern "C" tw::Backend* tw_backend_create(int ordinal, char* error, size_t error_size) {
  auto fail = [&](const std::string& why) { return tw::module_failure(why, error, error_size); };
  try {
    tw::Result<tw::cuda::Device*> dev = tw::cuda::Device::get(ordinal);
    if (!dev.ok()) return fail(dev.status().message());
    tw::Result<tw::cuda::Exec> ex = tw::cuda::make_exec(*dev);
    if (!ex.ok()) return fail(ex.status().message());
    return new tw::cuda::CudaBackend(std::move(*ex));
  } catch (const std::exception& e) {
    return fail(std::string("the cuda backend could not be created: ") + e.what());
  }
}
