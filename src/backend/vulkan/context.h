// One Vulkan device of this process (vulkan:N), shared by every vulkan backend made for it (each
// a tensor table: a local device, or a server's session): the instance and logical device, the
// pipelines (created once per shader variant and specialisation), device memory, and the one
// command stream every op is recorded into.
//
// Memory: tensors live in device-local buffers from a caching allocator (power-of-two size
// classes; a freed buffer goes back to its class and is reused in stream order, so steady-state
// work allocates nothing). Uploads and reads pass through host-visible staging buffers.
//
// Execution: each op records its dispatch (and a barrier) into the current command buffer; the
// buffer is submitted when it holds kBatchOps dispatches or when the host needs a result (a
// read, sync), never once per op. A read records the copy to staging, submits, and waits on the
// batch's fence. Every dispatch is counted (dispatches()): the op table checks that each case on
// this device ran device work.
//
// Errors are Status; nothing here aborts. Thread safety: every member takes the context's
// mutex (sessions of one server share it).
#pragma once
#include <vulkan/vulkan.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/status.h"

namespace tw::vk {

class Context;

// A buffer of the allocator's (device-local, or host-visible staging); a Storage's deleter gives
// it back to its size class when the last reference drops.
struct DeviceBuffer {
  Context* ctx = nullptr;
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceMemory memory = VK_NULL_HANDLE;
  uint64_t size = 0;          // the size class (>= what was asked)
  uint8_t* mapped = nullptr;  // a host-visible staging buffer's mapping (null: device-local)
};
using Storage = std::shared_ptr<DeviceBuffer>;

// A tensor argument of a dispatch: its buffer (null: unused binding).
struct Binding {
  const DeviceBuffer* buf = nullptr;
};

struct DeviceInfo {
  std::string name;  // "llvmpipe (LLVM 15.0.6, 256 bits)"
  std::string type;  // "cpu", "discrete gpu", ...
  uint64_t memory_bytes = 0;
  bool f64 = false;  // shaderFloat64: f64 kernels
  uint32_t subgroup_size = 0;
  uint64_t max_buffer_bytes = 0;  // maxStorageBufferRange: a larger tensor is refused
};

class Context {
 public:
  // The process's context for device `ordinal` (made on first use, then kept for the process's
  // life), or why it cannot be made: no Vulkan loader or driver, no such ordinal, a device
  // without a feature the shaders need (each named).
  static Result<Context*> get(int ordinal);

  const DeviceInfo& info() const { return info_; }
  int ordinal() const { return ordinal_; }
  uint64_t dispatches() const { return dispatches_.load(std::memory_order_relaxed); }
  // Whether VK_LAYER_KHRONOS_validation is loaded (TW_VULKAN_VALIDATION=1), and the messages
  // (warnings and errors) it reported so far, with the last one's text.
  bool validation_enabled() const { return validation_; }
  uint64_t validation_messages() const { return messages_.load(); }
  std::string last_validation_message() const;

  Result<Storage> alloc(uint64_t bytes);
  // Records a copy of host bytes into buf[offset, offset + n).
  Status upload(const DeviceBuffer& buf, uint64_t offset, const void* data, uint64_t n);
  // Copies buf[offset, offset + n) to the host: submits everything recorded and waits.
  Result<Buffer> download(const DeviceBuffer& buf, uint64_t offset, uint64_t n);
  // The same without waiting: records the copy into a staging buffer, submits, and returns a
  // ticket; finish_download() waits on the fence of the submission that carried it (the host
  // goes on meanwhile) and copies the bytes out.
  struct PendingDownload {
    Storage staging;
    uint64_t serial = 0;  // the submission carrying the copy
    uint64_t n = 0;
  };
  Result<PendingDownload> start_download(const DeviceBuffer& buf, uint64_t offset, uint64_t n);
  Result<Buffer> finish_download(const PendingDownload& d);
  // Transfers through the staging ring (each a slice of one mapped buffer, reused once the
  // submission that used it is done), and transfers that had a staging buffer of their own
  // (larger than a quarter of the ring, and asynchronous reads); submissions made.
  uint64_t ring_transfers() const { return ring_transfers_; }
  uint64_t own_staging_transfers() const { return own_staging_transfers_; }
  uint64_t submits() const { return submits_; }
  // Records a dispatch of shader `shader` (specialised by `spec`) over `groups` workgroups with
  // its tensor bindings and parameter block.
  Status dispatch(const std::string& shader, bool f64, const std::vector<int32_t>& spec,
                  const std::vector<Binding>& bindings, const void* params, size_t params_size,
                  uint32_t groups_x, uint32_t groups_y = 1, uint32_t groups_z = 1);
  // Submits what is recorded and waits for the device to finish it.
  Status sync();

  void release(DeviceBuffer* b);  // a Storage's deleter: back to its size class
  // Writes the pipeline cache to its file when pipelines were made since the last write (at the
  // process's exit; the next process starts from it).
  void save_pipeline_cache();
  // TW_VULKAN_PROFILE=1: prints, per pipeline (shader, f64 variant, specialisation), the time
  // making it took and the time its dispatches ran (each run alone, waited for), largest first.
  void print_profile();

  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

 private:
  Context() = default;
  Status init(int ordinal);
  struct Batch {
    VkCommandBuffer cmd = VK_NULL_HANDLE;
    VkFence fence = VK_NULL_HANDLE;
    bool pending = false;  // submitted, fence not yet waited for
    uint32_t ops = 0;
    // Per-dispatch parameter blocks: a host-visible buffer, mapped, written in slots.
    VkBuffer params = VK_NULL_HANDLE;
    VkDeviceMemory params_memory = VK_NULL_HANDLE;
    uint8_t* params_map = nullptr;
    uint64_t params_used = 0;
    std::vector<Storage> keep;  // staging buffers its copies read or write
    uint64_t ring_mark = 0;     // the ring's head after this batch's last slice (0: none)
    uint64_t serial = 0;        // its submission's number (submits_ then)
  };
  struct Pipeline {
    VkPipeline pipeline = VK_NULL_HANDLE;
  };
  Status begin_batch_locked();
  Status submit_locked(bool wait);
  // A batch whose fence was waited for: its staging buffers and ring slices are free again.
  Status retire_locked(Batch* b);
  // The offset of n bytes of the staging ring (made on first use), free of every submission
  // still running; may submit and wait when the ring is full, so the caller takes the batch to
  // record into (current_locked) after, and marks it with ring_head_.
  Result<uint64_t> ring_slice_locked(uint64_t n);
  Result<Batch*> current_locked();
  Result<Storage> alloc_locked(uint64_t bytes, bool host);
  Result<VkPipeline> pipeline_locked(const std::string& shader, bool f64,
                                     const std::vector<int32_t>& spec);
  void barrier_locked(VkCommandBuffer cmd);
  void open_pipeline_cache(const VkPhysicalDeviceProperties& props);

  mutable std::mutex mu_;
  int ordinal_ = 0;
  DeviceInfo info_;
  VkInstance instance_ = VK_NULL_HANDLE;
  VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
  VkPhysicalDevice physical_ = VK_NULL_HANDLE;
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  uint32_t queue_family_ = 0;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkDescriptorSetLayout set_layout_ = VK_NULL_HANDLE;
  VkPipelineLayout layout_ = VK_NULL_HANDLE;
  PFN_vkCmdPushDescriptorSetKHR push_descriptors_ = nullptr;
  uint32_t device_memory_type_ = 0, host_memory_type_ = 0;
  std::map<std::string, VkShaderModule> modules_;  // "name/f64"
  // Pipelines made by earlier processes (the driver's cache data, in a file: docs/vulkan.md).
  VkPipelineCache cache_ = VK_NULL_HANDLE;
  std::string cache_path_;
  bool cache_dirty_ = false;
  std::map<std::pair<std::string, std::vector<int32_t>>, Pipeline> pipelines_;
  // (class, host) -> buffers free for reuse; its own mutex, as a Storage may be dropped where
  // mu_ is held (a batch's staging buffers, once its fence has been waited for).
  std::mutex mu_free_;
  std::map<std::pair<uint64_t, bool>, std::vector<DeviceBuffer*>> free_;
  std::vector<std::unique_ptr<Batch>> batches_;  // a ring; current_ is recording (or null)
  size_t next_batch_ = 0;
  Batch* current_ = nullptr;
  std::atomic<uint64_t> dispatches_{0};
  Storage ring_;                            // the staging ring: host-visible, mapped
  uint64_t ring_head_ = 0, ring_tail_ = 0;  // byte positions counted from the start, ever growing
  uint64_t ring_transfers_ = 0, own_staging_transfers_ = 0, submits_ = 0, completed_ = 0;
  bool validation_ = false;
  bool profile_ = false;
  std::map<std::string, double> profile_make_;                       // key_of -> seconds
  std::map<std::string, std::pair<uint64_t, double>> profile_runs_;  // key_of -> runs, seconds
  static std::string key_of(const std::string& shader, bool f64, const std::vector<int32_t>& spec);
  std::atomic<uint64_t> messages_{0};
  std::string last_message_;  // under mu_msg_
  mutable std::mutex mu_msg_;
  friend VKAPI_ATTR VkBool32 VKAPI_CALL
  on_validation_message(VkDebugUtilsMessageSeverityFlagBitsEXT, VkDebugUtilsMessageTypeFlagsEXT,
                        const VkDebugUtilsMessengerCallbackDataEXT*, void*);
};

}  // namespace tw::vk
