// detail::emit (api/emit.h): how a Tensor API call becomes an op on a device.
#include "api/emit.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "api/autograd.h"
#include "ir/infer.h"

namespace tw::detail {
namespace {

struct AssignOutputs {
  Sink* sink;
  std::vector<ir::TensorId>* ids;
  void operator()(const char*, ir::Out& o) const {
    o.id = sink->new_id();
    ids->push_back(o.id);
  }
  template <class T>
  void operator()(const char*, T&) const {}
};

}  // namespace

namespace {

// Checks the inputs share `sink`, gives the op's outputs fresh ids (into `outs`), infers their
// metas (throwing inference's message) and submits the op; returns the metas' first entry for
// the caller's tensors (all of them in `metas` when it is given).
TensorMeta submit(const std::shared_ptr<Sink>& sink, ir::Op& op,
                  std::span<const Tensor* const> inputs, std::vector<ir::TensorId>& outs,
                  std::optional<ir::Op>& recorded, std::vector<TensorMeta>* metas_out) {
  for (const Tensor* t : inputs) {
    if (!t->defined()) continue;
    if (t->impl()->sink != sink) {
      throw Error(ir::op_name(op) + ": tensors are on different devices (" + sink->str() + " and " +
                  t->impl()->sink->str() + "); move one with .to(device)");
    }
  }
  auto lookup = [&](ir::TensorId id) -> Result<TensorMeta> {
    for (const Tensor* t : inputs)
      if (t->defined() && t->impl()->id == id) return t->impl()->meta;
    return not_found("tensor %" + std::to_string(id) + " is not an input of this op");
  };
  std::visit(
      [&](auto& o) {
        if constexpr (!std::is_same_v<std::decay_t<decltype(o)>, std::monostate>)
          o.fields(AssignOutputs{sink.get(), &outs});
      },
      op);
  auto inferred = ir::infer(op, lookup);
  if (!inferred.ok()) throw Error(inferred.status().message());
  TensorMeta first = inferred->at(0);
  if (metas_out) *metas_out = *inferred;
  // Autograd keeps the op (attributes included) for its backward rule; the sink takes the op.
  if (autograd::needs_record(inputs)) recorded = op;
  Status st = sink->submit_inferred(std::move(op), std::move(inferred).value());
  if (!st.ok()) throw Error(st.message());
  return first;
}

Tensor tensor_of(const std::shared_ptr<Sink>& sink, ir::TensorId id, TensorMeta meta) {
  auto impl = std::make_shared<TensorImpl>();
  impl->meta = std::move(meta);
  impl->sink = sink;
  impl->id = id;
  return Tensor(std::move(impl));
}

}  // namespace

Tensor emit(const std::shared_ptr<Sink>& sink, ir::Op op, std::span<const Tensor* const> inputs) {
  std::vector<ir::TensorId> outs;
  std::optional<ir::Op> recorded;
  TensorMeta meta = submit(sink, op, inputs, outs, recorded, nullptr);
  Tensor out = tensor_of(sink, outs.at(0), std::move(meta));
  if (recorded) autograd::record(*recorded, inputs, out);
  return out;
}

std::vector<Tensor> emit_all(const std::shared_ptr<Sink>& sink, ir::Op op,
                             std::initializer_list<const Tensor*> inputs) {
  const std::span<const Tensor* const> in(inputs.begin(), inputs.size());
  if (autograd::needs_record(in)) {
    throw Error(ir::op_name(op) + ": not differentiable; call it under tw::NoGradGuard");
  }
  std::vector<ir::TensorId> outs;
  std::optional<ir::Op> recorded;
  std::vector<TensorMeta> metas;
  (void)submit(sink, op, in, outs, recorded, &metas);
  std::vector<Tensor> result;
  for (size_t i = 0; i < outs.size(); ++i) result.push_back(tensor_of(sink, outs[i], metas[i]));
  return result;
}

Tensor emit(const std::shared_ptr<Sink>& sink, ir::Op op,
            std::initializer_list<const Tensor*> inputs) {
  return emit(sink, std::move(op), std::span<const Tensor* const>(inputs.begin(), inputs.size()));
}

}  // namespace tw::detail
