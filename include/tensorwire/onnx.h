// ONNX import (docs/onnx.md): an ONNX model file becomes a tw::graph::Trace, which runs on any
// device (cpu, torch, remote as one registered graph).
//
//   tw::onnx::Model m = tw::onnx::load("model.onnx");
//   std::vector<tw::Tensor> out = m.run(tw::Device::cpu(), {x});
//
// This is a separate (static) library, libtensorwire_onnx.a, CMake target tensorwire_onnx: it
// links Debian's libonnx_proto and protobuf, which libtensorwire itself does not need. Each
// supported ONNX op (opsets 1 to 17) maps onto existing IR ops; a model using anything else is
// refused at load with an error naming the node, its op type and the attribute or input.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tensorwire/export.h"
#include "tensorwire/graph.h"
#include "tensorwire/tensor.h"

TW_API_BEGIN

namespace tw::onnx {

struct LoadOptions {
  // Shapes for graph inputs whose declared shape has symbolic or missing dims ("N"); every
  // trace input must end up with a fixed shape (shapes are inferred at load).
  std::map<std::string, Shape> input_shapes;
  // Values for graph inputs that a node needs as a constant (Reshape's shape, Slice's starts,
  // ...). An input given here and used only as a constant is frozen into the trace and is not a
  // trace input; one that some node also reads as a tensor stays an input.
  std::map<std::string, Tensor> input_values;
};

struct Model {
  graph::Trace trace;
  // The ONNX names of the trace's inputs and outputs, in the trace's order. Initializers are
  // constants inside the trace (FromHost ops), not inputs.
  std::vector<std::string> input_names, output_names;
  std::vector<std::string> initializer_names;
  int64_t opset = 0;     // of the default domain
  std::string producer;  // producer_name and producer_version
  size_t num_nodes = 0;  // ONNX nodes (the trace has num_ops() IR ops)

  // trace.replay(device, inputs): inputs in input_names' order, on `device`.
  std::vector<Tensor> run(const Device& device, const std::vector<Tensor>& inputs) const;
  // Names, specs and the trace (Trace::str()).
  std::string str() const;
};

// Parses and converts; throws tw::Error naming the file and the problem.
Model load(const std::string& path, const LoadOptions& options = {});
// The same from a serialized ModelProto in memory.
Model load_bytes(const std::string& bytes, const LoadOptions& options = {},
                 const std::string& what = "model");

// A serialized TensorProto file (ONNX's test data: input_0.pb, output_0.pb) as a tensor on
// `device`; `name` receives the TensorProto's name when given.
Tensor read_tensor(const std::string& path, const Device& device = Device::cpu(),
                   std::string* name = nullptr);

// The graph inputs of a model file (initializers excluded), in order, with their declared dtype
// and shape: a symbolic or missing dim is -1 unless `input_shapes` gives the input's shape (what a
// caller needs to build a value for LoadOptions::input_values, as `tensorwire onnx run
// --input-value` does).
std::vector<std::pair<std::string, graph::TensorSpec>> input_specs(
    const std::string& path, const std::map<std::string, Shape>& input_shapes = {});

// The ONNX op types the importer maps (default domain), sorted.
std::vector<std::string> supported_ops();

}  // namespace tw::onnx
TW_API_END
