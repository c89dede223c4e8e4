// Op traces: record the ops a program issues to a device, save them to a file, replay them on
// any device (docs/trace.md).
//
//   tw::graph::Capture cap(tw::Device::cpu());
//   tw::Tensor x = cap.input(x_cpu);           // a trace input, bound to x_cpu's values
//   tw::Tensor y = (x * 2).relu().sum();       // recorded, and executed on the inner device
//   tw::graph::Trace trace = cap.finish();     // y is still held: it is the trace's output
//   std::vector<tw::Tensor> out = trace.replay(tw::Device::torch(), {x_torch});
//
// Recording also executes every op on the inner device, so the recorded step still produces its
// values (readable once finish() has run). Values computed on the host while recording (scalar
// attributes, FromHost data, random seeds drawn by rand/randn) are frozen into the trace: a
// replay reuses them. Keep anything that must change from run to run in tensors that are trace
// inputs (tw::optim::Adam keeps its bias corrections in tensors for this reason).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tensorwire/device.h"
#include "tensorwire/export.h"
#include "tensorwire/optim.h"
#include "tensorwire/tensor.h"

TW_API_BEGIN

namespace tw::graph {

struct TensorSpec {
  Shape shape;
  DType dtype = kF32;
  std::string str() const;  // "f32[2, 3]"
};

class Trace {
 public:
  Trace();  // a trace of no ops
  // The file format of docs/trace.md. load() throws tw::Error naming the problem for a missing,
  // truncated, corrupt or invalid file; it never crashes on hostile bytes.
  void save(const std::string& path) const;
  static Trace load(const std::string& path);
  std::vector<uint8_t> to_bytes() const;
  static Trace from_bytes(std::span<const uint8_t> bytes);

  const std::vector<TensorSpec>& inputs() const;
  const std::vector<TensorSpec>& outputs() const;
  size_t num_ops() const;
  // Inputs, one op a line with its outputs' dtypes and shapes, then the outputs.
  std::string str() const;

  // Runs the trace on `device` with `inputs` (tensors on that device, matching inputs() in
  // order, shape and dtype; a mismatch throws tw::Error naming it) and returns the outputs.
  // The device runs it as a registered graph when it can (cpu, torch), else op by op (a server
  // without graph messages); either way the values equal running the same ops eagerly there.
  std::vector<Tensor> replay(const Device& device, const std::vector<Tensor>& inputs) const;
  // Whether replays on `device` run as a registered graph (false before the first replay there,
  // and for a device that refused the graph, where each replay issues the ops one by one).
  bool runs_as_graph(const Device& device) const;

  struct Impl;
  explicit Trace(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

 private:
  std::shared_ptr<Impl> impl_;
};

// Records the ops issued to its capture device (Device::capture(inner)). Tensors of the inner
// device enter through input(); every op on capture tensors is recorded and also run on the
// inner device. While recording, reading values (item, to_vector, to_bytes, printing, .to()
// another device) throws tw::Error: a trace cannot depend on values it has not computed.
class Capture {
 public:
  explicit Capture(const Device& inner);
  ~Capture();
  Capture(const Capture&) = delete;
  Capture& operator=(const Capture&) = delete;

  const Device& device() const { return device_; }
  // A tensor of the capture device standing for `t` (a tensor of the inner device): the trace's
  // next input.
  Tensor input(const Tensor& t);
  // Ends the recording. The trace's outputs are the recorded tensors the program still holds,
  // in the order they were made. After this, capture tensors can be read, and release() turns
  // one into the inner device's tensor (no copy); recording more ops on them throws.
  Trace finish();
  // Ends the recording with these outputs, in this order (tensors of the capture device made by
  // recorded ops); the other recorded tensors are the trace's intermediates.
  Trace finish(const std::vector<Tensor>& outputs);
  Tensor release(const Tensor& captured);

 private:
  Device device_;
};

// A tensor a step reads and rebinds, such as a parameter or an optimizer's state tensor.
struct Slot {
  std::function<Tensor()> get;
  std::function<void(Tensor)> set;
};
// The optimizer's parameters, then its state tensors (Optimizer::state()).
std::vector<Slot> state_slots(optim::Optimizer& optimizer);

// Automatic step caching. Step(fn, state) calls fn(args) eagerly the first time it sees a given
// set of argument and state shapes/dtypes/devices, records it the second time, and from then on
// replays the recorded trace (one registered graph on the device) for calls that match, recording
// again for a new combination (each kept, so alternating batch shapes do not re-record). fn must
// compute only from args and the state (anything else it reads is frozen into the trace) and
// return the tensors the caller wants back; the state slots are rebound to their new values.
// Gradients left on parameters by fn are not carried out of a replayed call (zero_grad() before
// backward, as training loops do). The results equal calling fn eagerly every time, bit for bit.
class Step {
 public:
  using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>& args)>;
  Step(Fn fn, std::vector<Slot> state);
  std::vector<Tensor> operator()(const std::vector<Tensor>& args);

  int64_t eager_calls() const { return eager_; }
  int64_t recordings() const { return recordings_; }
  int64_t replays() const { return replays_; }

 private:
  struct Cached {
    int64_t seen = 0;
    std::shared_ptr<Trace> trace;
    std::vector<bool> state_out;  // which slots the trace's outputs rebind, after the results
    size_t results = 0;
  };
  std::vector<Tensor> record(const std::vector<Tensor>& args, Cached& c);
  std::vector<Tensor> replay(const std::vector<Tensor>& args, Cached& c);

  Fn fn_;
  std::vector<Slot> state_;
  std::map<std::string, Cached> cache_;
  int64_t eager_ = 0, recordings_ = 0, replays_ = 0;
};

// Step over a function of no state.
inline Step compile(Step::Fn fn, std::vector<Slot> state = {}) {
  return Step(std::move(fn), std::move(state));
}

}  // namespace tw::graph
TW_API_END
