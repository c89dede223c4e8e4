// tensorwire._tensorwire: the C++ API (include/tensorwire/) as a Python extension. The package's
// __init__.py, nn.py and optim.py add the PyTorch-style conveniences on top (shapes as *args,
// dtype names, no_grad, Module subclassing); everything that runs per op is bound here directly.
//
// Threads and signals: every call that may block for long (a read, a sync, a connect, a server
// stop, a compute-heavy op) runs with the GIL released; elementwise and movement ops keep it
// (see Submit). Waits for a remote device run on a helper thread while this thread waits in
// slices, checking for signals between them, so Ctrl-C raises KeyboardInterrupt at once; the
// helper finishes the wait by itself, so the session stays consistent (nothing is left
// half-read).
#include <pybind11/numpy.h>
#include <pybind11/operators.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "op_docs.h"
#include "tensorwire/graph.h"
#include "tensorwire/remote.h"
#include "tensorwire/server.h"
#include "tensorwire/tensorwire.h"

namespace py = pybind11;

namespace tw::python {
namespace {

// ---- docstrings: the C++ summary plus the docs/ops.md rows for the op ----

const char* doc(const std::string& name, const std::string& summary) {
  static std::deque<std::string> keep;  // pybind keeps the pointer, so the text must outlive it
  std::string text = summary;
  std::vector<std::string> keys = {name};
  if (auto a = op_doc_aliases().find(name); a != op_doc_aliases().end()) {
    keys.insert(keys.end(), a->second.begin(), a->second.end());
  }
  std::vector<std::string> seen;
  for (const std::string& k : keys) {
    std::string flat;
    for (char c : k) {
      if (c != '_') flat += c;
    }
    auto r = op_doc_rows().find(flat);
    if (r == op_doc_rows().end()) continue;
    for (const std::string& row : r->second) {
      if (std::find(seen.begin(), seen.end(), row) != seen.end()) continue;
      seen.push_back(row);
    }
  }
  if (!seen.empty()) {
    text += "\n\nSemantics (docs/ops.md):";
    for (const std::string& row : seen) text += "\n  " + row;
  }
  keep.push_back(std::move(text));
  return keep.back().c_str();
}

// ---- blocking waits ----

constexpr auto kWaitSlice = std::chrono::milliseconds(20);

bool is_eager(const Device& d) { return d.kind() != Device::Kind::kRemote; }

// generate(prompt, new_tokens, temperature, top_k, seed) of the split models' generators.
template <class G>
std::vector<int64_t> split_generate(G& g, const std::vector<int64_t>& prompt, int64_t new_tokens,
                                    double temperature, int64_t top_k, uint64_t seed) {
  return g.generate(prompt, new_tokens, {.temperature = temperature, .top_k = top_k, .seed = seed});
}

// Runs `fn` (which may block for long) with the GIL released. For a remote device it runs on a
// helper thread and this thread waits in slices, checking signals between them: a pending
// KeyboardInterrupt is raised here while the helper completes the wait on its own.
template <class F>
auto wait_in_slices(F fn) -> decltype(fn()) {
  using R = decltype(fn());
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::optional<std::conditional_t<std::is_void_v<R>, bool, R>> value;
    std::exception_ptr error;
  };
  auto state = std::make_shared<State>();
  std::thread([state, fn = std::move(fn)]() mutable {
    try {
      if constexpr (std::is_void_v<R>) {
        fn();
        state->value.emplace(true);
      } else {
        state->value.emplace(fn());
      }
    } catch (...) {
      state->error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(state->mu);
    state->done = true;
    state->cv.notify_all();
  }).detach();
  for (;;) {
    bool done;
    {
      py::gil_scoped_release release;
      std::unique_lock<std::mutex> lock(state->mu);
      done = state->cv.wait_for(lock, kWaitSlice, [&] { return state->done; });
    }
    if (done) break;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
  if (state->error) std::rethrow_exception(state->error);
  if constexpr (!std::is_void_v<R>) return std::move(*state->value);
}

// As wait_in_slices for a remote device; an eager device's call runs here, GIL released. `fn`
// must own what it uses (it may outlive the call when interrupted).
template <class F>
auto wait_for_device(const Device& device, F fn) -> decltype(fn()) {
  if (is_eager(device)) {
    py::gil_scoped_release release;
    return fn();
  }
  return wait_in_slices(std::move(fn));
}

// ---- keeping Python objects alive from C++ memory owners ----

// Python objects whose last C++ reference went while this thread lacked the GIL. Taking the GIL
// in a destructor could deadlock (the destructor may run under a device's lock that a thread
// holding the GIL is waiting for), so they are released later by the interpreter's main thread.
std::mutex g_pending_mu;
std::vector<PyObject*> g_pending;

int release_pending(void*) {
  std::vector<PyObject*> objs;
  {
    std::lock_guard<std::mutex> lock(g_pending_mu);
    objs.swap(g_pending);
  }
  for (PyObject* o : objs) Py_DECREF(o);
  return 0;
}

std::shared_ptr<const void> keep_alive(py::object obj) {
  PyObject* raw = obj.release().ptr();
  return std::shared_ptr<const void>(raw, [](const void* p) {
    PyObject* o = static_cast<PyObject*>(const_cast<void*>(p));
    if (!Py_IsInitialized() || _Py_IsFinalizing()) return;  // the interpreter is gone
    if (PyGILState_Check()) {
      Py_DECREF(o);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(g_pending_mu);
      g_pending.push_back(o);
    }
    // Best effort: if the interpreter's queue is full, the next from_numpy releases them.
    Py_AddPendingCall(release_pending, nullptr);
  });
}

// ---- dtypes ----

std::optional<DType> dtype_of_numpy(const py::dtype& d) {
  if (d.kind() == 'f' && d.itemsize() == 4) return kF32;
  if (d.kind() == 'f' && d.itemsize() == 8) return kF64;
  if (d.kind() == 'f' && d.itemsize() == 2) return kF16;
  if (d.kind() == 'i' && d.itemsize() == 4) return kI32;
  if (d.kind() == 'i' && d.itemsize() == 8) return kI64;
  if (d.kind() == 'u' && d.itemsize() == 1) return kU8;
  if (d.kind() == 'i' && d.itemsize() == 1) return kI8;
  if (d.kind() == 'b') return kBool;
  return std::nullopt;
}

py::dtype numpy_dtype_of(DType d) {
  switch (d) {
    case DType::kF32: return py::dtype("float32");
    case DType::kF64: return py::dtype("float64");
    case DType::kI32: return py::dtype("int32");
    case DType::kI64: return py::dtype("int64");
    case DType::kU8: return py::dtype("uint8");
    case DType::kI8: return py::dtype("int8");
    case DType::kBool: return py::dtype("bool");
    case DType::kF16: return py::dtype("float16");
    case DType::kBF16: break;
  }
  throw Error("numpy: numpy has no bf16 dtype; cast the tensor to f32 first");
}

Shape shape_of(const py::array& a) {
  Shape s;
  for (py::ssize_t i = 0; i < a.ndim(); ++i) s.push_back(static_cast<int64_t>(a.shape(i)));
  return s;
}

// ---- numpy interop ----

Tensor from_numpy(py::array a, const Device& device) {
  release_pending(nullptr);
  std::optional<DType> dt = dtype_of_numpy(a.dtype());
  if (!dt) {
    throw Error("from_numpy: numpy dtype " + std::string(py::str(a.dtype())) +
                " has no tensorwire dtype (f32, f64, f16, i32, i64, u8, bool)");
  }
  if (!(a.flags() & py::array::c_style)) {
    throw Error("from_numpy: the array is not C-contiguous (tw.tensor copies it)");
  }
  if (!a.dtype().attr("isnative").cast<bool>()) {
    throw Error("from_numpy: the array is not in native byte order");
  }
  void* data = a.mutable_data();
  const Shape shape = shape_of(a);
  auto owner = keep_alive(a);
  py::gil_scoped_release release;
  return from_blob(data, shape, *dt, std::move(owner), device);
}

// A copy of `a` (any layout, any convertible dtype) on `device`.
Tensor copy_from_numpy(py::array a, const Device& device) {
  std::optional<DType> dt = dtype_of_numpy(a.dtype());
  if (!dt) {
    throw Error("tensor: numpy dtype " + std::string(py::str(a.dtype())) +
                " has no tensorwire dtype (f32, f64, f16, i32, i64, u8, bool)");
  }
  py::array c = py::array::ensure(a, py::array::c_style | py::array::forcecast);
  const Shape shape = shape_of(c);
  const auto* p = static_cast<const uint8_t*>(c.data());
  std::span<const uint8_t> bytes(p, static_cast<size_t>(c.nbytes()));
  py::gil_scoped_release release;
  return from_bytes(bytes, shape, *dt, device);
}

// The tensor's values as an array. On the CPU device the array shares the tensor's storage when
// it is contiguous (the array keeps it alive); elsewhere it is a download.
py::array to_numpy(const Tensor& t) {
  const py::dtype npd = numpy_dtype_of(t.dtype());
  auto* values =
      new detail::HostValues(wait_for_device(t.device(), [t] { return t.host_values(); }));
  py::capsule base(values, [](void* p) { delete static_cast<detail::HostValues*>(p); });
  std::vector<py::ssize_t> shape(values->shape.begin(), values->shape.end());
  if (values->numel == 0) return py::array(npd, shape);
  return py::array(npd, shape, {}, const_cast<void*>(values->data), base);
}

py::object item(const Tensor& t) {
  const detail::HostValues v = wait_for_device(t.device(), [t] { return t.host_values(); });
  if (v.numel != 1) {
    throw Error("item: tensor has " + std::to_string(v.numel) + " elements, not 1");
  }
  switch (v.dtype) {
    case DType::kF32: return py::float_(*static_cast<const float*>(v.data));
    case DType::kF64: return py::float_(*static_cast<const double*>(v.data));
    case DType::kI32: return py::int_(*static_cast<const int32_t*>(v.data));
    case DType::kI64: return py::int_(*static_cast<const int64_t*>(v.data));
    case DType::kU8: return py::int_(*static_cast<const uint8_t*>(v.data));
    case DType::kI8: return py::int_(*static_cast<const int8_t*>(v.data));
    case DType::kBool: return py::bool_(*static_cast<const uint8_t*>(v.data) != 0);
    default: {
      const Tensor f = t.to(kF32);
      return py::float_(wait_for_device(t.device(), [f] { return f.item<float>(); }));
    }
  }
}

// ---- DLPack (the v0.8 ABI: https://dmlc.github.io/dlpack/latest/c_api.html) ----

struct DLDevice {
  int32_t device_type;
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};
constexpr int32_t kDLCPU = 1;
enum : uint8_t { kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4, kDLBool = 6 };
constexpr const char* kDLTensorName = "dltensor";
constexpr const char* kDLUsedName = "used_dltensor";

DLDataType dl_dtype_of(DType d) {
  const auto bits = static_cast<uint8_t>(dtype_size(d) * 8);
  switch (d) {
    case DType::kF32:
    case DType::kF64:
    case DType::kF16: return {kDLFloat, bits, 1};
    case DType::kBF16: return {kDLBfloat, bits, 1};
    case DType::kI8:
    case DType::kI32:
    case DType::kI64: return {kDLInt, bits, 1};
    case DType::kU8: return {kDLUInt, bits, 1};
    case DType::kBool: return {kDLBool, bits, 1};
  }
  throw Error("__dlpack__: unknown dtype");
}

std::optional<DType> dtype_of_dl(DLDataType t) {
  if (t.lanes != 1) return std::nullopt;
  for (DType d : {kF32, kF64, kF16, kBF16, kI8, kI32, kI64, kU8, kBool}) {
    const DLDataType o = dl_dtype_of(d);
    if (o.code == t.code && o.bits == t.bits) return d;
  }
  if (t.code == kDLUInt && t.bits == 8) return kU8;
  return std::nullopt;
}

// What an exported capsule owns: the host values (on the CPU device, the tensor's own storage,
// whose Buffer they keep alive) and the shape and strides the DLTensor points at.
struct DLExport {
  DLManagedTensor managed{};
  detail::HostValues values;
  std::vector<int64_t> shape, strides;
};

void delete_export(DLManagedTensor* m) { delete static_cast<DLExport*>(m->manager_ctx); }

// Frees an export no consumer took (a consumer renames the capsule "used_dltensor" and calls
// the deleter itself when done).
void dl_capsule_destructor(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, kDLTensorName)) return;
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, kDLTensorName));
  if (m && m->deleter) m->deleter(m);
}

// Tensor.__dlpack__: a capsule over the tensor's values. On the CPU device a contiguous tensor
// is exported without a copy (the consumer sees the tensor's memory); elsewhere it is a download.
py::capsule to_dlpack(const Tensor& t) {
  (void)dl_dtype_of(t.dtype());
  auto e = std::make_unique<DLExport>();
  e->values = wait_for_device(t.device(), [t] { return t.host_values(); });
  e->shape = e->values.shape;
  e->strides.assign(e->shape.size(), 1);
  for (size_t i = e->shape.size(); i-- > 1;) e->strides[i - 1] = e->strides[i] * e->shape[i];
  DLTensor& dl = e->managed.dl_tensor;
  dl.data = const_cast<void*>(e->values.data);
  dl.device = {kDLCPU, 0};
  dl.ndim = static_cast<int32_t>(e->shape.size());
  dl.dtype = dl_dtype_of(e->values.dtype);
  dl.shape = e->shape.data();
  dl.strides = e->strides.data();
  dl.byte_offset = 0;
  e->managed.manager_ctx = e.get();
  e->managed.deleter = delete_export;
  DLManagedTensor* m = &e.release()->managed;
  PyObject* cap = PyCapsule_New(m, kDLTensorName, dl_capsule_destructor);
  if (!cap) {
    delete_export(m);
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::capsule>(cap);
}

// tw.from_dlpack: a tensor over the memory of any object with __dlpack__ (numpy arrays, tensors
// of other libraries, tw tensors). On the CPU device no copy is made; the producer's memory is
// held until the last tensor sharing it goes, then the producer's deleter runs.
Tensor from_dlpack(const py::object& obj, const Device& device) {
  release_pending(nullptr);
  if (!py::hasattr(obj, "__dlpack__")) {
    throw Error("from_dlpack: " + std::string(py::str(py::type::of(obj))) + " has no __dlpack__");
  }
  if (py::hasattr(obj, "__dlpack_device__")) {
    const auto dev = obj.attr("__dlpack_device__")().cast<std::pair<int32_t, int32_t>>();
    if (dev.first != kDLCPU) {
      throw Error("from_dlpack: the producer's memory is on DLPack device type " +
                  std::to_string(dev.first) + ", and only CPU memory (type 1) is supported");
    }
  }
  py::object cap = obj.attr("__dlpack__")();
  if (!PyCapsule_IsValid(cap.ptr(), kDLTensorName)) {
    throw Error("from_dlpack: __dlpack__ did not return an unconsumed 'dltensor' capsule");
  }
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap.ptr(), kDLTensorName));
  const DLTensor& dl = m->dl_tensor;
  std::optional<DType> dt = dtype_of_dl(dl.dtype);
  if (!dt) {
    throw Error("from_dlpack: DLPack dtype (code " + std::to_string(dl.dtype.code) + ", " +
                std::to_string(dl.dtype.bits) + " bits, " + std::to_string(dl.dtype.lanes) +
                " lanes) has no tensorwire dtype");
  }
  if (dl.device.device_type != kDLCPU) throw Error("from_dlpack: the memory is not CPU memory");
  Shape shape(dl.shape, dl.shape + dl.ndim);
  if (dl.strides) {
    int64_t expect = 1;
    for (int32_t i = dl.ndim; i-- > 0;) {
      if (shape[i] != 1 && dl.strides[i] != expect) {
        throw Error(
            "from_dlpack: the memory is not C-contiguous (strides are not supported; "
            "make the producer contiguous first)");
      }
      expect *= shape[i];
    }
  }
  // Consumed: from here the tensor owns the managed tensor and calls its deleter.
  if (PyCapsule_SetName(cap.ptr(), kDLUsedName) != 0) throw py::error_already_set();
  // The deleter may need the GIL (numpy's drops its array), so it runs from a Python object
  // released as keep_alive releases one.
  py::capsule owner(m, [](void* p) {
    auto* mt = static_cast<DLManagedTensor*>(p);
    if (mt->deleter) mt->deleter(mt);
  });
  void* data = static_cast<uint8_t*>(dl.data) + dl.byte_offset;
  auto keep = keep_alive(std::move(owner));
  py::gil_scoped_release release;
  return from_blob(data, shape, *dt, std::move(keep), device);
}

// ---- indexing ----

int64_t normalize_index(int64_t i, int64_t size, int64_t dim) {
  const int64_t j = i < 0 ? i + size : i;
  if (j < 0 || j >= size) {
    throw py::index_error("index " + std::to_string(i) + " is out of bounds for dim " +
                          std::to_string(dim) + " with size " + std::to_string(size));
  }
  return j;
}

struct SliceSpec {
  int64_t start, stop, step;
};

SliceSpec slice_of(const py::slice& s, int64_t size) {
  auto get = [](PyObject* o, int64_t dflt) {
    return o == Py_None ? dflt : py::cast<int64_t>(py::handle(o));
  };
  PySliceObject* so = reinterpret_cast<PySliceObject*>(s.ptr());
  const int64_t step = get(so->step, 1);
  if (step == 0) throw py::value_error("slice step cannot be zero");
  if (step < 0) {
    throw Error("slice step must be positive in an assignment, got " + std::to_string(step));
  }
  return {get(so->start, 0), get(so->stop, size), step};
}

// t[s] along dim for any slice, a negative step included: a negative step reads the flipped dim
// with the positive step, starting at the mirror of s.start (numpy's element order).
Tensor slice_dim(const Tensor& t, int64_t dim, const py::slice& s) {
  const int64_t size = t.size(dim);
  Py_ssize_t start = 0, stop = 0, step = 0;
  if (PySlice_Unpack(s.ptr(), &start, &stop, &step) != 0) throw py::error_already_set();
  const Py_ssize_t n = PySlice_AdjustIndices(size, &start, &stop, step);
  if (step > 0) return t.slice(dim, start, stop, step);
  const int64_t first = size - 1 - start;
  return t.flip({dim}).slice(dim, first, n == 0 ? first : first + (n - 1) * -step + 1, -step);
}

py::tuple index_tuple(const py::object& index) {
  if (py::isinstance<py::tuple>(index)) return index.cast<py::tuple>();
  return py::make_tuple(index);
}

// x[index] for ints, slices, None, Ellipsis and 1-D integer tensors (index_select).
Tensor get_item(const Tensor& x, const py::object& index) {
  const py::tuple items = index_tuple(index);
  int64_t consumed = 0;
  for (const py::handle& h : items) {
    if (!h.is_none() && h.ptr() != Py_Ellipsis) ++consumed;
  }
  if (consumed > x.dim()) {
    throw py::index_error("too many indices for a tensor of dimension " + std::to_string(x.dim()));
  }
  Tensor t = x;
  int64_t dim = 0;  // the dim of t the next index applies to
  for (const py::handle& h : items) {
    if (h.is_none()) {
      t = t.unsqueeze(dim++);
    } else if (h.ptr() == Py_Ellipsis) {
      dim += x.dim() - consumed;
      consumed = x.dim();
    } else if (py::isinstance<py::slice>(h)) {
      t = slice_dim(t, dim++, h.cast<py::slice>());
    } else if (py::isinstance<Tensor>(h)) {
      t = t.index_select(dim++, h.cast<Tensor>());
    } else {
      const int64_t i = normalize_index(h.cast<int64_t>(), t.size(dim), dim);
      t = t.slice(dim, i, i + 1).squeeze(dim);
    }
  }
  return t;
}

// x with x[index] = value for ints, slices and Ellipsis: a new tensor (ops are functional) that the
// Python handle is rebound to. Each index becomes a slice (an int i is i:i+1); value broadcasts to
// the shape x[index] has, and the assignment nests from the innermost dim out: x.slice_assign(d0,
// x[d0].slice_assign(d1, ..., value)).
Tensor set_item(const Tensor& x, const py::object& index, const Tensor& value) {
  py::tuple items = index_tuple(index);
  // An Ellipsis stands for as many full slices as the dims the other indices leave.
  py::list expanded;
  bool ellipsis = false;
  for (const py::handle& h : items) {
    if (h.ptr() != Py_Ellipsis) continue;
    if (ellipsis) throw py::index_error("an index can only have a single ellipsis ('...')");
    ellipsis = true;
  }
  if (ellipsis) {
    const int64_t fill = x.dim() - static_cast<int64_t>(items.size()) + 1;
    for (const py::handle& h : items) {
      if (h.ptr() != Py_Ellipsis) {
        expanded.append(h);
        continue;
      }
      for (int64_t i = 0; i < fill; ++i)
        expanded.append(py::slice(py::none(), py::none(), py::none()));
    }
    items = py::tuple(expanded);
  }
  if (static_cast<int64_t>(items.size()) > x.dim()) {
    throw py::index_error("too many indices for a tensor of dimension " + std::to_string(x.dim()));
  }
  std::vector<SliceSpec> specs;
  Shape kept, full_shape;  // x[index]'s shape, and the slice's (1 at the int dims)
  for (int64_t d = 0; d < x.dim(); ++d) {
    const int64_t size = x.size(d);
    if (d >= static_cast<int64_t>(items.size())) {
      kept.push_back(size);
      full_shape.push_back(size);
      continue;
    }
    const py::handle h = items[static_cast<size_t>(d)];
    if (py::isinstance<py::slice>(h)) {
      const SliceSpec sp = slice_of(h.cast<py::slice>(), size);
      Py_ssize_t start = sp.start, stop = sp.stop;
      const Py_ssize_t n = PySlice_AdjustIndices(size, &start, &stop, sp.step);
      specs.push_back({start, stop, sp.step});
      kept.push_back(n);
      full_shape.push_back(n);
    } else if (h.is_none() || py::isinstance<Tensor>(h)) {
      throw py::index_error("assignment takes ints, slices, ... and boolean masks only");
    } else {
      const int64_t i = normalize_index(h.cast<int64_t>(), size, d);
      specs.push_back({i, i + 1, 1});
      full_shape.push_back(1);
    }
  }
  py::gil_scoped_release release;
  Tensor v = value.to(x.dtype()).expand(kept).reshape(full_shape);
  if (specs.empty()) return v;
  std::vector<Tensor> parts = {x};
  for (size_t d = 0; d + 1 < specs.size(); ++d) {
    parts.push_back(
        parts.back().slice(static_cast<int64_t>(d), specs[d].start, specs[d].stop, specs[d].step));
  }
  for (size_t d = specs.size(); d-- > 0;) {
    v = parts[d].slice_assign(static_cast<int64_t>(d), specs[d].start, specs[d].stop, specs[d].step,
                              v);
  }
  return v;
}

std::vector<int64_t> dims_arg(const py::object& o) {
  if (py::isinstance<py::int_>(o)) return {o.cast<int64_t>()};
  return o.cast<std::vector<int64_t>>();
}

py::tuple shape_tuple(const Shape& s) {
  py::tuple t(s.size());
  for (size_t i = 0; i < s.size(); ++i) t[i] = py::int_(s[i]);
  return t;
}

}  // namespace
}  // namespace tw::python

// Python numbers (and numpy scalars) as tw::Scalar: ints stay exact, bools are ints.
namespace pybind11::detail {
template <>
struct type_caster<tw::Scalar> {
  // PYBIND11_TYPE_CASTER's members, with a value to start from (Scalar has no default).
 protected:
  tw::Scalar value{int64_t{0}};

 public:
  static constexpr auto name = const_name("float | int | bool");
  template <typename T_, enable_if_t<std::is_same<tw::Scalar, remove_cv_t<T_>>::value, int> = 0>
  static handle cast(T_* src, return_value_policy policy, handle parent) {
    if (!src) return none().release();
    return cast(*src, policy, parent);
  }
  operator tw::Scalar*() { return &value; }
  operator tw::Scalar&() { return value; }
  operator tw::Scalar&&() && { return std::move(value); }
  template <typename T_>
  using cast_op_type = pybind11::detail::movable_cast_op_type<T_>;

  bool load(handle src, bool) {
    PyObject* o = src.ptr();
    if (isinstance<tw::Tensor>(src)) return false;  // a Tensor's __index__ would read it
    if (PyBool_Check(o)) {
      value = tw::Scalar(o == Py_True);
      return true;
    }
    if (PyLong_Check(o)) {
      int overflow = 0;
      const long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
      if (overflow != 0) return false;
      value = tw::Scalar(static_cast<int64_t>(v));
      return true;
    }
    if (PyFloat_Check(o)) {
      value = tw::Scalar(PyFloat_AsDouble(o));
      return true;
    }
    // numpy scalars: integers through __index__, the rest through __float__.
    if (PyIndex_Check(o) && !PySequence_Check(o)) {
      const long long v = PyLong_AsLongLong(o);
      if (v == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return false;
      }
      value = tw::Scalar(static_cast<int64_t>(v));
      return true;
    }
    if (PyObject_HasAttrString(o, "dtype") && PyNumber_Check(o) && !PySequence_Check(o)) {
      const double v = PyFloat_AsDouble(o);
      if (v == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return false;
      }
      value = tw::Scalar(v);
      return true;
    }
    return false;
  }
  static handle cast(const tw::Scalar& s, return_value_policy, handle) {
    return s.is_float ? PyFloat_FromDouble(s.f) : PyLong_FromLongLong(s.i);
  }
};
}  // namespace pybind11::detail

namespace tw::python {
namespace {

using Release = py::call_guard<py::gil_scoped_release>;
// Elementwise and movement ops keep the GIL: submitting one costs less than releasing and
// retaking it (measured: 200k chained one-element adds from Python on a remote device, ~200k ->
// ~300k ops/s on 2 loaded cores). Such an op waits only on a full remote queue, which the
// session drains without any Python thread; on the CPU device it computes with the GIL held, a
// short time next to the ops that release it (matmul, conv, pooling, reductions, nn, optim).
using Submit = py::call_guard<>;

void bind_device(py::module_& m) {
  py::enum_<DType>(m, "dtype", "Element types (tw.float32 is tw.dtype.f32, ...).")
      .value("f32", DType::kF32)
      .value("f64", DType::kF64)
      .value("i32", DType::kI32)
      .value("i64", DType::kI64)
      .value("u8", DType::kU8)
      .value("i8", DType::kI8)
      .value("bool", DType::kBool)
      .value("f16", DType::kF16)
      .value("bf16", DType::kBF16)
      .def_property_readonly("itemsize", [](DType d) { return dtype_size(d); })
      .def_property_readonly("is_floating_point", [](DType d) { return is_float(d); })
      .def("__str__", [](DType d) { return std::string(dtype_name(d)); });

  py::class_<Device>(m, "Device", "Where tensors live and where their ops run.")
      .def(py::init([](const py::object& spec) {
             // tensorwire.device keeps one Device per URL, so that a string names one session.
             return py::module_::import("tensorwire").attr("device")(spec).cast<Device>();
           }),
           py::arg("spec"),
           "A device from a string, as tw.device(spec) and torch.device: 'cpu', 'torch', "
           "'tcp://host:port', 'tls://host:port', 'unix:///path' (optionally '#index'). Every "
           "argument that takes a Device takes such a string too.")
      .def_static("cpu", &Device::cpu, "The process's local CPU device (eager).")
      .def_static("torch", &Device::torch,
                  "The local LibTorch device (ATen kernels with tensorwire's semantics); raises "
                  "tw.Error when this build has no torch backend.")
      .def_static("torch_available", &Device::torch_available)
      .def_static("local", py::overload_cast<const std::string&>(&Device::local), py::arg("spec"),
                  "The local device named by `spec` (\"cpu\", \"torch\", \"vulkan:0\"); raises "
                  "tw.Error naming what is missing when this build or machine has no such device.")
      .def_static(
          "remote",
          [](const std::string& url, int index, const std::string& credential,
             const std::string& tls_ca_file, const std::string& tls_fingerprint) {
            return remote_device(url, index, {tls_ca_file, tls_fingerprint, credential});
          },
          py::arg("url"), py::arg("index") = 0, py::kw_only(), py::arg("credential") = "",
          py::arg("tls_ca_file") = "", py::arg("tls_fingerprint") = "",
          "Device `index` of the compute server at `url` (tcp://host:port, tls://host:port or "
          "unix:///path). Each call opens its own session; nothing is contacted until first use "
          "or connect(). credential: what a server started with one requires; tls_ca_file, "
          "tls_fingerprint: how a tls:// server is verified. Each left empty takes its "
          "environment variable (TW_CREDENTIAL, TW_TLS_CA, TW_TLS_FINGERPRINT).")
      .def_static("capture", &Device::capture, py::arg("inner"),
                  "A fresh capture device over `inner` (cpu, torch or remote): records every op "
                  "issued to its tensors as a trace and runs it on `inner` too. Use it through "
                  "tw.graph.Capture, which gives it inputs and ends the recording.")
      .def_property_readonly("kind",
                             [](const Device& d) {
                               switch (d.kind()) {
                                 case Device::Kind::kCpu: return "cpu";
                                 case Device::Kind::kRemote: return "remote";
                                 case Device::Kind::kCapture: return "capture";
                                 case Device::Kind::kTorch: return "torch";
                                 case Device::Kind::kLocal: return "local";
                               }
                               return "?";
                             })
      .def(
          "sync", [](const Device& d) { wait_for_device(d, [d] { d.sync(); }); },
          "Waits until every op submitted so far has executed (interruptible with Ctrl-C).")
      .def(
          "connect", [](const Device& d) { wait_for_device(d, [d] { d.connect(); }); },
          "Connects now instead of on first use; raises tw.Error on failure.")
      .def("flush", &Device::flush, Release(), "Sends every queued op now (remote devices).")
      .def("__str__", &Device::str)
      .def("__repr__", [](const Device& d) { return "Device(" + d.str() + ")"; })
      .def("__eq__", [](const Device& a, const Device& b) { return a == b; })
      .def("__hash__", [](const Device& d) { return std::hash<const void*>()(d.sink().get()); });
  py::implicitly_convertible<py::str, Device>();
}

void bind_tensor(py::module_& m) {
  py::class_<Tensor> t(m, "Tensor",
                       "A handle to a tensor on some device. Ops validate shapes and dtypes at "
                       "the call (raising tw.Error) and run eagerly on the CPU device, "
                       "asynchronously on remote devices; reading values waits for them.");
  // ---- metadata ----
  t.def_property_readonly("shape", [](const Tensor& x) { return shape_tuple(x.shape()); })
      .def(
          "size",
          [](const Tensor& x, std::optional<int64_t> d) -> py::object {
            if (d) return py::int_(x.size(*d));
            return shape_tuple(x.shape());
          },
          py::arg("dim") = py::none())
      .def("dim", &Tensor::dim)
      .def_property_readonly("ndim", &Tensor::dim)
      .def("numel", &Tensor::numel)
      .def_property_readonly("dtype", &Tensor::dtype)
      .def_property_readonly("device", &Tensor::device)
      .def_property_readonly("id", &Tensor::id)
      .def("__len__",
           [](const Tensor& x) {
             if (x.dim() == 0) throw py::type_error("len() of a 0-d tensor");
             return x.size(0);
           })
      .def("__hash__", [](const Tensor& x) { return std::hash<const void*>()(x.impl().get()); })
      .def(py::init([](const nn::Parameter& p) { return p.value(); }), py::arg("parameter"),
           "The current value of a Parameter (what lets a Parameter stand in for a Tensor).");
  // ---- values ----
  t.def(
       "__dlpack__", [](const Tensor& x, const py::object&) { return to_dlpack(x); },
       py::arg("stream") = py::none(),
       "A DLPack capsule over the values: on the CPU device a contiguous tensor's own memory (no "
       "copy; the capsule keeps it alive), elsewhere a download.")
      .def(
          "__dlpack_device__", [](const Tensor&) { return py::make_tuple(kDLCPU, 0); },
          "(1, 0): the values are exported as CPU memory.");
  t.def("numpy", &to_numpy,
        "The values as a numpy array. On the CPU device it shares the tensor's memory (writes "
        "through it are seen by the tensor; the array keeps the tensor alive); on other devices "
        "it is a download.")
      .def(
          "__array__",
          [](const Tensor& x, py::object dtype) -> py::object {
            py::array a = to_numpy(x);
            return dtype.is_none() ? py::object(a) : a.attr("astype")(dtype);
          },
          py::arg("dtype") = py::none())
      .def("item", &item, "The one element as a Python number (waits for the device).")
      .def("tolist", [](const Tensor& x) { return to_numpy(x).attr("tolist")(); })
      .def("to_bytes",
           [](const Tensor& x) {
             std::vector<uint8_t> b = wait_for_device(x.device(), [x] { return x.to_bytes(); });
             return py::bytes(reinterpret_cast<const char*>(b.data()), b.size());
           })
      .def("__repr__",
           [](const Tensor& x) {
             return wait_for_device(x.device(), [x] { return x.to_string(); });
           })
      .def("__bool__", [](const Tensor& x) { return item(x).cast<bool>(); })
      .def("__float__", [](const Tensor& x) { return item(x).cast<double>(); })
      .def("__int__", [](const Tensor& x) { return item(x).cast<int64_t>(); })
      .def("__index__", [](const Tensor& x) {
        if (!is_integral(x.dtype())) throw py::type_error("only integer tensors can be indices");
        return item(x).cast<int64_t>();
      });
  // ---- conversion ----
  t.def("to", py::overload_cast<const Device&>(&Tensor::to, py::const_), py::arg("device"),
        Release(), doc("to", "A copy of the values on another device."))
      .def("to", py::overload_cast<DType>(&Tensor::to, py::const_), py::arg("dtype"), Release(),
           doc("cast", "A cast to `dtype` (a copy even when the dtype is unchanged)."))
      .def(
          "cpu", [](const Tensor& x) { return x.to(Device::cpu()); }, Release())
      .def(
          "float", [](const Tensor& x) { return x.to(kF32); }, Release())
      .def(
          "double", [](const Tensor& x) { return x.to(kF64); }, Release())
      .def(
          "long", [](const Tensor& x) { return x.to(kI64); }, Release())
      .def(
          "int", [](const Tensor& x) { return x.to(kI32); }, Release())
      .def(
          "bool", [](const Tensor& x) { return x.to(kBool); }, Release());
  // ---- elementwise: one method per kind of tensorwire/op_kinds.h (its api_name column) ----
#define TW_UNARY(Kind, ir_name, name, ...) \
  t.def(#name, &Tensor::name, Submit(), doc(#name, "Elementwise " #name "."));
  TW_UNARY_KINDS(TW_UNARY)
#undef TW_UNARY
  // Binary kinds take a tensor (broadcast), and a scalar where the scalar column is kScalarApi.
#define TW_BINARY(Kind, ir_name, name, grad, scalar) TW_BINARY_##scalar(name)
#define TW_BINARY_kScalarApi(name)                                                             \
  t.def(#name, py::overload_cast<const Tensor&>(&Tensor::name, py::const_), py::arg("other"),  \
        Submit(), doc(#name, "Elementwise " #name " with a tensor (broadcast) or a scalar.")); \
  t.def(#name, py::overload_cast<Scalar>(&Tensor::name, py::const_), py::arg("other"), Submit());
#define TW_BINARY_kNoScalarApi(name)                      \
  t.def(#name, &Tensor::name, py::arg("other"), Submit(), \
        doc(#name, "Elementwise " #name " with a tensor (broadcast)."));
  TW_BINARY_KINDS(TW_BINARY)
#undef TW_BINARY
#undef TW_BINARY_kScalarApi
#undef TW_BINARY_kNoScalarApi
  t.def("clamp", &Tensor::clamp, py::arg("min") = py::none(), py::arg("max") = py::none(), Submit(),
        doc("clamp", "Elementwise min(max(x, min), max); either bound may be None."))
      .def("masked_fill", &Tensor::masked_fill, py::arg("mask"), py::arg("value"), Submit(),
           doc("masked_fill", "x with `value` where the bool `mask` is true."));
  // ---- operators ----
  using T = const Tensor&;
  t.def(
       "__neg__", [](T a) { return -a; }, Submit())
      .def(
          "__invert__", [](T a) { return !a; }, Submit())
      .def(
          "__abs__", [](T a) { return a.abs(); }, Submit());
  t.def(
       "__add__", [](T a, T b) { return a + b; }, Submit())
      .def(
          "__add__", [](T a, Scalar b) { return a + b; }, Submit())
      .def(
          "__radd__", [](T a, Scalar b) { return b + a; }, Submit())
      .def(
          "__sub__", [](T a, T b) { return a - b; }, Submit())
      .def(
          "__sub__", [](T a, Scalar b) { return a - b; }, Submit())
      .def(
          "__rsub__", [](T a, Scalar b) { return b - a; }, Submit())
      .def(
          "__mul__", [](T a, T b) { return a * b; }, Submit())
      .def(
          "__mul__", [](T a, Scalar b) { return a * b; }, Submit())
      .def(
          "__rmul__", [](T a, Scalar b) { return b * a; }, Submit())
      .def(
          "__truediv__", [](T a, T b) { return a / b; }, Submit())
      .def(
          "__truediv__", [](T a, Scalar b) { return a / b; }, Submit())
      .def(
          "__rtruediv__", [](T a, Scalar b) { return b / a; }, Submit())
      .def(
          "__pow__", [](T a, T b) { return a.pow(b); }, Submit())
      .def(
          "__pow__", [](T a, Scalar b) { return a.pow(b); }, Submit())
      .def(
          "__mod__", [](T a, T b) { return a.remainder(b); }, Submit())
      .def(
          "__mod__", [](T a, Scalar b) { return a.remainder(b); }, Submit())
      .def(
          "__matmul__", [](T a, T b) { return a.matmul(b); }, Submit())
      .def(
          "__eq__", [](T a, T b) { return a == b; }, Submit())
      .def(
          "__eq__", [](T a, Scalar b) { return a == b; }, Submit())
      .def(
          "__ne__", [](T a, T b) { return a != b; }, Submit())
      .def(
          "__ne__", [](T a, Scalar b) { return a != b; }, Submit())
      .def(
          "__lt__", [](T a, T b) { return a < b; }, Submit())
      .def(
          "__lt__", [](T a, Scalar b) { return a < b; }, Submit())
      .def(
          "__le__", [](T a, T b) { return a <= b; }, Submit())
      .def(
          "__le__", [](T a, Scalar b) { return a <= b; }, Submit())
      .def(
          "__gt__", [](T a, T b) { return a > b; }, Submit())
      .def(
          "__gt__", [](T a, Scalar b) { return a > b; }, Submit())
      .def(
          "__ge__", [](T a, T b) { return a >= b; }, Submit())
      .def(
          "__ge__", [](T a, Scalar b) { return a >= b; }, Submit())
      .def(
          "__and__", [](T a, T b) { return a.logical_and(b); }, Submit())
      .def(
          "__or__", [](T a, T b) { return a.logical_or(b); }, Submit())
      .def(
          "__xor__", [](T a, T b) { return a.logical_xor(b); }, Submit())
      .def("__getitem__", &get_item)
      .def("__setitem__",
           [](Tensor& a, const py::object& index, T v) { a = set_item(a, index, v); })
      .def("__setitem__", [](Tensor& a, const py::object& index, Scalar v) {
        a = set_item(a, index, full({}, v, a.dtype(), a.device()));
      });
  // ---- reductions: no dim, one dim, or (dims column kDimList) several ----
#define TW_REDUCE(Kind, ir_name, name, grad, dims) TW_REDUCE_##dims(name)
#define TW_REDUCE_kDimList(name)                                                    \
  t.def(                                                                            \
      #name,                                                                        \
      [](T x, py::object dim, bool keepdim) {                                       \
        if (dim.is_none()) {                                                        \
          py::gil_scoped_release r;                                                 \
          return x.name(std::nullopt, keepdim);                                     \
        }                                                                           \
        std::vector<int64_t> dims = dims_arg(dim);                                  \
        py::gil_scoped_release r;                                                   \
        return dims.size() == 1 ? x.name(dims[0], keepdim) : x.name(dims, keepdim); \
      },                                                                            \
      py::arg("dim") = py::none(), py::arg("keepdim") = false,                      \
      doc(#name, #name " over all elements, or over dim (an int or a list of ints)."));
#define TW_REDUCE_kOneDim(name)                                \
  t.def(                                                       \
      #name,                                                   \
      [](T x, std::optional<int64_t> dim, bool keepdim) {      \
        py::gil_scoped_release r;                              \
        return x.name(dim, keepdim);                           \
      },                                                       \
      py::arg("dim") = py::none(), py::arg("keepdim") = false, \
      doc(#name, #name " over all elements, or over one dim."));
  TW_REDUCE_KINDS(TW_REDUCE)
#undef TW_REDUCE
#undef TW_REDUCE_kDimList
#undef TW_REDUCE_kOneDim
  t.def("cumsum", &Tensor::cumsum, py::arg("dim"), Release(),
        doc("cumsum", "Running sum along dim."))
      .def("matmul", &Tensor::matmul, py::arg("other"), Release(),
           doc("matmul", "Matrix product; 1-D operands are treated as in torch.matmul."));
  // ---- movement ----
  t.def(
       "reshape", [](T x, const Shape& s) { return x.reshape(s); }, py::arg("shape"), Submit(),
       doc("reshape", "The same values in a new shape (one size may be -1)."))
      .def(
          "view", [](T x, const Shape& s) { return x.reshape(s); }, py::arg("shape"), Submit(),
          doc("view", "As reshape."))
      .def("flatten", &Tensor::flatten, py::arg("start_dim") = 0, py::arg("end_dim") = -1, Submit(),
           doc("flatten", "Joins dims start_dim..end_dim into one."))
      .def("permute", &Tensor::permute, py::arg("dims"), Submit(),
           doc("permute", "The dims reordered."))
      .def("transpose", &Tensor::transpose, py::arg("dim0"), py::arg("dim1"), Submit(),
           doc("transpose", "dim0 and dim1 swapped."))
      .def("t", &Tensor::t, Submit(), doc("t", "The transpose of a 2-D tensor."))
      .def_property_readonly("T", [](T x) { return x.t(); })
      .def("expand", &Tensor::expand, py::arg("shape"), Submit(),
           doc("expand", "Size-1 dims stretched to `shape` (-1 keeps a dim)."))
      .def("expand_as", &Tensor::expand_as, py::arg("other"), Submit())
      .def(
          "squeeze", [](T x, std::optional<int64_t> d) { return d ? x.squeeze(*d) : x.squeeze(); },
          py::arg("dim") = py::none(), Submit(), doc("squeeze", "Size-1 dims removed."))
      .def("unsqueeze", &Tensor::unsqueeze, py::arg("dim"), Submit(),
           doc("unsqueeze", "A size-1 dim inserted at dim."))
      .def("slice", &Tensor::slice, py::arg("dim"), py::arg("start"), py::arg("end"),
           py::arg("step") = 1, Submit(),
           doc("slice", "Elements start, start+step, ... < end along dim (Python slice rules)."))
      .def("narrow", &Tensor::narrow, py::arg("dim"), py::arg("start"), py::arg("length"), Submit(),
           doc("narrow", "length elements from start along dim."))
      .def("slice_assign", &Tensor::slice_assign, py::arg("dim"), py::arg("start"), py::arg("end"),
           py::arg("step"), py::arg("src"), Submit(),
           doc("slice_assign", "A copy with this[slice(dim, start, end, step)] = src."))
      .def(
          "flip", [](T x, const py::object& dims) { return x.flip(dims_arg(dims)); },
          py::arg("dims"), doc("flip", "The order of elements reversed along dims."))
      .def("repeat", &Tensor::repeat, py::arg("repeats"), Submit(),
           doc("repeat", "Tiled as torch.Tensor.repeat."));
  // ---- indexing and neural ----
  t.def("gather", &Tensor::gather, py::arg("dim"), py::arg("index"), Release(),
        doc("gather", "out[i][j] = x[index[i][j]][j] (dim 0)."))
      .def("scatter_add", &Tensor::scatter_add, py::arg("dim"), py::arg("index"), py::arg("src"),
           Release(), doc("scatter_add", "x plus src scattered to index along dim."))
      .def("index_select", &Tensor::index_select, py::arg("dim"), py::arg("index"), Release(),
           doc("index_select", "The entries of index along dim."))
      .def("softmax", &Tensor::softmax, py::arg("dim"), Release(),
           doc("softmax", "Softmax along dim."))
      .def("log_softmax", &Tensor::log_softmax, py::arg("dim"), Release(),
           doc("log_softmax", "Log of softmax along dim."));
  // ---- autograd ----
  t.def_property(
       "requires_grad", &Tensor::requires_grad, [](Tensor& x, bool on) { x.set_requires_grad(on); },
       "Whether backward() accumulates a gradient for this (floating-point leaf) tensor.")
      .def(
          "requires_grad_", [](Tensor& x, bool on) -> Tensor& { return x.set_requires_grad(on); },
          py::arg("requires_grad") = true, py::return_value_policy::reference_internal)
      .def_property_readonly("is_leaf", &Tensor::is_leaf)
      .def_property(
          "grad",
          [](T x) -> py::object {
            Tensor g = x.grad();
            return g.defined() ? py::cast(g) : py::none();
          },
          [](Tensor& x, const py::object& g) {
            x.set_grad(g.is_none() ? Tensor() : g.cast<Tensor>());
          },
          "What backward() accumulated into this leaf; None before that and after zero_grad().")
      .def("zero_grad", &Tensor::zero_grad)
      .def(
          "backward",
          [](T x, const py::object& grad, bool retain_graph) {
            Tensor g = grad.is_none() ? Tensor() : grad.cast<Tensor>();
            py::gil_scoped_release r;
            x.backward(g, retain_graph);
          },
          py::arg("gradient") = py::none(), py::arg("retain_graph") = false,
          "Backpropagates from this tensor (the gradient defaults to ones for one element).")
      .def("detach", &Tensor::detach, "The same values cut from the graph.")
      .def(
          "_rebind", [](Tensor& x, const Tensor& value) { x = value; }, py::arg("value"),
          "Makes this Python object hold `value` (the in-place ops of __init__.py: tensors are "
          "functional, so an in-place op rebinds the object to its result).");
}

void bind_functions(py::module_& m) {
  using T = const Tensor&;
  m.def("zeros", &zeros, py::arg("shape"), py::arg("dtype") = kF32,
        py::arg("device") = Device::cpu(), Release(), doc("zeros", "A tensor of zeros."));
  m.def("ones", &ones, py::arg("shape"), py::arg("dtype") = kF32, py::arg("device") = Device::cpu(),
        Release(), doc("ones", "A tensor of ones."));
  m.def("full", &full, py::arg("shape"), py::arg("value"), py::arg("dtype") = kF32,
        py::arg("device") = Device::cpu(), Release(), doc("full", "A tensor of `value`."));
  m.def("zeros_like", &zeros_like, Release());
  m.def("ones_like", &ones_like, Release());
  m.def("full_like", &full_like, Release());
  m.def(
      "arange",
      [](Scalar start, Scalar end, Scalar step, std::optional<DType> dtype, const Device& d) {
        return arange(start, end, step, dtype, d);
      },
      py::arg("start"), py::arg("end"), py::arg("step") = Scalar(int64_t{1}),
      py::arg("dtype") = py::none(), py::arg("device") = Device::cpu(), Release(),
      doc("arange", "[start, end) by step; i64 when all three are ints, else f32."));
  m.def("eye", &eye, py::arg("n"), py::arg("m") = py::none(), py::arg("dtype") = kF32,
        py::arg("device") = Device::cpu(), Release(), doc("eye", "The identity matrix."));
  m.def("manual_seed", &manual_seed, py::arg("seed"),
        "Restarts the global sequence of random seeds (same tensors on every device).");
  m.def("rand", &rand, py::arg("shape"), py::arg("dtype") = kF32, py::arg("device") = Device::cpu(),
        Release(), doc("rand", "Uniform in [0, 1)."));
  m.def("randn", &randn, py::arg("shape"), py::arg("dtype") = kF32,
        py::arg("device") = Device::cpu(), Release(), doc("randn", "Standard normal."));
  m.def("uniform", &uniform, py::arg("shape"), py::arg("low"), py::arg("high"),
        py::arg("dtype") = kF32, py::arg("device") = Device::cpu(), Release(),
        doc("uniform", "Uniform in [low, high)."));
  m.def("normal", &normal, py::arg("shape"), py::arg("mean"), py::arg("std"),
        py::arg("dtype") = kF32, py::arg("device") = Device::cpu(), Release(),
        doc("normal", "Normal with the given mean and std."));
  m.def("bernoulli", &bernoulli, py::arg("p"), Release(),
        doc("bernoulli", "1 with probability p."));
  m.def("from_numpy", &from_numpy, py::arg("array"), py::arg("device") = Device::cpu(),
        doc("from_numpy",
            "A tensor over a C-contiguous numpy array. On the CPU device it shares the array's "
            "memory (writes to the array are seen by the tensor; the tensor keeps the array "
            "alive); on other devices it is an upload."));
  m.def("from_dlpack", &from_dlpack, py::arg("obj"), py::arg("device") = Device::cpu(),
        "A tensor over the memory of an object with __dlpack__ (numpy arrays, other libraries' "
        "tensors). On the CPU device it shares the memory (no copy), holding the producer's "
        "memory until the last tensor sharing it goes; on other devices it is an upload. The "
        "memory must be CPU memory and C-contiguous.");
  m.def("_copy_from_numpy", &copy_from_numpy, py::arg("array"), py::arg("device"));
  m.def(
      "from_bytes",
      [](const py::bytes& b, const Shape& shape, DType dtype, const Device& d) {
        const std::string s = b;
        return from_bytes(
            std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size()), shape,
            dtype, d);
      },
      py::arg("data"), py::arg("shape"), py::arg("dtype"), py::arg("device") = Device::cpu());
  m.def("where", &where, py::arg("cond"), py::arg("a"), py::arg("b"), Release(),
        doc("where", "a where cond is true, else b (broadcast)."));
  m.def("matmul", &matmul, Release(), doc("matmul", "Matrix product (as Tensor.matmul)."));
  m.def("cat", &cat, py::arg("tensors"), py::arg("dim") = 0, Release(),
        doc("cat", "The tensors joined along dim."));
  m.def("stack", &stack, py::arg("tensors"), py::arg("dim") = 0, Release(),
        doc("stack", "The tensors stacked along a new dim."));
  m.def("one_hot", &one_hot, py::arg("x"), py::arg("num_classes"), Release(),
        doc("one_hot", "i64 one-hot rows."));
  m.def("embedding", &embedding, py::arg("weight"), py::arg("indices"), Release(),
        doc("embedding", "Rows of weight looked up by indices."));
  m.def(
      "conv2d",
      [](T x, T w, const py::object& b, std::vector<int64_t> stride, std::vector<int64_t> padding,
         std::vector<int64_t> dilation, int64_t groups) {
        Tensor bias = b.is_none() ? Tensor() : b.cast<Tensor>();
        py::gil_scoped_release r;
        return conv2d(x, w, bias, stride, padding, dilation, groups);
      },
      py::arg("x"), py::arg("weight"), py::arg("bias") = py::none(),
      py::arg("stride") = std::vector<int64_t>{1, 1},
      py::arg("padding") = std::vector<int64_t>{0, 0},
      py::arg("dilation") = std::vector<int64_t>{1, 1}, py::arg("groups") = 1,
      doc("conv2d", "2-D convolution of x [N, C, H, W] with weight [O, C/groups, kH, kW]."));
  m.def("max_pool2d", &max_pool2d, py::arg("x"), py::arg("kernel"),
        py::arg("stride") = std::vector<int64_t>{}, py::arg("padding") = std::vector<int64_t>{0, 0},
        Release(), doc("max_pool2d", "2-D max pooling (stride defaults to the kernel)."));
  m.def("avg_pool2d", &avg_pool2d, py::arg("x"), py::arg("kernel"),
        py::arg("stride") = std::vector<int64_t>{}, py::arg("padding") = std::vector<int64_t>{0, 0},
        Release(), doc("avg_pool2d", "2-D average pooling (stride defaults to the kernel)."));
  m.def("adaptive_avg_pool2d", &adaptive_avg_pool2d, py::arg("x"), py::arg("output_size"),
        Release(), doc("adaptive_avg_pool2d", "Average pooling to a given output size."));
  m.def(
      "layer_norm",
      [](T x, const Shape& shape, const py::object& w, const py::object& b, double eps) {
        Tensor wt = w.is_none() ? Tensor() : w.cast<Tensor>();
        Tensor bt = b.is_none() ? Tensor() : b.cast<Tensor>();
        py::gil_scoped_release r;
        return layer_norm(x, shape, wt, bt, eps);
      },
      py::arg("x"), py::arg("normalized_shape"), py::arg("weight") = py::none(),
      py::arg("bias") = py::none(), py::arg("eps") = 1e-5,
      doc("layer_norm", "Normalised over the last dims, then scaled and shifted."));
  m.def(
      "scaled_dot_product_attention",
      [](T q, T k, T v, const py::object& mask, bool causal, std::optional<double> scale) {
        Tensor mt = mask.is_none() ? Tensor() : mask.cast<Tensor>();
        py::gil_scoped_release r;
        return scaled_dot_product_attention(q, k, v, mt, causal, scale);
      },
      py::arg("query"), py::arg("key"), py::arg("value"), py::arg("mask") = py::none(),
      py::arg("causal") = false, py::arg("scale") = py::none(),
      doc("scaled_dot_product_attention",
          "softmax(scale q k^T) v over the attended keys (mask: bool, true attends; causal: key "
          "<= query), without materialising the scores. scale defaults to 1/sqrt(D)."));
  // ---- quantization (docs/ops.md, "Quantization"); block formats by name: "q8"/"q8_0",
  // "q4"/"q4_0"
  auto opt_tensor = [](const py::object& o) { return o.is_none() ? Tensor() : o.cast<Tensor>(); };
  m.def(
      "quantize",
      [opt_tensor](T x, T scale, const py::object& zp, DType dtype, int64_t axis, int64_t block) {
        Tensor z = opt_tensor(zp);
        py::gil_scoped_release r;
        return quantize(x, scale, z, dtype, axis, block);
      },
      py::arg("x"), py::arg("scale"), py::arg("zero_point") = py::none(), py::arg("dtype") = kI8,
      py::arg("axis") = 1, py::arg("block") = 0,
      doc("quantize",
          "saturate(round_half_even(x / scale) + zero_point) in i8 or u8: per tensor, "
          "per channel along axis, or per block of `block` along axis."));
  m.def(
      "dequantize",
      [opt_tensor](T q, T scale, const py::object& zp, int64_t axis, int64_t block) {
        Tensor z = opt_tensor(zp);
        py::gil_scoped_release r;
        return dequantize(q, scale, z, axis, block);
      },
      py::arg("q"), py::arg("scale"), py::arg("zero_point") = py::none(), py::arg("axis") = 1,
      py::arg("block") = 0, doc("dequantize", "(q - zero_point) * scale in f32."));
  m.def(
      "pack_blocks",
      [](T x, const std::string& format) {
        const BlockFormat f = nn::block_format_of(format);
        py::gil_scoped_release r;
        return pack_blocks(x, f);
      },
      py::arg("x"), py::arg("format"),
      doc("pack_blocks", "f32 rows packed into ggml Q8_0 or Q4_0 blocks (u8 bytes)."));
  m.def(
      "unpack_blocks",
      [](T x, const std::string& format) {
        const BlockFormat f = nn::block_format_of(format);
        py::gil_scoped_release r;
        return unpack_blocks(x, f);
      },
      py::arg("packed"), py::arg("format"), doc("unpack_blocks", "Packed blocks back to f32."));
  m.def(
      "linear_blocks",
      [opt_tensor](T x, T w, const std::string& format, const py::object& b) {
        const BlockFormat f = nn::block_format_of(format);
        Tensor bias = opt_tensor(b);
        py::gil_scoped_release r;
        return linear_blocks(x, w, f, bias);
      },
      py::arg("x"), py::arg("weight"), py::arg("format"), py::arg("bias") = py::none(),
      doc("linear_blocks", "x w^T + bias with w packed blocks, dequantized inside the kernel."));
  m.def(
      "linear_int8",
      [opt_tensor](T x, T w, T ws, const py::object& b) {
        Tensor bias = opt_tensor(b);
        py::gil_scoped_release r;
        return linear_int8(x, w, ws, bias);
      },
      py::arg("x"), py::arg("weight"), py::arg("weight_scale"), py::arg("bias") = py::none(),
      doc("linear_int8", "x quantized per call to u8 times i8 w [out, in] with per-row scales."));
  m.def(
      "quantize_weight_int8",
      [](T w) {
        py::gil_scoped_release r;
        return quantize_weight_int8(w);
      },
      py::arg("weight"), doc("quantize_weight_int8", "(i8 weight, f32 per-row scales)."));
  m.def("softmax", py::overload_cast<const Tensor&, int64_t>(&softmax), py::arg("x"),
        py::arg("dim"), Release(), doc("softmax", "Softmax along dim."));
  m.def("log_softmax", py::overload_cast<const Tensor&, int64_t>(&log_softmax), py::arg("x"),
        py::arg("dim"), Release(), doc("log_softmax", "Log of softmax along dim."));
  m.def("set_num_threads", &set_num_threads, py::arg("n"));
  m.def("get_num_threads", &get_num_threads);
  m.def("is_grad_enabled", &is_grad_enabled);
  m.def("set_grad_enabled", &set_grad_enabled, py::arg("enabled"));
  // tw.autocast's scope: the C++ guard, made on __enter__ and dropped on __exit__ (one thread).
  struct AutocastScope {
    DType dtype;
    std::unique_ptr<AutocastGuard> guard;
  };
  py::class_<AutocastScope>(m, "_AutocastScope")
      .def(py::init([](DType d) {
             return AutocastScope{d, nullptr};
           }),
           py::arg("dtype"))
      .def("enter", [](AutocastScope& s) { s.guard = std::make_unique<AutocastGuard>(s.dtype); })
      .def("exit", [](AutocastScope& s) { s.guard.reset(); });
  m.def("autocast_dtype", &autocast_dtype);
  m.def(
      "backward",
      [](const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain) {
        py::gil_scoped_release r;
        backward(roots, grads, retain);
      },
      py::arg("tensors"), py::arg("grad_tensors") = std::vector<Tensor>{},
      py::arg("retain_graph") = false);
}

void bind_nn(py::module_& m) {
  py::module_ nn = m.def_submodule("nn", "The C++ modules of tensorwire/nn.h.");
  py::class_<nn::Parameter, nn::ParameterPtr>(nn, "Parameter",
                                              "A trainable tensor with a stable identity; an "
                                              "optimizer step rebinds it to its new value.")
      .def(py::init<Tensor>(), py::arg("value"))
      .def_property("data", &nn::Parameter::value, &nn::Parameter::set,
                    "The current value (assigning rebinds it, keeping requires_grad).")
      .def_property_readonly("grad",
                             [](const nn::Parameter& p) -> py::object {
                               Tensor g = p.grad();
                               return g.defined() ? py::cast(g) : py::none();
                             })
      .def("set", &nn::Parameter::set, py::arg("value"))
      .def("zero_grad", &nn::Parameter::zero_grad);
  py::implicitly_convertible<nn::Parameter, Tensor>();

  py::class_<nn::Module, std::shared_ptr<nn::Module>>(nn, "_CModule",
                                                      "A module implemented in C++.")
      .def("forward", &nn::Module::forward, Release())
      .def("__call__", &nn::Module::forward, Release())
      .def("parameters", &nn::Module::parameters)
      .def("named_parameters", &nn::Module::named_parameters)
      .def("train", &nn::Module::train, py::arg("mode") = true)
      .def("eval", &nn::Module::eval)
      .def_property_readonly("training", &nn::Module::is_training)
      .def(
          "to",
          [](nn::Module& mod, const Device& d) -> nn::Module& {
            py::gil_scoped_release r;
            mod.to(d);
            return mod;
          },
          py::return_value_policy::reference_internal)
      .def("zero_grad", &nn::Module::zero_grad)
      .def("state_dict",
           [](const nn::Module& mod) {
             py::dict out;
             for (auto& [k, v] : mod.state_dict()) out[py::str(k)] = v;
             return out;
           })
      .def("load_state_dict", &nn::Module::load_state_dict, py::arg("state"),
           py::arg("strict") = true, Release())
      .def("__repr__", &nn::Module::to_string);
  using P = nn::Placement;
  auto placement = [](const std::optional<Device>& d, DType dt) {
    return P{d ? *d : Device::cpu(), dt};
  };
  py::class_<nn::Linear, nn::Module, std::shared_ptr<nn::Linear>>(nn, "Linear")
      .def(py::init(
               [placement](int64_t in, int64_t out, bool bias, std::optional<Device> d, DType dt) {
                 return std::make_shared<nn::Linear>(in, out, bias, placement(d, dt));
               }),
           py::arg("in_features"), py::arg("out_features"), py::arg("bias") = true,
           py::arg("device") = py::none(), py::arg("dtype") = kF32)
      .def_property_readonly("weight", &nn::Linear::weight)
      .def_property_readonly("bias", &nn::Linear::bias)
      .def_property_readonly("quantized", [](const nn::Linear& l) -> std::optional<std::string> {
        if (!l.quantized()) return std::nullopt;
        return std::string(block_format_name(*l.quantized()));
      });
  nn.def(
      "_quantize",
      [](nn::Module& mod, const std::string& scheme) {
        py::gil_scoped_release r;
        return nn::quantize(mod, scheme);
      },
      py::arg("module"), py::arg("scheme"));
  py::class_<nn::Conv2d, nn::Module, std::shared_ptr<nn::Conv2d>>(nn, "Conv2d")
      .def(py::init([placement](int64_t in, int64_t out, const py::object& k,
                                const py::object& stride, const py::object& padding,
                                const py::object& dilation, int64_t groups, bool bias,
                                std::optional<Device> d, DType dt) {
             auto pair = [](const py::object& o) {
               std::vector<int64_t> v = dims_arg(o);
               return v.size() == 1 ? std::vector<int64_t>{v[0], v[0]} : v;
             };
             nn::Conv2dOptions o;
             o.in_channels = in;
             o.out_channels = out;
             o.kernel_size = pair(k);
             o.stride = pair(stride);
             o.padding = pair(padding);
             o.dilation = pair(dilation);
             o.groups = groups;
             o.bias = bias;
             return std::make_shared<nn::Conv2d>(o, placement(d, dt));
           }),
           py::arg("in_channels"), py::arg("out_channels"), py::arg("kernel_size"),
           py::arg("stride") = 1, py::arg("padding") = 0, py::arg("dilation") = 1,
           py::arg("groups") = 1, py::arg("bias") = true, py::arg("device") = py::none(),
           py::arg("dtype") = kF32)
      .def_property_readonly("weight", &nn::Conv2d::weight)
      .def_property_readonly("bias", &nn::Conv2d::bias);
  py::class_<nn::MaxPool2d, nn::Module, std::shared_ptr<nn::MaxPool2d>>(nn, "MaxPool2d")
      .def(py::init<int64_t, std::optional<int64_t>, int64_t>(), py::arg("kernel_size"),
           py::arg("stride") = py::none(), py::arg("padding") = 0);
  py::class_<nn::AvgPool2d, nn::Module, std::shared_ptr<nn::AvgPool2d>>(nn, "AvgPool2d")
      .def(py::init<int64_t, std::optional<int64_t>, int64_t>(), py::arg("kernel_size"),
           py::arg("stride") = py::none(), py::arg("padding") = 0);
  py::class_<nn::ReLU, nn::Module, std::shared_ptr<nn::ReLU>>(nn, "ReLU").def(py::init<>());
  py::class_<nn::GELU, nn::Module, std::shared_ptr<nn::GELU>>(nn, "GELU").def(py::init<>());
  py::class_<nn::Dropout, nn::Module, std::shared_ptr<nn::Dropout>>(nn, "Dropout")
      .def(py::init<double>(), py::arg("p") = 0.5);
  py::class_<nn::LayerNorm, nn::Module, std::shared_ptr<nn::LayerNorm>>(nn, "LayerNorm")
      .def(py::init([placement](const py::object& shape, double eps, bool affine,
                                std::optional<Device> d, DType dt) {
             return std::make_shared<nn::LayerNorm>(dims_arg(shape), eps, affine, placement(d, dt));
           }),
           py::arg("normalized_shape"), py::arg("eps") = 1e-5, py::arg("elementwise_affine") = true,
           py::arg("device") = py::none(), py::arg("dtype") = kF32);
  py::class_<nn::Embedding, nn::Module, std::shared_ptr<nn::Embedding>>(nn, "Embedding")
      .def(py::init([placement](int64_t n, int64_t dim, std::optional<Device> d, DType dt) {
             return std::make_shared<nn::Embedding>(n, dim, placement(d, dt));
           }),
           py::arg("num_embeddings"), py::arg("embedding_dim"), py::arg("device") = py::none(),
           py::arg("dtype") = kF32)
      .def_property_readonly("weight", &nn::Embedding::weight);
  py::class_<nn::Flatten, nn::Module, std::shared_ptr<nn::Flatten>>(nn, "Flatten")
      .def(py::init<int64_t, int64_t>(), py::arg("start_dim") = 1, py::arg("end_dim") = -1);
  // Recurrent layers: called as torch's, lstm(x, (h0, c0)) -> (output, (h_n, c_n)); gru and rnn
  // (x, h0) -> (output, h_n).
  auto rnn_class = [&](auto tag, const char* name, nn::RNNBase::Kind kind) {
    using M = typename decltype(tag)::type;
    const bool lstm = kind == nn::RNNBase::Kind::kLstm;
    auto call = [lstm](M& m, const Tensor& x, const py::object& hx) -> py::object {
      Tensor h0, c0;
      if (!hx.is_none()) {
        if (lstm) {
          auto pair = hx.cast<std::pair<Tensor, Tensor>>();
          h0 = pair.first;
          c0 = pair.second;
        } else {
          h0 = hx.cast<Tensor>();
        }
      }
      nn::RNNOutput o;
      {
        py::gil_scoped_release r;
        o = m.forward_state(x, h0, c0);
      }
      if (lstm) return py::make_tuple(o.output, py::make_tuple(o.h_n, o.c_n));
      return py::make_tuple(o.output, o.h_n);
    };
    py::class_<M, nn::Module, std::shared_ptr<M>>(nn, name)
        .def(py::init([placement, kind](int64_t in, int64_t hidden, int64_t layers,
                                        const std::string& nonlinearity, bool bias,
                                        bool batch_first, double dropout, bool bidirectional,
                                        std::optional<Device> d, DType dt) {
               if (dropout != 0) {
                 throw Error("nn.RNN/LSTM/GRU: dropout between layers is not supported (got " +
                             std::to_string(dropout) + "); use 0");
               }
               if (kind != nn::RNNBase::Kind::kRnn && nonlinearity != "tanh") {
                 throw Error("nonlinearity is RNN's option only");
               }
               nn::RNNOptions o;
               o.num_layers = layers;
               o.nonlinearity = nonlinearity;
               o.bias = bias;
               o.batch_first = batch_first;
               o.bidirectional = bidirectional;
               return std::make_shared<M>(in, hidden, o, placement(d, dt));
             }),
             py::arg("input_size"), py::arg("hidden_size"), py::arg("num_layers") = 1,
             py::arg("nonlinearity") = "tanh", py::arg("bias") = true,
             py::arg("batch_first") = false, py::arg("dropout") = 0.0,
             py::arg("bidirectional") = false, py::arg("device") = py::none(),
             py::arg("dtype") = kF32)
        .def("__call__", call, py::arg("input"), py::arg("hx") = py::none())
        .def("forward", call, py::arg("input"), py::arg("hx") = py::none())
        .def_property_readonly("input_size", &M::input_size)
        .def_property_readonly("hidden_size", &M::hidden_size)
        .def_property_readonly("num_layers", [](const M& m) { return m.options().num_layers; })
        .def_property_readonly("bidirectional",
                               [](const M& m) { return m.options().bidirectional; })
        .def_property_readonly("batch_first", [](const M& m) { return m.options().batch_first; });
  };
  rnn_class(std::type_identity<nn::RNN>{}, "RNN", nn::RNNBase::Kind::kRnn);
  rnn_class(std::type_identity<nn::LSTM>{}, "LSTM", nn::RNNBase::Kind::kLstm);
  rnn_class(std::type_identity<nn::GRU>{}, "GRU", nn::RNNBase::Kind::kGru);
  py::class_<nn::Sequential, nn::Module, std::shared_ptr<nn::Sequential>>(nn, "_CSequential")
      .def(py::init([](const std::vector<std::shared_ptr<nn::Module>>& mods) {
        auto s = std::make_shared<nn::Sequential>();
        for (const auto& mod : mods) s->push_back(mod);
        return s;
      }));
  // Transformers (tensorwire/transformer.h).
  py::class_<nn::MultiheadAttention, nn::Module, std::shared_ptr<nn::MultiheadAttention>>(
      nn, "MultiheadAttention", "Causal multi-head self-attention: x [B, T, E] -> [B, T, E].")
      .def(py::init([placement](int64_t e, int64_t h, double p, bool bias, std::optional<Device> d,
                                DType dt) {
             return std::make_shared<nn::MultiheadAttention>(e, h, p, bias, placement(d, dt));
           }),
           py::arg("embed_dim"), py::arg("num_heads"), py::arg("dropout") = 0.0,
           py::arg("bias") = true, py::arg("device") = py::none(), py::arg("dtype") = kF32);
  py::class_<nn::TransformerBlock, nn::Module, std::shared_ptr<nn::TransformerBlock>>(
      nn, "TransformerBlock", "Pre-norm block: attention and a GELU MLP, each residual.")
      .def(py::init([placement](int64_t e, int64_t h, double p, bool bias, std::optional<Device> d,
                                DType dt) {
             return std::make_shared<nn::TransformerBlock>(e, h, p, bias, placement(d, dt));
           }),
           py::arg("embed_dim"), py::arg("num_heads"), py::arg("dropout") = 0.0,
           py::arg("bias") = true, py::arg("device") = py::none(), py::arg("dtype") = kF32);
  py::class_<nn::GPT, nn::Module, std::shared_ptr<nn::GPT>>(
      nn, "GPT", "Token and position embeddings, n_layer blocks, a final LayerNorm and a head.")
      .def(py::init([placement](int64_t vocab, int64_t context, int64_t n_layer, int64_t n_head,
                                int64_t n_embd, double dropout, bool bias, bool tied,
                                std::optional<Device> d, DType dt) {
             return std::make_shared<nn::GPT>(nn::GPTConfig{.vocab_size = vocab,
                                                            .context = context,
                                                            .n_layer = n_layer,
                                                            .n_head = n_head,
                                                            .n_embd = n_embd,
                                                            .dropout = dropout,
                                                            .bias = bias,
                                                            .tied = tied},
                                              placement(d, dt));
           }),
           py::arg("vocab_size"), py::arg("context") = 128, py::arg("n_layer") = 4,
           py::arg("n_head") = 4, py::arg("n_embd") = 192, py::arg("dropout") = 0.0,
           py::arg("bias") = true, py::arg("tied") = false, py::arg("device") = py::none(),
           py::arg("dtype") = kF32)
      .def("loss", &nn::GPT::loss, py::arg("tokens"), py::arg("targets"), Release(),
           "Mean cross-entropy of the logits of tokens [B, T] against targets [B, T].")
      .def_property_readonly("vocab_size", [](const nn::GPT& g) { return g.config().vocab_size; })
      .def_property_readonly("context", [](const nn::GPT& g) { return g.config().context; });
  py::class_<nn::Generator>(nn, "Generator",
                            "Generation with a key/value cache; each token one replayed graph.")
      .def(py::init([](const std::shared_ptr<nn::GPT>& model, bool use_graph) {
             // The model outlives the generator: it is kept alive with it (keep_alive below).
             return std::make_unique<nn::Generator>(*model, use_graph);
           }),
           py::arg("model"), py::arg("use_graph") = true, py::keep_alive<1, 2>())
      .def("reset", &nn::Generator::reset, Release())
      .def("step", &nn::Generator::step, py::arg("token"), Release(),
           "Feeds token at the next position; returns the next-token logits.")
      .def(
          "generate",
          [](nn::Generator& g, const std::vector<int64_t>& prompt, int64_t new_tokens,
             double temperature, int64_t top_k, uint64_t seed) {
            return g.generate(prompt, new_tokens,
                              {.temperature = temperature, .top_k = top_k, .seed = seed});
          },
          py::arg("prompt"), py::arg("new_tokens"), py::arg("temperature") = 1.0,
          py::arg("top_k") = 0, py::arg("seed") = 0, Release(),
          "Feeds the prompt from position 0, then samples new_tokens tokens (temperature <= 0: "
          "greedy).")
      .def_property_readonly("position", &nn::Generator::position);
  // One model over several devices (tensorwire/split.h).
  py::class_<nn::LayerPlan>(nn, "LayerPlan", "Where place() put a model's layers.")
      .def_readonly("devices", &nn::LayerPlan::devices)
      .def_readonly("first", &nn::LayerPlan::first,
                    "device i holds layers first[i] .. first[i + 1] - 1")
      .def_readonly("bytes", &nn::LayerPlan::bytes, "parameter bytes on each device")
      .def_readonly("free", &nn::LayerPlan::free, "free bytes each device had (2**64 - 1: unknown)")
      .def("device_of", &nn::LayerPlan::device_of, py::arg("layer"))
      .def("__repr__", &nn::LayerPlan::to_string);
  nn.def(
      "place",
      [](nn::Module& model, const std::vector<Device>& devices,
         const std::optional<std::vector<int64_t>>& layers, double memory_factor) {
        return nn::place(
            model, devices,
            {.layers = layers.value_or(std::vector<int64_t>{}), .memory_factor = memory_factor});
      },
      py::arg("model"), py::arg("devices"), py::arg("layers") = py::none(),
      py::arg("memory_factor") = 1.0, Release(),
      "Puts the model's layers on the devices, in proportion to their servers' free memory (or "
      "layers[i] on device i), uploading each layer's parameters to its own server; raises, "
      "naming the sizes, when the model does not fit.");
  nn.def("free_memory", &nn::free_memory, py::arg("device"), Release(),
         "Bytes the device's session may still take, as its server reports them.");
  py::class_<nn::Pipeline>(nn, "Pipeline",
                           "A placed GPT run stage by stage, activations moving between servers.")
      .def(py::init([](const std::shared_ptr<nn::GPT>& model, const nn::LayerPlan& plan,
                       int64_t micro_batches) {
             return std::make_unique<nn::Pipeline>(*model, plan, micro_batches);
           }),
           py::arg("model"), py::arg("plan"), py::arg("micro_batches") = 1, py::keep_alive<1, 2>())
      .def("forward", &nn::Pipeline::forward, py::arg("tokens"), Release(),
           "Logits [B, T, V] of tokens [B, T], on the last device.")
      .def("__call__", &nn::Pipeline::forward, py::arg("tokens"), Release())
      .def("forward_backward", &nn::Pipeline::forward_backward, py::arg("tokens"),
           py::arg("targets"), Release(),
           "Forward and backward of every micro-batch (GPipe); returns the loss, gradients in "
           "the parameters.")
      .def_property_readonly("plan", &nn::Pipeline::plan);
  py::class_<nn::PipelineGenerator>(nn, "PipelineGenerator",
                                    "Generation over a Pipeline, each server holding its "
                                    "layers' key/value caches.")
      .def(py::init([](nn::Pipeline& pipe, int64_t prefill_chunks, bool use_graph) {
             return std::make_unique<nn::PipelineGenerator>(pipe, prefill_chunks, use_graph);
           }),
           py::arg("pipeline"), py::arg("prefill_chunks") = 0, py::arg("use_graph") = true,
           py::keep_alive<1, 2>(),
           "prefill_chunks: the prompt goes through the servers in that many chunks of "
           "consecutive positions, so that they work on it at the same time (0: one per device "
           "on one device, else 4 per device); use_graph: each server's part of a step runs as "
           "a registered graph there.")
      .def("generate", split_generate<nn::PipelineGenerator>, py::arg("prompt"),
           py::arg("new_tokens"), py::arg("temperature") = 1.0, py::arg("top_k") = 0,
           py::arg("seed") = 0, Release(),
           "The tokens after prompt (new_tokens 0: the prefill alone).")
      .def_property_readonly("graph_replays", &nn::PipelineGenerator::graph_replays,
                             "Graph replays over all the servers' steps so far.");
  py::class_<nn::TensorParallelGPT>(nn, "TensorParallelGPT",
                                    "A GPT's heads and MLPs split over devices (Megatron style).")
      .def(py::init([](const std::shared_ptr<nn::GPT>& model, const std::vector<Device>& devices) {
             return std::make_unique<nn::TensorParallelGPT>(*model, devices);
           }),
           py::arg("model"), py::arg("devices"), Release())
      .def("forward", &nn::TensorParallelGPT::forward, py::arg("tokens"), Release())
      .def("__call__", &nn::TensorParallelGPT::forward, py::arg("tokens"), Release())
      .def("loss", &nn::TensorParallelGPT::loss, py::arg("tokens"), py::arg("targets"), Release())
      .def("reduce_grads", &nn::TensorParallelGPT::reduce_grads, Release(),
           "After backward(): sums the replicated parameters' gradients over the devices.")
      .def("parameters", &nn::TensorParallelGPT::parameters)
      .def("generate", split_generate<nn::TensorParallelGPT>, py::arg("prompt"),
           py::arg("new_tokens"), py::arg("temperature") = 1.0, py::arg("top_k") = 0,
           py::arg("seed") = 0, Release());
  nn.def("cross_entropy", &nn::cross_entropy, py::arg("logits"), py::arg("target"), Release(),
         "Mean over the batch of -log softmax(logits)[target]: logits [N, C] float, target [N] "
         "i64.");
  nn.def("mse_loss", &nn::mse_loss, py::arg("input"), py::arg("target"), Release(),
         "Mean of (input - target)^2.");
  nn.def(
      "kaiming_uniform",
      [placement](const Shape& shape, double a, int64_t fan_in, std::optional<Device> d, DType dt) {
        return nn::init::kaiming_uniform(shape, a, fan_in, placement(d, dt));
      },
      py::arg("shape"), py::arg("a"), py::arg("fan_in"), py::arg("device") = py::none(),
      py::arg("dtype") = kF32, Release());
}

void bind_optim(py::module_& m) {
  py::module_ optim = m.def_submodule("optim", "The C++ optimizers of tensorwire/optim.h.");
  using Params = std::vector<nn::ParameterPtr>;
  py::class_<optim::Optimizer>(optim, "Optimizer")
      .def("step", &optim::Optimizer::step, Release(),
           "One update of every parameter that has a gradient.")
      .def("zero_grad", &optim::Optimizer::zero_grad, "Forgets every parameter's gradient.")
      .def_property("lr", &optim::Optimizer::lr, &optim::Optimizer::set_lr)
      .def_property_readonly("params", &optim::Optimizer::params);
  py::class_<optim::SGD, optim::Optimizer>(optim, "SGD")
      .def(py::init([](Params p, double lr, double momentum, double dampening, double wd,
                       bool nesterov) {
             return new optim::SGD(std::move(p), {lr, momentum, dampening, wd, nesterov});
           }),
           py::arg("params"), py::arg("lr") = 1e-3, py::arg("momentum") = 0.0,
           py::arg("dampening") = 0.0, py::arg("weight_decay") = 0.0, py::arg("nesterov") = false);
  py::class_<optim::Adam, optim::Optimizer>(optim, "Adam")
      .def(
          py::init([](Params p, double lr, std::pair<double, double> betas, double eps, double wd) {
            return new optim::Adam(std::move(p), {lr, betas.first, betas.second, eps, wd});
          }),
          py::arg("params"), py::arg("lr") = 1e-3,
          py::arg("betas") = std::pair<double, double>{0.9, 0.999}, py::arg("eps") = 1e-8,
          py::arg("weight_decay") = 0.0);
  py::class_<optim::AdamW, optim::Adam>(optim, "AdamW")
      .def(
          py::init([](Params p, double lr, std::pair<double, double> betas, double eps, double wd) {
            return new optim::AdamW(std::move(p), {lr, betas.first, betas.second, eps, wd});
          }),
          py::arg("params"), py::arg("lr") = 1e-3,
          py::arg("betas") = std::pair<double, double>{0.9, 0.999}, py::arg("eps") = 1e-8,
          py::arg("weight_decay") = 1e-2);
}

void bind_io_and_server(py::module_& m) {
  m.def(
      "save_safetensors",
      [](const std::string& path, const NamedTensors& tensors,
         const std::map<std::string, std::string>& metadata) {
        Device d = tensors.empty() ? Device::cpu() : tensors[0].second.device();
        wait_for_device(d,
                        [path, tensors, metadata] { save_safetensors(path, tensors, metadata); });
      },
      py::arg("path"), py::arg("tensors"),
      py::arg("metadata") = std::map<std::string, std::string>{},
      "Writes (name, tensor) pairs to a safetensors file.");
  m.def(
      "read_safetensors",
      [](const std::string& path, const Device& d) {
        Safetensors s = wait_for_device(d, [path, d] { return read_safetensors(path, d); });
        return py::make_tuple(s.tensors, s.metadata);
      },
      py::arg("path"), py::arg("device") = Device::cpu(),
      "The tensors (a dict) and metadata of a safetensors file.");

  py::class_<RemoteDeviceInfo>(m, "RemoteDeviceInfo")
      .def_readonly("index", &RemoteDeviceInfo::index)
      .def_readonly("name", &RemoteDeviceInfo::name)
      .def_readonly("backend", &RemoteDeviceInfo::backend)
      .def_readonly("memory_bytes", &RemoteDeviceInfo::memory_bytes)
      .def_readonly("model", &RemoteDeviceInfo::model)
      .def_readonly("memory_total", &RemoteDeviceInfo::memory_total)
      .def_readonly("memory_free", &RemoteDeviceInfo::memory_free)
      .def_readonly("host_memory", &RemoteDeviceInfo::host_memory)
      .def_readonly("dtypes", &RemoteDeviceInfo::dtypes)
      .def_readonly("ops", &RemoteDeviceInfo::ops);
  m.def(
      "remote_devices",
      [](const std::string& url, const std::string& credential, const std::string& tls_ca_file,
         const std::string& tls_fingerprint) {
        py::gil_scoped_release r;
        return remote_devices(url, {tls_ca_file, tls_fingerprint, credential});
      },
      py::arg("url"), py::kw_only(), py::arg("credential") = "", py::arg("tls_ca_file") = "",
      py::arg("tls_fingerprint") = "",
      "Every device the server at `url` hosts (credential and TLS pins as Device.remote).");
  py::class_<WireCounters>(m, "WireCounters")
      .def_readonly("frames_out", &WireCounters::frames_out)
      .def_readonly("bytes_out", &WireCounters::bytes_out)
      .def_readonly("frames_in", &WireCounters::frames_in)
      .def_readonly("bytes_in", &WireCounters::bytes_in)
      .def_readonly("ops", &WireCounters::ops)
      .def_readonly("round_trips", &WireCounters::round_trips)
      .def_readonly("reading_waits", &WireCounters::reading_waits)
      .def_readonly("spun_waits", &WireCounters::spun_waits);
  m.def("wire_counters", &wire_counters, py::arg("device"));

  py::class_<ServerStatsSnapshot>(m, "ServerStats")
      .def_readonly("sessions", &ServerStatsSnapshot::sessions)
      .def_readonly("sessions_opened", &ServerStatsSnapshot::sessions_opened)
      .def_readonly("bytes_held", &ServerStatsSnapshot::bytes_held)
      .def_readonly("ops_executed", &ServerStatsSnapshot::ops_executed);
  py::class_<Server, std::shared_ptr<Server>>(m, "Server",
                                              "A compute server hosted by this process (tw.serve).")
      .def_property_readonly("urls", &Server::urls)
      .def_property_readonly("url", &Server::url)
      .def_property_readonly("metrics_url", &Server::metrics_url,
                             "http://host:port of the metrics endpoint (serve(metrics=...)); "
                             "'' without one.")
      .def_property_readonly("tls_fingerprint", &Server::tls_fingerprint,
                             "The SHA-256 fingerprint of the tls:// certificate, for clients to "
                             "pin (Device.remote(url, tls_fingerprint=...)); '' without TLS.")
      .def_property_readonly("tls_self_signed", &Server::tls_self_signed)
      .def("limits_summary", &Server::limits_summary)
      .def("stats", &Server::stats)
      .def("stop", &Server::stop, Release(), "Stops the server (idempotent).")
      .def(
          "wait", [](std::shared_ptr<Server> s) { wait_in_slices([s] { s->wait(); }); },
          "Blocks until stop() has completed (interruptible with Ctrl-C).")
      .def(
          "__enter__", [](Server& s) -> Server& { return s; }, py::return_value_policy::reference)
      .def("__exit__", [](Server& s, py::args) {
        py::gil_scoped_release r;
        s.stop();
      });
}

// tw.dist (tensorwire/dist.h): each call returns the list of results (the C++ calls replace the
// list's tensors in place; a Python list the caller passed stays as it was).
void bind_dist(py::module_& m) {
  py::module_ d =
      m.def_submodule("dist", "Collectives over tensors on several devices (tensorwire/dist.h).");
  py::enum_<dist::ReduceOp>(d, "ReduceOp")
      .value("SUM", dist::ReduceOp::kSum)
      .value("MEAN", dist::ReduceOp::kMean)
      .value("MAX", dist::ReduceOp::kMax);
  py::class_<dist::Group>(d, "Group",
                          "A fixed list of devices that run collectives together; across servers "
                          "its first collective connects them, later ones reuse the connections.")
      .def(py::init([](std::vector<Device> devices, double timeout_s) {
             return dist::Group(std::move(devices),
                                std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1e3)));
           }),
           py::arg("devices"), py::arg("timeout") = 30.0, Release())
      .def_property_readonly("devices", &dist::Group::devices)
      .def("__len__", &dist::Group::size);
  using Ts = std::vector<Tensor>;
  using G = std::optional<dist::Group>;
  auto with_group = [](Ts ts, const G& g, auto&& run) {
    if (g) {
      run(ts, *g);
    } else {
      std::vector<Device> devices;
      for (const Tensor& t : ts) devices.push_back(t.device());
      run(ts, dist::Group(std::move(devices)));
    }
    return ts;
  };
  d.def(
      "all_reduce",
      [with_group](Ts ts, dist::ReduceOp op, const G& g) {
        return with_group(std::move(ts), g,
                          [op](Ts& t, const dist::Group& gr) { dist::all_reduce(t, op, gr); });
      },
      py::arg("tensors"), py::arg("op") = dist::ReduceOp::kSum, py::arg("group") = py::none(),
      Release(),
      "The elementwise reduction (SUM, MEAN, MAX) of all the tensors, one result on each tensor's "
      "device; every result holds the same bytes.");
  d.def(
      "broadcast",
      [with_group](Ts ts, size_t root, const G& g) {
        return with_group(std::move(ts), g,
                          [root](Ts& t, const dist::Group& gr) { dist::broadcast(t, root, gr); });
      },
      py::arg("tensors"), py::arg("root") = 0, py::arg("group") = py::none(), Release(),
      "A copy of tensors[root] on each tensor's device.");
  d.def(
      "all_gather",
      [with_group](Ts ts, const G& g) {
        return with_group(std::move(ts), g,
                          [](Ts& t, const dist::Group& gr) { dist::all_gather(t, gr); });
      },
      py::arg("tensors"), py::arg("group") = py::none(), Release(),
      "The tensors concatenated along dimension 0, in list order, on each tensor's device.");
  d.def(
      "reduce_scatter",
      [with_group](Ts ts, dist::ReduceOp op, const G& g) {
        return with_group(std::move(ts), g,
                          [op](Ts& t, const dist::Group& gr) { dist::reduce_scatter(t, op, gr); });
      },
      py::arg("tensors"), py::arg("op") = dist::ReduceOp::kSum, py::arg("group") = py::none(),
      Release(),
      "The reduction split along dimension 0 into len(tensors) equal parts: result i is part i, "
      "on tensor i's device.");
}

// tw.graph (tensorwire/graph.h): capture, traces, replay and step caching.
void bind_graph(py::module_& m) {
  py::module_ g =
      m.def_submodule("graph", "Op traces: capture, save, load, replay (tensorwire/graph.h).");
  py::class_<graph::TensorSpec>(g, "TensorSpec", "The dtype and shape of a trace input or output.")
      .def_property_readonly("shape",
                             [](const graph::TensorSpec& s) { return shape_tuple(s.shape); })
      .def_readonly("dtype", &graph::TensorSpec::dtype)
      .def("__str__", &graph::TensorSpec::str)
      .def("__repr__", &graph::TensorSpec::str);
  py::class_<graph::Trace>(g, "Trace",
                           "A recorded op trace: save it, load it, replay it on any device.")
      .def(py::init<>(), "A trace of no ops.")
      .def("save", &graph::Trace::save, py::arg("path"), Release(),
           "Writes the trace to `path` (the format of docs/trace.md).")
      .def_static(
          "load", &graph::Trace::load, py::arg("path"), Release(),
          "Reads a trace file; raises tw.Error naming the problem for a missing, truncated, "
          "corrupt or invalid file.")
      .def("to_bytes",
           [](const graph::Trace& t) {
             const std::vector<uint8_t> b = t.to_bytes();
             return py::bytes(reinterpret_cast<const char*>(b.data()), b.size());
           })
      .def_static(
          "from_bytes",
          [](const py::bytes& b) {
            const std::string_view v = b;
            return graph::Trace::from_bytes(
                std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()), v.size()));
          },
          py::arg("data"))
      .def_property_readonly("inputs", &graph::Trace::inputs)
      .def_property_readonly("outputs", &graph::Trace::outputs)
      .def("num_ops", &graph::Trace::num_ops)
      .def("__str__", &graph::Trace::str)
      .def(
          "replay",
          [](const graph::Trace& t, const Device& d, std::vector<Tensor> inputs) {
            return wait_for_device(d, [t, d, inputs] { return t.replay(d, inputs); });
          },
          py::arg("device"), py::arg("inputs"),
          "Runs the trace on `device` with `inputs` (tensors there, matching .inputs) and returns "
          "the outputs. The first replay on a device registers the trace as a graph there when "
          "the device can host one (cpu, torch, a remote server), later ones run it by id; the "
          "values equal running the same ops eagerly there, bit for bit.")
      .def("runs_as_graph", &graph::Trace::runs_as_graph, py::arg("device"),
           "Whether replays on `device` run as a registered graph.");
  py::class_<graph::Capture>(
      g, "Capture",
      "Records the ops issued to its capture device (Device.capture(inner)). "
      "While recording, reading values raises tw.Error.")
      .def(py::init<const Device&>(), py::arg("inner"))
      .def_property_readonly("device", &graph::Capture::device)
      .def("input", &graph::Capture::input, py::arg("tensor"),
           "A tensor of the capture device standing for `tensor` (of the inner device): the "
           "trace's next input.")
      .def(
          "finish",
          [](graph::Capture& c, std::optional<std::vector<Tensor>> outputs) {
            return outputs ? c.finish(*outputs) : c.finish();
          },
          py::arg("outputs") = py::none(),
          "Ends the recording. The trace's outputs are `outputs` (in order), or by default the "
          "recorded tensors still held, in the order they were made.")
      .def("release", &graph::Capture::release, py::arg("captured"),
           "After finish(): the inner device's tensor for a capture tensor (no copy).");
  py::class_<graph::Slot>(g, "Slot",
                          "A tensor a Step reads and rebinds (a parameter, an "
                          "optimizer's state tensor).")
      .def(
          py::init([](nn::ParameterPtr p) {
            return graph::Slot{[p] { return p->value(); }, [p](Tensor t) { p->set(std::move(t)); }};
          }),
          py::arg("parameter"));
  g.def(
      "state_slots",
      [](py::object optimizer) {
        py::list out;
        for (graph::Slot& s : graph::state_slots(optimizer.cast<optim::Optimizer&>())) {
          py::object slot = py::cast(std::move(s));
          // A slot points into the optimizer's state: the optimizer lives as long as its slots.
          py::detail::keep_alive_impl(slot, optimizer);
          out.append(slot);
        }
        return out;
      },
      py::arg("optimizer"), "The optimizer's parameters, then its state tensors, as Slots.");
  py::class_<graph::Step>(g, "Step",
                          "Automatic step caching: the first call with a set of argument and state "
                          "shapes runs fn eagerly, the second records it, later ones replay the "
                          "trace (one registered graph on the device). Results equal calling fn "
                          "eagerly, bit for bit.")
      .def(py::init([](py::function fn, std::vector<graph::Slot> state) {
             // Shared, so that copies of the std::function never touch Python's refcounts; the
             // last reference goes with the Step, which Python frees holding the GIL.
             auto py_fn = std::make_shared<py::function>(std::move(fn));
             graph::Step::Fn f = [py_fn](const std::vector<Tensor>& args) {
               py::gil_scoped_acquire gil;
               py::object r = (*py_fn)(args);
               if (py::isinstance<Tensor>(r)) return std::vector<Tensor>{r.cast<Tensor>()};
               return r.cast<std::vector<Tensor>>();
             };
             return std::make_unique<graph::Step>(std::move(f), std::move(state));
           }),
           py::arg("fn"), py::arg("state") = std::vector<graph::Slot>{})
      .def(
          "__call__",
          [](graph::Step& s, std::vector<Tensor> args) {
            py::gil_scoped_release r;
            return s(args);
          },
          py::arg("args"))
      .def_property_readonly("eager_calls", &graph::Step::eager_calls)
      .def_property_readonly("recordings", &graph::Step::recordings)
      .def_property_readonly("replays", &graph::Step::replays);
}

}  // namespace

void bind_onnx(py::module_& m);            // onnx.cc
void bind_checkpoint(py::module_& m);      // checkpoint.cc
void bind_server_options(py::module_& m);  // server.cc
}  // namespace tw::python

PYBIND11_MODULE(_tensorwire, m) {
  using namespace tw::python;
  m.doc() = "tensorwire's C++ API; import tensorwire (the package) rather than this module.";
  py::register_exception<tw::Error>(m, "Error", PyExc_RuntimeError);
  bind_device(m);
  bind_tensor(m);
  bind_functions(m);
  bind_nn(m);
  bind_optim(m);
  bind_io_and_server(m);
  bind_dist(m);
  bind_graph(m);
  bind_onnx(m);
  bind_checkpoint(m);
  bind_server_options(m);
  m.attr("__version__") = TW_VERSION;
}
