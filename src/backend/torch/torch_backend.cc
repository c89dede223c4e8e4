// The torch backend's executor: a table of at::Tensors (table_backend.h), the dispatch of each op
// to its kernel (torch_ops.h), reads, and the glue between tensorwire's buffers and ATen's.
//
// Memory: ATen's CPU allocator is replaced, once per process, by one that takes its blocks from
// tensorwire's buffer pool (core/buffer.h). Every tensor ATen creates then lives in a pooled
// Buffer: freed results are reused instead of paying for fresh pages (very slow on our hosts),
// and a read hands the result's Buffer over without a copy, as the CPU backend does.
#include <ATen/Parallel.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "backend/module.h"
#include "backend/registry.h"
#include "backend/table_backend.h"
#include "backend/torch/torch_ops.h"
#include "core/thread_pool.h"

namespace tw {
namespace torch {
namespace {

// ---- the pooled allocator ----

// Tensors made over a Buffer (tensor_over) carry it as their DataPtr's context.
void delete_buffer(void* ctx) { delete static_cast<Buffer*>(ctx); }

c10::DataPtr data_ptr_of(Buffer b) {
  void* data = b.data();
  return c10::DataPtr(data, new Buffer(std::move(b)), &delete_buffer, c10::Device(c10::kCPU));
}

// Blocks the allocator handed out, by address. ATen frees some allocations through a deleter
// that receives the address alone (Allocator::raw_deleter), so the address is the key. Live
// blocks of the pool never share an address.
struct Blocks {
  std::mutex mu;
  std::unordered_map<void*, Buffer> live;
};
Blocks& blocks() {
  static auto* b = new Blocks;  // leaked: tensors may be freed during exit
  return *b;
}

void free_block(void* data) {
  Buffer b;
  {
    std::lock_guard<std::mutex> lock(blocks().mu);
    auto it = blocks().live.find(data);
    if (it == blocks().live.end()) return;
    b = std::move(it->second);
    blocks().live.erase(it);
  }
  // b goes back to the pool here, after its address left the table.
}

class PoolAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) const override {
    if (n == 0) return c10::DataPtr(nullptr, c10::Device(c10::kCPU));
    Buffer b = Buffer::allocate(n);  // throws std::bad_alloc when memory runs out
    void* data = b.data();
    {
      std::lock_guard<std::mutex> lock(blocks().mu);
      blocks().live.emplace(data, std::move(b));
    }
    return c10::DataPtr(data, data, &free_block, c10::Device(c10::kCPU));
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_block; }
};

// Above c10's own CPU allocator (registered at priority 0), so nothing put in later at the
// default priority displaces it.
constexpr uint8_t kAllocatorPriority = 1;

void install_allocator() {
  static std::once_flag once;
  std::call_once(once, [] {
    static PoolAllocator allocator;
    c10::SetAllocator(c10::DeviceType::CPU, &allocator, kAllocatorPriority);
  });
}

}  // namespace
}  // namespace torch

template <>
struct TableTraits<at::Tensor> {
  static TensorMeta meta(const at::Tensor& t) { return torch::meta_of(t); }
  static uint64_t nbytes(const at::Tensor& t) {
    return static_cast<uint64_t>(t.numel()) * static_cast<uint64_t>(t.element_size());
  }
  static std::pair<const void*, size_t> storage(const at::Tensor& t) {
    if (!t.has_storage()) return {nullptr, 0};
    return {t.storage().unsafeGetStorageImpl(), t.storage().nbytes()};
  }
};

namespace torch {

at::ScalarType scalar_type(DType d) {
  switch (d) {
    case kF32: return at::kFloat;
    case kF64: return at::kDouble;
    case kI32: return at::kInt;
    case kI64: return at::kLong;
    case kU8: return at::kByte;
    case kI8: return at::kChar;
    case kBool: return at::kBool;
    case kF16: return at::kHalf;
    case kBF16: return at::kBFloat16;
  }
  return at::kFloat;  // unreachable: DType values are validated when decoded
}

at::TensorOptions options(DType d) { return at::TensorOptions().dtype(scalar_type(d)); }

Result<DType> dtype_of(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return kF32;
    case at::kDouble: return kF64;
    case at::kInt: return kI32;
    case at::kLong: return kI64;
    case at::kByte: return kU8;
    case at::kChar: return kI8;
    case at::kBool: return kBool;
    case at::kHalf: return kF16;
    case at::kBFloat16: return kBF16;
    default: break;
  }
  return internal_error(std::string("ATen dtype ") + c10::toString(t) + " has no tensorwire dtype");
}

std::vector<int64_t> sizes(const Shape& s) { return std::vector<int64_t>(s.begin(), s.end()); }

TensorMeta meta_of(const at::Tensor& t) {
  TensorMeta m;
  m.shape.assign(t.sizes().begin(), t.sizes().end());
  Result<DType> d = dtype_of(t.scalar_type());
  m.dtype = d.ok() ? *d : kF32;  // every tensor in the table has a tensorwire dtype
  return m;
}

Buffer buffer_of(const at::Tensor& contiguous) {
  const size_t nbytes = contiguous.numel() * contiguous.element_size();
  if (nbytes == 0) return Buffer();
  const c10::DataPtr& p = contiguous.storage().data_ptr();
  const auto* base = static_cast<const std::byte*>(p.get());
  const size_t offset = static_cast<const std::byte*>(contiguous.data_ptr()) - base;
  if (p.get_deleter() == &delete_buffer) {
    return static_cast<const Buffer*>(p.get_context())->slice(offset, nbytes);
  }
  if (p.get_deleter() == &free_block) {
    std::lock_guard<std::mutex> lock(blocks().mu);
    auto it = blocks().live.find(p.get_context());
    if (it != blocks().live.end()) return it->second.slice(offset, nbytes);
  }
  return Buffer::copy_of(contiguous.data_ptr(), nbytes);
}

at::Tensor tensor_over(Buffer bytes, const TensorMeta& meta) {
  const size_t nbytes = bytes.size();
  c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes, data_ptr_of(std::move(bytes)),
                       /*allocator=*/nullptr, /*resizable=*/false);
  return at::empty({0}, options(meta.dtype)).set_(storage, 0, sizes(meta.shape));
}

namespace {

// The host runner: tensorwire's CPU backend, private to this torch backend.
class CpuHost final : public HostRunner {
 public:
  ir::In put(const at::Tensor& t) override {
    const at::Tensor c = t.contiguous();
    ir::FromHost up;
    up.out = fresh();
    up.shape.assign(c.sizes().begin(), c.sizes().end());
    up.dtype = meta_of(c).dtype;
    up.data.data = buffer_of(c);
    pending_.push_back(up.out.id);
    (void)cpu_->execute(up);  // an error poisons the id; run() reports it
    return ir::In{up.out.id};
  }
  ir::Out fresh() override { return ir::Out{next_id_++}; }
  Result<at::Tensor> run(const ir::Op& op) override {
    const std::vector<ir::TensorId> outs = ir::op_outputs(op);
    Status st = cpu_->execute(op);
    Result<TensorData> data = st.ok() ? cpu_->read(outs.at(0)) : Result<TensorData>(st);
    for (ir::TensorId id : pending_) (void)cpu_->drop(id);
    for (ir::TensorId id : outs) (void)cpu_->drop(id);
    pending_.clear();
    if (!data.ok()) return data.status();
    return tensor_over(std::move(data->bytes), data->meta);
  }

 private:
  std::unique_ptr<Backend> cpu_ = make_cpu_backend();
  std::vector<ir::TensorId> pending_;
  ir::TensorId next_id_ = 1;
};

class TorchBackend final : public TableBackend<at::Tensor> {
 public:
  std::string name() const override { return "torch"; }
  DeviceKind kind() const override { return DeviceKind::kTorch; }
  // A kernel per op: run() below dispatches with std::visit over the overloads torch_ops.h
  // declares for every op of TW_OP_LIST, so every one is called here, and the module is linked
  // with -z defs (CMakeLists.txt): a kernel declared but defined nowhere fails the build.
  bool supports(ir::OpCode) override { return true; }

  Result<TensorData> read(ir::TensorId id) override {
    TW_ASSIGN_OR_RETURN(const at::Tensor* t, tensor(id));
    try {
      TensorData d;
      d.meta = meta_of(*t);
      d.bytes = buffer_of(t->contiguous());
      return d;
    } catch (const std::exception& e) {
      return internal_error("read: the torch backend failed: " + std::string(e.what()));
    }
  }

 protected:
  Result<std::vector<at::Tensor>> run(const ir::Op& op,
                                      const std::vector<TensorMeta>& metas) override {
    use_intra_op_threads();
    Ctx ctx(metas.at(0), host_);
    for (ir::TensorId id : ir::op_inputs(op)) {
      TW_ASSIGN_OR_RETURN(const at::Tensor* t, tensor(id));
      ctx.add_input(id, *t);
    }
    Result<std::vector<at::Tensor>> outs = internal_error("empty op");
    try {
      outs = std::visit(
          [&](const auto& o) -> Result<std::vector<at::Tensor>> {
            if constexpr (std::is_same_v<std::decay_t<decltype(o)>, std::monostate>) {
              return invalid_argument("empty op");
            } else {
              auto r = torch::run(o, ctx);
              if constexpr (std::is_same_v<decltype(r), Result<at::Tensor>>) {
                if (!r.ok()) return r.status();
                return std::vector<at::Tensor>{std::move(r).value()};
              } else {
                return r;
              }
            }
          },
          op);
    } catch (const c10::Error& e) {
      return internal_error(std::string("the torch backend failed: ") + e.what_without_backtrace());
    }
    if (!outs.ok()) return outs.status();
    if (outs->size() != metas.size()) {
      return internal_error("the torch kernel produced " + std::to_string(outs->size()) +
                            " outputs, inference said " + std::to_string(metas.size()));
    }
    for (size_t i = 0; i < metas.size(); ++i) {
      const at::Tensor& out = (*outs)[i];
      const TensorMeta got = meta_of(out);
      if (got != metas[i] || !dtype_of(out.scalar_type()).ok()) {
        return internal_error("the torch kernel produced " + meta_str(got) + " (ATen dtype " +
                              c10::toString(out.scalar_type()) + ") but inference said " +
                              meta_str(metas[i]));
      }
    }
    return std::move(outs).value();
  }

 private:
  // ATen's intra-op thread count follows tensorwire's (tw::set_num_threads). With ATen's
  // OpenMP backend the count is per calling thread, so each thread that runs ops sets it once,
  // and again when tensorwire's count changes.
  static void use_intra_op_threads() {
    thread_local int applied = 0;
    const int want = get_num_threads();
    if (applied == want) return;
    try {
      at::set_num_threads(want);
    } catch (const c10::Error&) {
      // A non-OpenMP ATen refuses once its pool has started; it keeps its own count then.
    }
    applied = want;
  }

  CpuHost host_;
};

}  // namespace
}  // namespace torch

}  // namespace tw

// The module's entry (backend/module.h): the torch backend has one device.
extern "C" tw::Backend* tw_backend_create(int ordinal, char* error, size_t error_size) {
  auto fail = [&](const std::string& why) { return tw::module_failure(why, error, error_size); };
  if (ordinal != 0) {
    return fail("the torch backend has one device, torch (torch:0); torch:" +
                std::to_string(ordinal) + " does not exist");
  }
  try {
    tw::torch::install_allocator();
    return new tw::torch::TorchBackend();
  } catch (const std::exception& e) {
    return fail(std::string("the torch backend could not be created: ") + e.what());
  }
}
