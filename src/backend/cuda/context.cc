#include "backend/cuda/context.h"

#include <cstdint>
#include <cstdlib>

namespace tw::cuda {

bool is_sticky(cudaError_t err) {
  switch (err) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
    case cudaErrorContextIsDestroyed:
    case cudaErrorDevicesUnavailable:
    case cudaErrorUnknown: return true;
    default: return false;
  }
}

Result<Device*> Device::get(int ordinal) {
  static std::mutex mu;
  static auto* devices = new std::map<int, std::unique_ptr<Device>>;  // leaked: process-wide
  std::lock_guard<std::mutex> lock(mu);
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    // Reset the error the runtime keeps for this thread: nothing else should see it.
    (void)cudaGetLastError();
    return unavailable(std::string("no CUDA device: ") + cudaGetErrorString(err) + " (" +
                       cudaGetErrorName(err) + " from cudaGetDeviceCount)");
  }
  if (count == 0) return unavailable("no CUDA device: the CUDA driver reports none");
  if (ordinal < 0 || ordinal >= count) {
    return unavailable("no CUDA device " + std::to_string(ordinal) + ": this machine has " +
                       std::to_string(count) + " (cuda:0 to cuda:" + std::to_string(count - 1) +
                       ")");
  }
  auto& d = (*devices)[ordinal];
  if (!d) {
    std::unique_ptr<Device> made(new Device(ordinal));
    TW_RETURN_NOT_OK(made->init());
    d = std::move(made);
  }
  return d.get();
}

Status Device::init() {
  TW_RETURN_NOT_OK(check(cudaSetDevice(ordinal_), "cudaSetDevice"));
  cudaDeviceProp prop{};
  TW_RETURN_NOT_OK(check(cudaGetDeviceProperties(&prop, ordinal_), "cudaGetDeviceProperties"));
  info_.name = prop.name;
  info_.major = prop.major;
  info_.minor = prop.minor;
  info_.sms = prop.multiProcessorCount;
  info_.memory_bytes = prop.totalGlobalMem;
  // The device's pool; freed memory stays cached (threshold: all of it) instead of going back to
  // the driver at each synchronisation.
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = ordinal_;
  TW_RETURN_NOT_OK(check(cudaMemPoolCreate(&pool_, &props), "cudaMemPoolCreate"));
  uint64_t threshold = UINT64_MAX;
  TW_RETURN_NOT_OK(
      check(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &threshold),
            "cudaMemPoolSetAttribute"));
  return Status::OK();
}

Status Device::enter() {
  if (failed_.load()) {
    std::lock_guard<std::mutex> lock(mu_);
    return unavailable(name_ + " has failed and takes no more work: " + failure_ +
                       " (a sticky CUDA error; restart the process to use this GPU again)");
  }
  const cudaError_t err = cudaSetDevice(ordinal_);
  if (err != cudaSuccess) return check(err, "cudaSetDevice");
  return Status::OK();
}

Status Device::check(cudaError_t err, const std::string& what) {
  if (err == cudaSuccess) return Status::OK();
  const std::string text = std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
  if (is_sticky(err)) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failed_.load()) failure_ = what + ": " + text;
    failed_.store(true);
    return internal_error(name_ + ": " + what + " failed: " + text +
                          "; the device is marked failed (a sticky CUDA error)");
  }
  (void)cudaGetLastError();  // a non-sticky error: clear it for the next call
  if (err == cudaErrorMemoryAllocation) {
    return resource_exhausted(name_ + ": " + what + ": out of device memory (" + text +
                              "); free tensors or use a smaller batch");
  }
  return internal_error(name_ + ": " + what + " failed: " + text);
}

namespace {
constexpr uint64_t kMinPinned = 64 * 1024;
constexpr uint64_t kMaxPinnedCached = 256ull << 20;  // pinned memory kept for reuse, per device
uint64_t pinned_class(uint64_t bytes) {
  uint64_t c = kMinPinned;
  while (c < bytes) c *= 2;
  return c;
}
}  // namespace

Result<std::shared_ptr<void>> Device::pinned(uint64_t bytes) {
  const uint64_t cls = pinned_class(bytes);
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pinned_free_.find(cls);
    if (it != pinned_free_.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      pinned_cached_ -= cls;
    }
  }
  if (!p) TW_RETURN_NOT_OK(check(cudaMallocHost(&p, cls), "cudaMallocHost (pinned staging)"));
  return std::shared_ptr<void>(p, [this, cls](void* q) { release_pinned(q, cls); });
}

void Device::release_pinned(void* p, uint64_t cls) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (pinned_cached_ + cls <= kMaxPinnedCached) {
      pinned_free_[cls].push_back(p);
      pinned_cached_ += cls;
      return;
    }
  }
  (void)cudaFreeHost(p);
}

Stream::~Stream() {
  if (s) {
    (void)cudaSetDevice(dev->ordinal());
    (void)cudaStreamDestroy(s);  // returns at once; queued work completes first
  }
}

DeviceBlock::~DeviceBlock() {
  if (arena) arena->planner.release(arena_block, arena_generation);
  if (ptr && pooled) {
    (void)cudaSetDevice(stream->dev->ordinal());
    (void)cudaFreeAsync(ptr, stream->s);  // reusable in this stream's order
  }
}

Status GraphArena::make_blocks() {
  Device* dev = stream->dev;
  TW_RETURN_NOT_OK(dev->enter());
  for (uint64_t bytes : planner.sizes()) {
    void* p = nullptr;
    Status st = dev->check(cudaMallocFromPoolAsync(&p, bytes, dev->pool(), stream->s),
                           "allocating a CUDA Graph's buffers (" + std::to_string(bytes) +
                               " bytes of " + std::to_string(planner.total_bytes()) + ")");
    if (!st.ok()) {  // none kept: a later attempt starts again
      for (void* q : blocks) (void)cudaFreeAsync(q, stream->s);
      blocks.clear();
      return st;
    }
    blocks.push_back(p);
  }
  planner.start_serving();
  serving = true;
  return Status::OK();
}

GraphArena::~GraphArena() {
  if (blocks.empty()) return;
  (void)cudaSetDevice(stream->dev->ordinal());
  // After every launch of the graph queued on the stream: they were queued before.
  for (void* p : blocks) (void)cudaFreeAsync(p, stream->s);
}

}  // namespace tw::cuda
