// ONNX import (docs/onnx.md): loads the .onnx file given on the command line, runs it on the CPU
// device with ones for every floating-point input and zeros for the others, in the shapes the
// model declares, and prints each output's dtype, shape and sum.
//   onnx_run MODEL.onnx
// Links tensorwire::onnx (CMake) or tensorwire-onnx (pkg-config).
#include <tensorwire/onnx.h>
#include <tensorwire/tensorwire.h>

#include <iostream>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: onnx_run MODEL.onnx\n";
    return 2;
  }
  try {
    const tw::onnx::Model model = tw::onnx::load(argv[1]);
    const tw::Device cpu = tw::Device::cpu();
    std::vector<tw::Tensor> inputs;
    for (size_t i = 0; i < model.input_names.size(); ++i) {
      const tw::graph::TensorSpec& spec = model.trace.inputs()[i];
      std::cout << "input " << i << " '" << model.input_names[i] << "': " << spec.str() << "\n";
      inputs.push_back(tw::is_float(spec.dtype) ? tw::ones(spec.shape, spec.dtype, cpu)
                                                : tw::zeros(spec.shape, spec.dtype, cpu));
    }
    const std::vector<tw::Tensor> outputs = model.run(cpu, inputs);
    for (size_t i = 0; i < outputs.size(); ++i) {
      const tw::Tensor& y = outputs[i];
      std::cout << "output " << i << " '" << model.output_names[i]
                << "': " << tw::graph::TensorSpec{y.shape(), y.dtype()}.str() << " sum "
                << y.to(tw::kF64).sum().item<double>() << "\n";
    }
  } catch (const tw::Error& e) {
    std::cerr << "onnx_run: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
