// tw::onnx::load (tensorwire/onnx.h): parses a ModelProto with ONNX's generated classes and walks
// its graph in order, handing each node to its mapping in op_table(); then encodes the built
// ir::Graph as a trace.
#include <fstream>
#include <iterator>
#include <mutex>
#include <set>
#include <sstream>

#include "ir/trace.h"
#include "onnx/importer.h"
#include "tensorwire/onnx.h"

namespace tw::onnx {

namespace {

using ir::TensorId;
using onnx_import::Builder;
using onnx_import::HostTensor;

// ONNX 1.12 defines opsets up to 17; a newer opset may change an op's meaning, so it is refused
// rather than guessed. Older opsets (exporters used 6 and below until 2017) are read with their
// attribute forms (legacy broadcasting, Cast's named type, Pad's paddings, ...).
constexpr int64_t kMinOpset = 1, kMaxOpset = 17;

void if_op(onnx_import::Node& n);

void register_all() {
  static std::once_flag once;
  std::call_once(once, [] {
    onnx_import::register_elementwise_ops();
    onnx_import::register_shape_ops();
    onnx_import::register_reduce_ops();
    onnx_import::register_nn_ops();
    onnx_import::register_resize_ops();
    onnx_import::register_rnn_ops();
    onnx_import::register_linalg_ops();
    onnx_import::op_table()["If"] = if_op;
  });
}

// Nodes whose inputs are all constants (initializers, Constant nodes, Shape results, earlier
// folds; not inputs given by value) run at load, on cpu, with the IR ops their mapping emits:
// exporters compute shapes this way (Shape -> Gather -> Concat -> Reshape), and a later node may
// need the result as a constant. Only small ones: a large result would sit in the trace as bytes.
constexpr int64_t kFoldLimit = int64_t{1} << 16;  // elements in, and out

HostTensor host_of(const Tensor& t);

// Runs node `n` at load; false (nothing changed) when its outputs are too large to keep.
bool fold(const ::onnx::NodeProto& n, int64_t opset, const onnx_import::OpFn& fn,
          const std::string& context, std::unordered_map<std::string, Builder::Value>& values) {
  Builder fb;
  fb.context = context;
  std::unordered_map<std::string, Builder::Value> fv;
  for (const std::string& in : n.input()) {
    if (in.empty()) continue;
    Builder::Value v;
    v.meta = values.at(in).meta;
    v.constant = values.at(in).constant;
    fv[in] = std::move(v);
  }
  onnx_import::Node node(fb, n, opset, fv);
  fn(node);
  std::vector<std::pair<std::string, TensorId>> tensors;
  std::vector<std::pair<std::string, Builder::Value>> done;
  for (const std::string& out : n.output()) {
    if (out.empty()) continue;
    auto it = fv.find(out);
    if (it == fv.end()) return false;  // the caller reports the missing output
    if (numel(it->second.meta.shape) > kFoldLimit) return false;
    if (it->second.constant) {
      Builder::Value v;
      v.meta = it->second.meta;
      v.constant = it->second.constant;
      done.emplace_back(out, std::move(v));
    } else {
      tensors.emplace_back(out, it->second.id);
    }
  }
  if (!tensors.empty()) {
    std::set<TensorId> seen;
    for (auto& [name, id] : tensors) {
      const TensorId out = seen.count(id) ? fb.copy(id) : id;
      seen.insert(out);
      fb.graph().output_ids.push_back(out);
    }
    const graph::Trace t = graph::Trace::from_bytes(ir::encode_trace_file(fb.graph()));
    const std::vector<Tensor> outs = t.replay(Device::cpu(), {});
    for (size_t i = 0; i < tensors.size(); ++i) {
      Builder::Value v;
      v.constant = host_of(outs[i]);
      v.meta = v.constant->meta;
      done.emplace_back(tensors[i].first, std::move(v));
    }
  }
  for (auto& [name, v] : done) values[name] = std::move(v);
  return true;
}

bool foldable(const ::onnx::NodeProto& n,
              const std::unordered_map<std::string, Builder::Value>& values) {
  if (n.op_type() == "If") return false;  // its branches read values beyond its inputs
  int64_t total = 0, count = 0;
  for (const std::string& in : n.input()) {
    if (in.empty()) continue;
    auto it = values.find(in);
    if (it == values.end() || !it->second.constant || it->second.frozen_input) return false;
    total += numel(it->second.meta.shape);
    ++count;
  }
  return count > 0 && total <= kFoldLimit;
}

// Imports the nodes of `g` in order into `values` (the main graph, or an If's branch, whose
// nodes also read the values around it); errors are prefixed by `prefix` and the node.
void import_nodes(Builder& b, const ::onnx::GraphProto& g, int64_t opset,
                  std::unordered_map<std::string, Builder::Value>& values,
                  const std::string& prefix) {
  const auto& table = onnx_import::op_table();
  for (int i = 0; i < g.node_size(); ++i) {
    const ::onnx::NodeProto& n = g.node(i);
    const std::string label = n.name().empty() ? "#" + std::to_string(i) : "'" + n.name() + "'";
    b.context = prefix + "node " + label + " (" + n.op_type() + "): ";
    if (!n.domain().empty() && n.domain() != "ai.onnx") {
      b.fail("domain '" + n.domain() + "' is not supported");
    }
    auto it = table.find(n.op_type());
    if (it == table.end()) b.fail("op type " + n.op_type() + " is not supported");
    if (foldable(n, values) && fold(n, opset, it->second, b.context, values)) continue;
    onnx_import::Node node(b, n, opset, values);
    it->second(node);
    for (int k = 0; k < n.output_size(); ++k) {
      if (!n.output(k).empty() && !values.count(n.output(k))) {
        b.fail("output " + std::to_string(k) + " ('" + n.output(k) + "') is not supported");
      }
    }
  }
}

// If with its condition known at load (a constant, or an input given by value): the chosen
// branch's initializers and nodes are imported in place and its outputs become the node's.
void if_op(onnx_import::Node& n) {
  n.check_attrs({"then_branch", "else_branch"});
  const HostTensor& c = n.constant(0, "cond");
  if (c.numel() != 1) n.fail("input cond must hold one element, not " + std::to_string(c.numel()));
  const bool then = c.doubles()[0] != 0;
  const char* name = then ? "then_branch" : "else_branch";
  const ::onnx::AttributeProto* a = n.attr(name);
  if (a == nullptr || !a->has_g()) n.fail(std::string("attribute ") + name + " is missing");
  const ::onnx::GraphProto& g = a->g();
  if (g.output_size() != static_cast<int>(n.num_outputs()))
    n.fail(std::string(name) + " has " + std::to_string(g.output_size()) + " outputs, the node " +
           std::to_string(n.num_outputs()));
  auto& values = n.values();
  const std::string outer = n.b.context;
  for (const auto& init : g.initializer()) {
    Builder::Value v;
    v.constant =
        onnx_import::host_tensor(init, outer + name + " initializer '" + init.name() + "'");
    v.meta = v.constant->meta;
    values[init.name()] = std::move(v);
  }
  import_nodes(n.b, g, n.opset, values, outer + name + ": ");
  n.b.context = outer;
  for (int k = 0; k < g.output_size(); ++k) {
    auto it = values.find(g.output(k).name());
    if (it == values.end())
      n.fail(std::string(name) + " output '" + g.output(k).name() + "' is never computed");
    if (n.wants_output(static_cast<size_t>(k))) {
      const Builder::Value v = it->second;
      values[n.proto.output(k)] = v;
    }
  }
}

HostTensor host_of(const Tensor& t) {
  HostTensor h;
  h.meta = {t.shape(), t.dtype()};
  h.bytes = t.to(Device::cpu()).to_bytes();
  return h;
}

TensorMeta input_meta(const ::onnx::ValueInfoProto& vi, const LoadOptions& options) {
  const std::string what = "input '" + vi.name() + "'";
  if (!vi.type().has_tensor_type()) throw Error(what + ": only tensor inputs are supported");
  const auto& tt = vi.type().tensor_type();
  std::optional<DType> d = onnx_import::dtype_of(tt.elem_type());
  if (!d) {
    throw Error(what + ": element type " + onnx_import::onnx_type_name(tt.elem_type()) +
                " has no tensorwire dtype");
  }
  TensorMeta m{{}, *d};
  auto given = options.input_shapes.find(vi.name());
  if (given != options.input_shapes.end()) {
    m.shape = given->second;
    return m;
  }
  if (!tt.has_shape()) throw Error(what + " has no shape; give one in LoadOptions::input_shapes");
  for (const auto& dim : tt.shape().dim()) {
    if (!dim.has_dim_value()) {
      throw Error(what + " has a symbolic dim '" + dim.dim_param() +
                  "'; give its shape in LoadOptions::input_shapes (--shape " + vi.name() +
                  "=d0,d1,...)");
    }
    m.shape.push_back(dim.dim_value());
  }
  return m;
}

}  // namespace

Model load_bytes(const std::string& bytes, const LoadOptions& options, const std::string& what) {
  register_all();
  ::onnx::ModelProto proto;
  if (!proto.ParseFromString(bytes)) throw Error(what + ": not a valid ONNX ModelProto");
  Model model;
  model.producer = proto.producer_name() +
                   (proto.producer_version().empty() ? "" : " " + proto.producer_version());
  for (const auto& o : proto.opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx") model.opset = o.version();
  }
  if (model.opset < kMinOpset || model.opset > kMaxOpset) {
    throw Error(what + ": opset " + std::to_string(model.opset) + " is not supported (" +
                std::to_string(kMinOpset) + " to " + std::to_string(kMaxOpset) + ")");
  }
  const ::onnx::GraphProto& g = proto.graph();
  Builder b;
  b.context = what + ": ";
  std::unordered_map<std::string, Builder::Value> values;
  std::vector<std::pair<std::string, TensorId>> inputs;  // graph inputs, in order

  try {
    for (const auto& init : g.initializer()) {
      Builder::Value v;
      v.constant = onnx_import::host_tensor(init, "initializer '" + init.name() + "'");
      v.meta = v.constant->meta;
      values[init.name()] = std::move(v);
      model.initializer_names.push_back(init.name());
    }
    if (g.sparse_initializer_size() > 0) throw Error("sparse initializers are not supported");
    for (const auto& vi : g.input()) {
      if (values.count(vi.name())) continue;  // an initializer listed as an input (IR < 4)
      Builder::Value v;
      v.meta = input_meta(vi, options);
      auto given = options.input_values.find(vi.name());
      if (given != options.input_values.end()) {
        v.constant = host_of(given->second);
        if (v.constant->meta != v.meta) {
          throw Error("input '" + vi.name() + "' is " + meta_str(v.meta) +
                      " but its given value is " + meta_str(v.constant->meta));
        }
        v.frozen_input = true;
      }
      values[vi.name()] = std::move(v);
      inputs.emplace_back(vi.name(), 0);
    }
  } catch (const Error& e) {
    throw Error(what + ": " + e.what());
  }
  // Every input gets its id now, in order; one given by value whose value only ever served as a
  // constant is dropped from the trace's inputs at the end.
  for (auto& [name, id] : inputs) {
    Builder::Value& v = values[name];
    v.id = b.add_input(v.meta);
    id = v.id;
  }

  import_nodes(b, g, model.opset, values, what + ": ");
  b.context = what + ": ";
  model.num_nodes = static_cast<size_t>(g.node_size());

  std::vector<TensorId> dropped;
  for (auto& [name, id] : inputs) {
    const Builder::Value& v = values[name];
    if (v.frozen_input && v.constant_used && !v.used_as_tensor) {
      dropped.push_back(id);
    } else {
      model.input_names.push_back(name);
    }
  }
  for (TensorId id : dropped) {
    ir::Graph& gr = b.graph();
    for (size_t k = 0; k < gr.input_ids.size(); ++k) {
      if (gr.input_ids[k] == id) {
        gr.input_ids.erase(gr.input_ids.begin() + static_cast<std::ptrdiff_t>(k));
        gr.inputs.erase(gr.inputs.begin() + static_cast<std::ptrdiff_t>(k));
        break;
      }
    }
  }

  std::set<TensorId> taken;
  for (const auto& vi : g.output()) {
    auto it = values.find(vi.name());
    if (it == values.end()) b.fail("graph output '" + vi.name() + "' is never computed");
    Builder::Value& v = it->second;
    if (v.id == 0) v.id = b.constant_id(*v.constant);
    TensorId id = v.id;
    // An output must be an op's and distinct: an input, an initializer or a repeated value
    // gets a copy.
    bool is_input = false;
    for (TensorId in : b.graph().input_ids) is_input = is_input || in == id;
    if (is_input || taken.count(id)) id = b.copy(id);
    taken.insert(id);
    b.graph().output_ids.push_back(id);
    model.output_names.push_back(vi.name());
  }
  try {
    const std::vector<uint8_t> file = ir::encode_trace_file(b.graph());
    model.trace = graph::Trace::from_bytes(file);
  } catch (const Error& e) {
    throw Error(what + ": " + e.what());
  }
  return model;
}

Model load(const std::string& path, const LoadOptions& options) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("onnx: cannot open " + path);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return load_bytes(bytes, options, path);
}

Tensor read_tensor(const std::string& path, const Device& device, std::string* name) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("onnx: cannot open " + path);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  ::onnx::TensorProto t;
  if (!t.ParseFromString(bytes)) throw Error(path + ": not a valid ONNX TensorProto");
  HostTensor h = onnx_import::host_tensor(t, path);
  if (name) *name = t.name();
  return from_bytes(h.bytes, h.meta.shape, h.meta.dtype, device);
}

std::vector<std::pair<std::string, graph::TensorSpec>> input_specs(
    const std::string& path, const std::map<std::string, Shape>& input_shapes) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("onnx: cannot open " + path);
  ::onnx::ModelProto proto;
  if (!proto.ParseFromIstream(&f)) throw Error(path + ": not a valid ONNX ModelProto");
  std::set<std::string> inits;
  for (const auto& init : proto.graph().initializer()) inits.insert(init.name());
  std::vector<std::pair<std::string, graph::TensorSpec>> out;
  for (const auto& vi : proto.graph().input()) {
    if (inits.count(vi.name())) continue;
    const std::string what = path + ": input '" + vi.name() + "'";
    if (!vi.type().has_tensor_type()) throw Error(what + ": only tensor inputs are supported");
    const auto& tt = vi.type().tensor_type();
    const std::optional<DType> d = onnx_import::dtype_of(tt.elem_type());
    if (!d) {
      throw Error(what + ": element type " + onnx_import::onnx_type_name(tt.elem_type()) +
                  " has no tensorwire dtype");
    }
    graph::TensorSpec spec{{}, *d};
    auto given = input_shapes.find(vi.name());
    if (given != input_shapes.end()) {
      spec.shape = given->second;
    } else {
      for (const auto& dim : tt.shape().dim()) {
        spec.shape.push_back(dim.has_dim_value() ? dim.dim_value() : -1);
      }
    }
    out.emplace_back(vi.name(), spec);
  }
  return out;
}

std::vector<std::string> supported_ops() {
  register_all();
  std::vector<std::string> out;
  for (const auto& [name, fn] : onnx_import::op_table()) out.push_back(name);
  return out;
}

std::vector<Tensor> Model::run(const Device& device, const std::vector<Tensor>& inputs) const {
  return trace.replay(device, inputs);
}

std::string Model::str() const {
  std::ostringstream os;
  os << "onnx model: opset " << opset << ", producer '" << producer << "', " << num_nodes
     << " nodes, " << initializer_names.size() << " initializers -> " << trace.num_ops()
     << " ops\n";
  for (size_t i = 0; i < input_names.size(); ++i)
    os << "input " << i << " '" << input_names[i] << "': " << trace.inputs()[i].str() << "\n";
  for (size_t i = 0; i < output_names.size(); ++i)
    os << "output " << i << " '" << output_names[i] << "': " << trace.outputs()[i].str() << "\n";
  os << trace.str();
  return os.str();
}

}  // namespace tw::onnx
