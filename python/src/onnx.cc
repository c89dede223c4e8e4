// tensorwire._tensorwire.onnx: ONNX import (tensorwire/onnx.h), bound in a file of its own so that
// the module's other bindings do not depend on libtensorwire_onnx's header.
#include "tensorwire/onnx.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

namespace py = pybind11;

namespace tw::python {

void bind_onnx(py::module_& m) {
  py::module_ o = m.def_submodule("onnx", "ONNX import (tensorwire/onnx.h, docs/onnx.md).");
  using Release = py::call_guard<py::gil_scoped_release>;
  py::class_<onnx::Model>(o, "Model", "An imported ONNX model: a trace with the ONNX names.")
      .def_readonly("trace", &onnx::Model::trace)
      .def_readonly("input_names", &onnx::Model::input_names)
      .def_readonly("output_names", &onnx::Model::output_names)
      .def_readonly("initializer_names", &onnx::Model::initializer_names)
      .def_readonly("opset", &onnx::Model::opset)
      .def_readonly("producer", &onnx::Model::producer)
      .def_readonly("num_nodes", &onnx::Model::num_nodes)
      .def("run", &onnx::Model::run, py::arg("device"), py::arg("inputs"), Release(),
           "Runs the model on `device` with inputs (tensors there) in input_names' order.")
      .def("__str__", &onnx::Model::str)
      .def("__repr__", &onnx::Model::str);
  o.def(
      "load",
      [](const std::string& path, const std::map<std::string, Shape>& input_shapes,
         const std::map<std::string, Tensor>& input_values) {
        onnx::LoadOptions options{input_shapes, input_values};
        py::gil_scoped_release r;
        return onnx::load(path, options);
      },
      py::arg("path"), py::arg("input_shapes") = std::map<std::string, Shape>{},
      py::arg("input_values") = std::map<std::string, Tensor>{},
      "Imports an ONNX model file. input_shapes fixes symbolic input dims by input name; "
      "input_values gives inputs that nodes need as constants (Reshape's shape, ...).");
  o.def(
      "read_tensor",
      [](const std::string& path, const Device& device) { return onnx::read_tensor(path, device); },
      py::arg("path"), py::arg("device") = Device::cpu(), Release(),
      "A serialized ONNX TensorProto file (input_0.pb) as a tensor.");
  o.def("supported_ops", &onnx::supported_ops, "The ONNX op types the importer maps, sorted.");
}

}  // namespace tw::python
