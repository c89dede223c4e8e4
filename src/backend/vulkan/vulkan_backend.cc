// The vulkan backend's executor: a table of VkTensors (table_backend.h), the dispatch of each op
// it runs to its kernel (kernels.h), reads, and the module's entry (backend/module.h). An op it
// has no kernel for is refused by supports() (TableBackend names op and device); a dtype or case
// a kernel does not run is refused by the kernel (unsupported_dtype). Nothing runs on the host
// in the device's place.
#include <algorithm>
#include <cstring>
#include <future>

#include "backend/module.h"
#include "backend/vulkan/kernels.h"

namespace tw::vk {
namespace {

template <class Op>
constexpr bool kHasKernel = requires(const Op& op, Kernels& k) {
  k.run(op);
};

class VulkanBackend final : public TableBackend<VkTensor> {
 public:
  explicit VulkanBackend(Context* ctx)
      : ctx_(ctx), name_("vulkan:" + std::to_string(ctx->ordinal())), kernels_(ctx, name_, this) {}
  std::string name() const override { return name_; }
  DeviceKind kind() const override { return DeviceKind::kLocal; }
  bool supports(ir::OpCode code) override { return kernel_codes()[static_cast<size_t>(code)]; }
  uint64_t device_dispatches() const override { return ctx_->dispatches(); }
  bool counts_dispatches() const override { return true; }
  // The device's name and type, its largest device-local heap, and every dtype but i8 (and f64
  // without shaderFloat64). A CPU device (lavapipe) keeps its tensors in host memory: free is
  // the host's. A GPU's free memory is given as its heap (Vulkan reports use only through
  // VK_EXT_memory_budget, which the backend does not enable); the server's budget for the
  // device then tracks what its sessions hold.
  Description describe() override {
    Description d = Backend::describe();  // the ops supports() accepts, every dtype
    const DeviceInfo& info = ctx_->info();
    d.model = info.name + " (Vulkan, " + info.type + ")";
    d.host_memory = info.type == "cpu";
    d.memory_total = info.memory_bytes;
    d.memory_free = d.host_memory ? std::min(d.memory_free, info.memory_bytes) : info.memory_bytes;
    d.dtype_mask &= ~(1u << static_cast<int>(kI8));
    if (!info.f64) d.dtype_mask &= ~(1u << static_cast<int>(kF64));
    return d;
  }
  std::optional<DebugLayer> debug_layer() const override {
    if (!ctx_->validation_enabled()) return std::nullopt;
    return DebugLayer{"VK_LAYER_KHRONOS_validation", ctx_->validation_messages(),
                      ctx_->last_validation_message()};
  }
  Status sync() override { return ctx_->sync(); }

  // The copy to staging is recorded and submitted now; a thread waits on its submission's
  // fence and completes the future (ready() turns true without a caller waiting, as a remote
  // device's reply does), while the host goes on recording ops.
  std::future<Result<TensorData>> read_async(ir::TensorId id, uint64_t nbytes) override {
    (void)nbytes;
    auto ready = [](Result<TensorData> r) {
      std::promise<Result<TensorData>> p;
      p.set_value(std::move(r));
      return p.get_future();
    };
    Result<const VkTensor*> t = tensor(id);
    if (!t.ok()) return ready(t.status());
    TensorData d;
    d.meta = (*t)->meta();
    const uint64_t es = dtype_size((*t)->dtype);
    const uint64_t n = static_cast<uint64_t>((*t)->numel()) * es;
    if (n == 0) return ready(std::move(d));
    const VkTensor* src = *t;
    VkTensor dense;
    if (!src->contiguous()) {
      Result<VkTensor> c = kernels_.contiguous(*src);
      if (!c.ok()) return ready(c.status());
      dense = std::move(c).value();
      src = &dense;
    }
    Result<Context::PendingDownload> pending =
        ctx_->start_download(*src->storage, src->offset * es, n);
    if (!pending.ok()) return ready(pending.status());
    Context* ctx = ctx_;
    return std::async(
        std::launch::async,
        [ctx, d = std::move(d), p = std::move(pending).value()]() mutable -> Result<TensorData> {
          TW_ASSIGN_OR_RETURN(d.bytes, ctx->finish_download(p));
          return std::move(d);
        });
  }

  Result<TensorData> read(ir::TensorId id) override {
    TW_ASSIGN_OR_RETURN(const VkTensor* t, tensor(id));
    TensorData d;
    d.meta = t->meta();
    const uint64_t es = dtype_size(t->dtype);
    const uint64_t n = static_cast<uint64_t>(t->numel()) * es;
    if (n == 0) return d;
    if (t->contiguous()) {
      TW_ASSIGN_OR_RETURN(d.bytes, ctx_->download(*t->storage, t->offset * es, n));
      return d;
    }
    TW_ASSIGN_OR_RETURN(VkTensor dense, kernels_.contiguous(*t));
    TW_ASSIGN_OR_RETURN(d.bytes, ctx_->download(*dense.storage, 0, n));
    return d;
  }

 protected:
  Result<std::vector<VkTensor>> run(const ir::Op& op,
                                    const std::vector<TensorMeta>& metas) override {
    // i8 (the quantized element type) has no shader type here: refused whole, in or out.
    for (const TensorMeta& m : metas) {
      if (m.dtype == kI8) return unsupported_dtype(ir::op_name(op), kI8, name_, "no i8 shaders");
    }
    for (ir::TensorId id : ir::op_inputs(op)) {
      Result<const VkTensor*> t = tensor(id);
      if (t.ok() && (*t)->dtype == kI8) {
        return unsupported_dtype(ir::op_name(op), kI8, name_, "no i8 shaders");
      }
    }
    kernels_.set_metas(&metas);
    // A kernel gives its op's one output, or all of them (ops with several outputs).
    Result<std::vector<VkTensor>> r = std::visit(
        [&](const auto& o) -> Result<std::vector<VkTensor>> {
          using O = std::decay_t<decltype(o)>;
          if constexpr (kHasKernel<O>) {
            auto one = kernels_.run(o);
            if constexpr (std::is_same_v<decltype(one), Result<std::vector<VkTensor>>>) {
              return one;
            } else {
              if (!one.ok()) return one.status();
              std::vector<VkTensor> v;
              v.push_back(std::move(one).value());
              return v;
            }
          } else {
            return unsupported_op(ir::op_name(op), name_);
          }
        },
        op);
    kernels_.set_metas(nullptr);
    return r;
  }

 private:
  // Which op codes have a kernel here (Kernels::run overloads), from the op list.
  static const std::vector<bool>& kernel_codes() {
    static const std::vector<bool> codes = [] {
      std::vector<bool> v(256, false);
#define TW_VK_CODE(Name, code, since) v[code] = kHasKernel<ir::Name>;
      TW_OP_LIST(TW_VK_CODE)
#undef TW_VK_CODE
      return v;
    }();
    return codes;
  }

  Context* ctx_;
  std::string name_;
  Kernels kernels_;
};

}  // namespace
}  // namespace tw::vk

// The module's entry (backend/module.h): device `ordinal` of the Vulkan devices this machine has.
extern "C" tw::Backend* tw_backend_create(int ordinal, char* error, size_t error_size) {
  auto fail = [&](const std::string& why) { return tw::module_failure(why, error, error_size); };
  try {
    tw::Result<tw::vk::Context*> ctx = tw::vk::Context::get(ordinal);
    if (!ctx.ok()) return fail(ctx.status().message());
    return new tw::vk::VulkanBackend(*ctx);
  } catch (const std::exception& e) {
    return fail(std::string("the vulkan backend could not be created: ") + e.what());
  }
}
