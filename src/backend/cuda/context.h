// One CUDA device of this process (cuda:N), shared by every cuda backend made for it (a local
// device, each of a server's sessions), and what each of those backends owns: a stream.
//
// Memory: device tensors come from the device's stream-ordered pool (cudaMallocFromPoolAsync on
// a cudaMemPool whose release threshold keeps freed memory cached: the CUDA runtime's own
// caching allocator, which reuses a block on the stream that freed it at once and never calls
// cudaMalloc in steady state). A block is freed on the stream that used it (one session's), when
// the last view of it drops. Host copies go through pinned staging blocks from a per-device pool
// (power-of-two size classes): an upload copies into one and the DMA reads it; a read lands in
// one, which becomes the bytes handed back (Buffer::wrap), so a read makes no further copy.
//
// Errors: the runtime API only (no driver API, no -lcuda: the module loads on machines without a
// driver and says so). A launch error fails its op; an error found at a sync or read (a kernel's
// illegal address, say) fails that call naming the last op queued, and when the error is sticky
// (the CUDA context is unusable) the device is marked failed: every later op of any session on
// it fails with that error, while other devices and the server go on.
#pragma once
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/cuda/capture_plan.h"
#include "core/buffer.h"
#include "core/status.h"

namespace tw::cuda {

struct DeviceInfo {
  std::string name;  // "NVIDIA H100 80GB HBM3"
  int major = 0, minor = 0, sms = 0;
  uint64_t memory_bytes = 0;
};

class Device {
 public:
  // Device `ordinal`, made once per process; an error saying why it cannot be made: "no CUDA
  // device: <the runtime's reason>" (no driver, none present) or "no CUDA device N: ...".
  static Result<Device*> get(int ordinal);

  int ordinal() const { return ordinal_; }
  const DeviceInfo& info() const { return info_; }
  const std::string& name() const { return name_; }  // "cuda:0"
  cudaMemPool_t pool() const { return pool_; }

  // Makes this device current on the calling thread; the device's failure if it has failed.
  Status enter();
  // OK for cudaSuccess; else the error naming `what`, marking the device failed when sticky.
  Status check(cudaError_t err, const std::string& what);
  bool failed() const { return failed_.load(); }

  // Pinned host memory of at least `bytes` (a size class), back to the pool when the last
  // reference drops.
  Result<std::shared_ptr<void>> pinned(uint64_t bytes);

  void count_dispatch(uint64_t n = 1) { dispatches_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t dispatches() const { return dispatches_.load(std::memory_order_relaxed); }

 private:
  explicit Device(int ordinal) : ordinal_(ordinal), name_("cuda:" + std::to_string(ordinal)) {}
  Status init();
  void release_pinned(void* p, uint64_t size_class);

  int ordinal_;
  std::string name_;
  DeviceInfo info_;
  cudaMemPool_t pool_ = nullptr;
  std::atomic<bool> failed_{false};
  std::mutex mu_;                                       // failure_, pinned_free_
  std::string failure_;                                 // the sticky error's text
  std::map<uint64_t, std::vector<void*>> pinned_free_;  // size class -> free blocks
  uint64_t pinned_cached_ = 0;
  std::atomic<uint64_t> dispatches_{0};
};

// A stream of one backend (a session), alive while any of its blocks is.
struct Stream {
  Device* dev = nullptr;
  cudaStream_t s = nullptr;
  ~Stream();
};

// A registered graph's arena for its CUDA Graph (capture_plan.h, cuda_backend.cc). Recording
// (the graph's first run, op by op), the kernels' allocations come from the pool as usual and
// the planner notes them; serving (inside the capture), each comes from a block made before the
// capture began (make_blocks), so no allocation happens inside it, and the CUDA Graph then reads
// and writes those blocks at every launch: they are the graph's for good, freed with the arena.
struct GraphArena {
  explicit GraphArena(std::shared_ptr<Stream> s) : stream(std::move(s)) {}
  ~GraphArena();
  GraphArena(const GraphArena&) = delete;
  GraphArena& operator=(const GraphArena&) = delete;
  // The planner's blocks, from the pool, outside any capture; then serving.
  Status make_blocks();

  std::shared_ptr<Stream> stream;
  BlockPlanner planner;
  bool serving = false;
  std::vector<void*> blocks;  // planner.sizes()'s, once made
  uint64_t missed = 0;        // serving: the size of the first allocation no block served
};

// A device buffer of the pool, freed on its stream when the last view drops; or a block of a
// graph's arena, which goes back to the arena's planner instead.
struct DeviceBlock {
  std::shared_ptr<Stream> stream;
  void* ptr = nullptr;
  uint64_t size = 0;
  std::shared_ptr<GraphArena> arena;  // non-null: noted in (recording) or served by its arena
  size_t arena_block = 0;
  uint64_t arena_generation = 0;
  bool pooled = true;  // ptr is the pool's, freed here (false: the arena's block)
  ~DeviceBlock();
};
using Storage = std::shared_ptr<DeviceBlock>;

// Whether a CUDA error leaves the context unusable (every later call fails with it).
bool is_sticky(cudaError_t err);

}  // namespace tw::cuda
