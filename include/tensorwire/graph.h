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
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tensorwire/device.h"
#include "tensorwire/tensor.h"

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

}  // namespace tw::graph
