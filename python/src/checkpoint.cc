// tw.Checkpoint and tw.run_with_failover: bindings of tensorwire/checkpoint.h and failover.h.
// Python modules pass their named_parameters() (Parameters are the C++ nn::Parameter), so a
// checkpoint of a Python model and of a C++ one are the same files.
#include "tensorwire/checkpoint.h"

#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "tensorwire/failover.h"

namespace py = pybind11;

namespace tw::python {

namespace {

NamedParameters named_parameters(const py::object& model) {
  NamedParameters out;
  for (py::handle item : model.attr("named_parameters")()) {
    auto pair = item.cast<py::tuple>();
    out.emplace_back(pair[0].cast<std::string>(), pair[1].cast<nn::ParameterPtr>());
  }
  return out;
}

optim::Optimizer* optimizer(const py::object& opt) {
  return opt.is_none() ? nullptr : opt.cast<optim::Optimizer*>();
}

}  // namespace

void bind_checkpoint(py::module_& m) {
  py::class_<RngState>(m, "RngState", "The random generator's state (tw::rng_state).")
      .def(py::init<>())
      .def_readwrite("seed", &RngState::seed)
      .def_readwrite("counter", &RngState::counter);
  m.def("rng_state", &rng_state, "The random generator's whole state, for checkpoints.");
  m.def("set_rng_state", &set_rng_state, py::arg("state"),
        "Restores a state from rng_state(): the same tensors follow as did then.");

  py::class_<CheckpointInfo>(m, "CheckpointInfo", "A checkpoint as its manifest describes it.")
      .def_readonly("step", &CheckpointInfo::step)
      .def_readonly("rng", &CheckpointInfo::rng)
      .def_readonly("extra", &CheckpointInfo::extra)
      .def_readonly("manifest", &CheckpointInfo::manifest)
      .def_readonly("data", &CheckpointInfo::data)
      .def_readonly("bytes", &CheckpointInfo::bytes)
      .def("__repr__", [](const CheckpointInfo& i) {
        return "CheckpointInfo(step=" + std::to_string(i.step) + ", data='" + i.data + "')";
      });

  py::class_<Checkpoint>(m, "Checkpoint",
                         "Atomic training checkpoints in a directory (tensorwire/checkpoint.h): "
                         "parameters, optimizer state, the random generator and the step.")
      .def(py::init<std::string, int>(), py::arg("dir"), py::arg("keep") = 2)
      .def_property_readonly("dir", &Checkpoint::dir)
      .def(
          "save",
          [](Checkpoint& c, int64_t step, const py::object& model, const py::object& opt,
             const std::map<std::string, std::string>& extra) {
            const NamedParameters params = named_parameters(model);
            optim::Optimizer* o = optimizer(opt);
            py::gil_scoped_release release;
            return c.save(step, params, o, extra);
          },
          py::arg("step"), py::arg("model"), py::arg("optimizer") = py::none(),
          py::arg("extra") = std::map<std::string, std::string>{},
          "Saves checkpoint `step` of the model (and optimizer) atomically.")
      .def(
          "save_async",
          [](Checkpoint& c, int64_t step, const py::object& model, const py::object& opt,
             const std::map<std::string, std::string>& extra) {
            const NamedParameters params = named_parameters(model);
            optim::Optimizer* o = optimizer(opt);
            py::gil_scoped_release release;
            c.save_async(step, params, o, extra);
          },
          py::arg("step"), py::arg("model"), py::arg("optimizer") = py::none(),
          py::arg("extra") = std::map<std::string, std::string>{},
          "save() in the background: takes the tensors now and returns; wait() (or the next "
          "save) waits for it.")
      .def("wait", &Checkpoint::wait, py::call_guard<py::gil_scoped_release>(),
           "Waits for the save_async() in progress: its CheckpointInfo, or None.")
      .def_property_readonly("saving", &Checkpoint::saving,
                             "Whether a save_async() is still writing.")
      .def("list", &Checkpoint::list, py::arg("validate") = true,
           py::call_guard<py::gil_scoped_release>(), "The valid checkpoints, oldest first.")
      .def("latest", &Checkpoint::latest, py::call_guard<py::gil_scoped_release>(),
           "The newest valid checkpoint, or None.")
      .def(
          "load",
          [](const Checkpoint& c, const CheckpointInfo& info, const py::object& model,
             const py::object& opt, bool restore_rng) {
            const NamedParameters params = named_parameters(model);
            optim::Optimizer* o = optimizer(opt);
            py::gil_scoped_release release;
            c.load(info, params, o, restore_rng);
          },
          py::arg("info"), py::arg("model"), py::arg("optimizer") = py::none(),
          py::arg("restore_rng") = true, "Loads a checkpoint into the model (and optimizer).")
      .def(
          "restore",
          [](const Checkpoint& c, const py::object& model, const py::object& opt,
             bool restore_rng) {
            const NamedParameters params = named_parameters(model);
            optim::Optimizer* o = optimizer(opt);
            py::gil_scoped_release release;
            return c.restore(params, o, restore_rng);
          },
          py::arg("model"), py::arg("optimizer") = py::none(), py::arg("restore_rng") = true,
          "Loads the newest valid checkpoint; returns its info, or None when there is none.");

  m.def(
      "run_with_failover",
      [](const std::vector<std::string>& urls, const py::function& work, int max_failovers,
         int device_index) {
        FailoverOptions o;
        o.max_failovers = max_failovers;
        o.device_index = device_index;
        // A tw.Error raised in the Python work becomes the tw::Error run_with_failover judges
        // (its message says whether the server went away); other exceptions pass through.
        const py::object error_type = py::module_::import("tensorwire._tensorwire").attr("Error");
        auto call = [&](const Device& d) {
          py::gil_scoped_acquire gil;
          try {
            work(d);
          } catch (py::error_already_set& e) {
            if (!e.matches(error_type)) throw;
            throw Error(py::str(e.value()).cast<std::string>());
          }
        };
        py::gil_scoped_release release;
        return run_with_failover(urls, call, o);
      },
      py::arg("urls"), py::arg("work"), py::arg("max_failovers") = 8, py::arg("device_index") = 0,
      "Runs work(device) on the first server, moving to the next when the server dies or "
      "drains; returns the index of the server it completed on.");
}

}  // namespace tw::python
