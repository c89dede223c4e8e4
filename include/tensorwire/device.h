// A Device names where tensors live and where their ops run. Every device is an op sink: the
// Tensor API turns each call into an op of the IR and hands it to the tensor's device.
#pragma once
#include <memory>
#include <string>

#include "tensorwire/device_kind.h"
#include "tensorwire/export.h"

TW_API_BEGIN

namespace tw {

namespace detail {
class Sink;
}

class Device {
 public:
  using Kind = DeviceKind;

  // The process's local CPU device (ops execute eagerly on the calling thread, with kernels
  // parallelised over the intra-op pool).
  static Device cpu();
  // The process's local LibTorch device: the same ops, executed eagerly by PyTorch's CPU kernels
  // (ATen) with tensorwire's semantics (docs/ops.md; random tensors equal the CPU device's for
  // a seed). ATen uses get_num_threads() intra-op threads. Throws tw::Error when this build has
  // no torch backend (see torch_available()).
  static Device torch();
  // Whether this build has the torch backend (CMake found libtorch).
  static bool torch_available();
  // Device `ordinal` of the local backend `backend` ("cpu", "torch", "vulkan"): one per
  // (backend, ordinal) and process, as cpu() and torch() are. Throws tw::Error naming what is
  // missing when this build has no such backend or the machine no such device (no Vulkan
  // driver, say). local("vulkan", 0).str() is "vulkan:0".
  static Device local(const std::string& backend, int ordinal);
  // The same from a spec: "cpu", "torch", "vulkan:0".
  static Device local(const std::string& spec);
  // Device `index` of the compute server at `url` (tcp://host:port or unix:///path). Each call
  // opens its own session (its own connection and tensor table), so keep the Device and pass it
  // around; copies of it share the session. Nothing is contacted until first use (or
  // connect()). Ops are queued and sent in batches (docs/remote.md: thresholds and their
  // environment variables).
  static Device remote(const std::string& url, int index = 0);
  // A fresh capture device over `inner` (cpu, torch or remote): records every op issued to its
  // tensors as a trace and runs it on `inner` too. Use it through tw::graph::Capture
  // (tensorwire/graph.h), which gives it inputs and ends the recording. A server refuses to host
  // one (tw::serve).
  static Device capture(const Device& inner);

  Kind kind() const;
  // "cpu", "torch", "remote(tcp://host:port, 0)".
  std::string str() const;
  // Waits until every op submitted so far has executed (a no-op for eager devices).
  void sync() const;
  // Connects now instead of on first use (remote devices); throws tw::Error on failure.
  void connect() const;
  // Sends every queued op now (remote devices).
  void flush() const;
  bool operator==(const Device& o) const { return sink_ == o.sink_; }
  bool operator!=(const Device& o) const { return !(*this == o); }

  // For the API's implementation.
  explicit Device(std::shared_ptr<detail::Sink> sink) : sink_(std::move(sink)) {}
  const std::shared_ptr<detail::Sink>& sink() const { return sink_; }

 private:
  std::shared_ptr<detail::Sink> sink_;
};

}  // namespace tw
TW_API_END
