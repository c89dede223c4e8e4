// The ONNX importer's internals: the graph under construction (Builder: emits IR ops, infers
// their metas with ir::infer, knows host values of constants) and the per-node context the op
// mappings (ops_*.cc) read their inputs and attributes from. Errors are thrown as tw::Error
// (this layer sits beside the API, whose convention that is) and name the node.
#pragma once
#include <onnx/onnx_pb.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/graph.h"
#include "ir/ops.h"
#include "tensorwire/error.h"

namespace tw::onnx_import {

using ir::TensorId;

// A tensor's value known on the host at load time (an initializer, a Constant, a Shape result, a
// frozen input): little-endian row-major bytes.
struct HostTensor {
  TensorMeta meta;
  std::vector<uint8_t> bytes;
  int64_t numel() const { return tw::numel(meta.shape); }
  std::vector<int64_t> ints() const;    // any numeric dtype, converted (floats truncated)
  std::vector<double> doubles() const;  // any numeric dtype
  static HostTensor of_ints(const std::vector<int64_t>& v, Shape shape, DType dtype = kI64);
};

// ONNX TensorProto.DataType -> DType; nullopt for types tensorwire has no dtype for.
std::optional<DType> dtype_of(int32_t onnx_type);
const char* onnx_type_name(int32_t onnx_type);
// Throws a tw::Error (prefixed by `what`) for a type without a DType or a malformed tensor.
HostTensor host_tensor(const ::onnx::TensorProto& t, const std::string& what);

// The graph being built. Ids are graph-local, from 1.
class Builder {
 public:
  // A value: a tensor of the graph (id) and/or a host value (constant). A constant gets an id
  // (a FromHost op) the first time an op reads it as a tensor.
  struct Value {
    TensorId id = 0;
    TensorMeta meta;
    std::optional<HostTensor> constant;
    bool frozen_input = false;  // a graph input given by value (LoadOptions::input_values)
    bool used_as_tensor = false;
    bool constant_used = false;
  };

  // Prefix of every error ("node 'conv1' (Conv): "), set per node.
  std::string context;
  [[noreturn]] void fail(const std::string& msg) const { throw Error(context + msg); }

  TensorId new_id() { return next_id_++; }
  TensorId add_input(const TensorMeta& meta);
  // Runs inference for `op` (whose Out ids are already set) and appends it.
  void append(ir::Op op);
  const TensorMeta& meta(TensorId id) const { return metas_.at(id); }
  TensorId constant_id(const HostTensor& h);  // a FromHost op
  ir::Graph& graph() { return graph_; }

  // ---- emitters: each appends one op and returns its output ----
  TensorId unary(ir::UnaryKind k, TensorId x);
  TensorId binary(ir::BinaryKind k, TensorId a, TensorId b);
  TensorId scalar(ir::BinaryKind k, TensorId a, ir::Scalar s, bool reverse = false);
  TensorId cast(TensorId x, DType d);  // no op when x already has dtype d
  TensorId reduce(ir::ReduceKind k, TensorId x, std::vector<int64_t> dims, bool keepdim);
  TensorId reshape(TensorId x, Shape shape);
  TensorId permute(TensorId x, std::vector<int64_t> dims);
  TensorId expand(TensorId x, Shape shape);
  TensorId slice(TensorId x, std::vector<int64_t> starts, std::vector<int64_t> ends,
                 std::vector<int64_t> steps);
  // x[begin:end] along one dim (clamped), step 1.
  TensorId narrow(TensorId x, int64_t dim, int64_t begin, int64_t end);
  TensorId cat(std::vector<TensorId> xs, int64_t dim);
  TensorId flip(TensorId x, std::vector<int64_t> dims);
  TensorId where(TensorId c, TensorId a, TensorId b);
  TensorId full(Shape shape, DType d, ir::Scalar v);
  TensorId arange(int64_t n);  // i64 0..n-1
  TensorId matmul(TensorId a, TensorId b);
  TensorId softmax(TensorId x, int64_t dim, bool log);
  TensorId index_select(TensorId x, int64_t dim, TensorId index);
  TensorId gather(TensorId x, int64_t dim, TensorId index);
  TensorId clamp(TensorId x, std::optional<ir::Scalar> lo, std::optional<ir::Scalar> hi);
  // A fresh tensor equal to x (an identity reshape): for graph outputs that alias another value.
  TensorId copy(TensorId x) { return reshape(x, meta(x).shape); }
  // Pads each dim d by before[d] / after[d] (>= 0) elements of `value`.
  TensorId pad_constant(TensorId x, const std::vector<int64_t>& before,
                        const std::vector<int64_t>& after, ir::Scalar value);

 private:
  ir::Graph graph_;
  std::unordered_map<TensorId, TensorMeta> metas_;
  TensorId next_id_ = 1;
};

// What an op mapping sees of one node.
class Node {
 public:
  Node(Builder& b, const ::onnx::NodeProto& n, int64_t opset,
       std::unordered_map<std::string, Builder::Value>& values)
      : b(b), proto(n), opset(opset), values_(values) {}

  Builder& b;
  const ::onnx::NodeProto& proto;
  const int64_t opset;

  [[noreturn]] void fail(const std::string& msg) const { b.fail(msg); }

  // Inputs: absent optional inputs are "" in ONNX.
  size_t num_inputs() const { return static_cast<size_t>(proto.input_size()); }
  bool has_input(size_t i) const { return i < num_inputs() && !proto.input(i).empty(); }
  TensorId input(size_t i);  // as a tensor; fails when absent
  // Input i of a binary op whose other operand is input `ref`: before opset 7 with attribute
  // broadcast=1, reshaped so that numpy broadcasting gives the legacy (axis-aligned) one.
  TensorId input_broadcast(size_t i, size_t ref);
  const TensorMeta& input_meta(size_t i);                  // without making it a tensor
  const HostTensor& constant(size_t i, const char* what);  // fails unless known at load
  bool has_constant(size_t i);
  std::vector<int64_t> ints_input(size_t i, const char* what) { return constant(i, what).ints(); }

  size_t num_outputs() const { return static_cast<size_t>(proto.output_size()); }
  bool wants_output(size_t i) const { return i < num_outputs() && !proto.output(i).empty(); }
  void set_output(size_t i, TensorId id);
  void set_constant_output(size_t i, HostTensor h);
  // Output `out` is input `in` itself (Identity, Dropout in inference).
  void forward(size_t out, size_t in);

  // Attributes.
  const ::onnx::AttributeProto* attr(const std::string& name) const;
  bool has_attr(const std::string& name) const { return attr(name) != nullptr; }
  int64_t attr_int(const std::string& name, int64_t dflt) const;
  double attr_float(const std::string& name, double dflt) const;
  std::string attr_string(const std::string& name, const std::string& dflt) const;
  std::vector<int64_t> attr_ints(const std::string& name) const;  // empty when absent
  std::vector<float> attr_floats(const std::string& name) const;
  // Fails naming the attribute unless it is absent or has the value `ok`.
  void require_attr_int(const std::string& name, int64_t ok) const;
  // Fails for every attribute not in `known` (an attribute it would silently ignore).
  void check_attrs(std::initializer_list<const char*> known) const;

  // Every value by name (If imports its branch's nodes into it).
  std::unordered_map<std::string, Builder::Value>& values() { return values_; }

  int64_t rank(size_t i) { return static_cast<int64_t>(input_meta(i).shape.size()); }
  // Normalises an axis (negative counts from the end) for a tensor of `rank`; fails if out of
  // range.
  int64_t axis(int64_t a, int64_t rank, const char* what = "axis") const;

 private:
  Builder::Value& value(size_t i);
  bool legacy_broadcast_ = false;
  std::unordered_map<std::string, Builder::Value>& values_;
};

// float16 and bfloat16 are storage-only (docs/ops.md): ops compute them in f32.
inline bool storage_only(DType d) { return d == kF16 || d == kBF16; }
// Input i as a tensor, cast to f32 when its dtype is storage-only.
inline TensorId computable(Node& n, size_t i) {
  const TensorId x = n.input(i);
  return storage_only(n.b.meta(x).dtype) ? n.b.cast(x, kF32) : x;
}

using OpFn = std::function<void(Node&)>;
// Registry of op mappings (ops_*.cc add theirs through register_ops_*).
std::map<std::string, OpFn>& op_table();
void register_elementwise_ops();
void register_shape_ops();
void register_reduce_ops();
void register_nn_ops();
void register_resize_ops();
void register_rnn_ops();
void register_linalg_ops();

}  // namespace tw::onnx_import
