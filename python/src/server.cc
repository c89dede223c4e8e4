// tw.serve()'s options, bound in a file of their own. They are not typed again here:
// ServerOptions::fields (tensorwire/server.h) lists them once, and tw.serve(**options) takes
// exactly those names.
#include "tensorwire/server.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "tensorwire/device.h"
#include "tensorwire/error.h"

namespace py = pybind11;

namespace tw::python {
namespace {

std::vector<std::string> server_option_names() {
  std::vector<std::string> names;
  ServerOptions o;
  o.fields([&](const ServerOption& opt, auto&) { names.emplace_back(opt.name); });
  return names;
}

// What a keyword of tw.serve() takes, for the message when it is given something else.
template <class T>
const char* kind_of() {
  if constexpr (std::is_same_v<T, std::chrono::milliseconds>) return "seconds (a number)";
  if constexpr (std::is_same_v<T, bool>) return "a bool";
  if constexpr (std::is_same_v<T, std::string>) return "a str";
  if constexpr (std::is_same_v<T, std::vector<std::string>>) return "a list of str";
  if constexpr (std::is_floating_point_v<T>) return "a number >= 0";
  return "an int >= 0";
}

// Sets the members of `o` named in `options` (a dict of keyword -> value). Durations are given in
// seconds, as the server's flags take them.
void set_options(ServerOptions& o, const py::dict& options) {
  const std::vector<std::string> names = server_option_names();
  for (const auto& [key, value] : options) {
    const std::string k = py::str(key);
    if (std::find(names.begin(), names.end(), k) == names.end()) {
      std::string all;
      for (const std::string& n : names) all += (all.empty() ? "" : ", ") + n;
      throw Error("serve: unknown option '" + k + "'; the options are " + all);
    }
  }
  o.fields([&](const ServerOption& opt, auto& member) {
    const char* name = opt.name;
    using T = std::remove_reference_t<decltype(member)>;
    if (!options.contains(name)) return;
    const py::handle v = options[name];
    try {
      if constexpr (std::is_same_v<T, std::chrono::milliseconds>) {
        const double secs = v.cast<double>();
        if (!(secs >= 0) || secs > 86400 * 365.0) throw py::cast_error();
        member = std::chrono::milliseconds(std::llround(secs * 1000));
      } else if constexpr (std::is_same_v<T, bool>) {
        if (!PyBool_Check(v.ptr())) throw py::cast_error();
        member = v.cast<bool>();
      } else if constexpr (std::is_floating_point_v<T>) {
        const double d = v.cast<double>();
        if (!(d >= 0)) throw py::cast_error();
        member = d;
      } else if constexpr (std::is_integral_v<T>) {
        if (PyBool_Check(v.ptr()) || v.cast<long long>() < 0) throw py::cast_error();
        member = v.cast<T>();
      } else {
        member = v.cast<T>();
      }
    } catch (const py::cast_error&) {
      throw Error(std::string("serve: option '") + name + "' takes " + kind_of<T>() + ", got " +
                  std::string(py::repr(v)));
    }
  });
}

}  // namespace

void bind_server_options(py::module_& m) {
  m.def("_server_option_names", &server_option_names,
        "The keywords tw.serve() takes: ServerOptions' members (tensorwire/server.h).");
  m.def(
      "_serve",
      [](const std::optional<Device>& device, const py::dict& options) {
        ServerOptions o;
        set_options(o, options);
        py::gil_scoped_release r;
        return std::shared_ptr<Server>(device ? serve(*device, o) : serve(o));
      },
      py::arg("device"), py::arg("options"));
}

}  // namespace tw::python
