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

#include "backend/cuda/kernels.h"
#include "backend/kernel_dispatch.h"
#include "backend/module.h"

namespace tw::cuda {
namespace {

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && std::string(v) == "1";
}

class CudaBackend final : public TableBackend<CuTensor> {
 public:
  explicit CudaBackend(Exec ex)
      : ex_(std::move(ex)), name_(ex_.dev->name()), kernels_(&ex_, name_, this) {}
  ~CudaBackend() override {
    // Queued work may still use the handle: let it finish first (the tensors' blocks are freed
    // in stream order afterwards, and keep the stream alive until then).
    if (ex_.dev->enter().ok()) (void)cudaStreamSynchronize(ex_.stream->s);
    if (ex_.lt) cublasLtDestroy(ex_.lt);
#if TW_CUDA_CUDNN
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

 private:
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
};

// A backend's execution state on device `dev`: its stream, cuBLASLt handle and workspace.
Result<Exec> make_exec(Device* dev) {
  TW_RETURN_NOT_OK(dev->enter());
  Exec ex;
  ex.dev = dev;
  ex.tf32 = env_flag("TW_CUDA_TF32");
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
