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

Tensor emit(const std::shared_ptr<Sink>& sink, ir::Op op, std::span<const Tensor* const> inputs) {
  std::vector<std::pair<ir::TensorId, const TensorMeta*>> metas;
  for (const Tensor* t : inputs) {
    if (!t->defined()) continue;
    if (t->impl()->sink != sink) {
      throw Error(ir::op_name(op) + ": tensors are on different devices (" + sink->str() + " and " +
                  t->impl()->sink->str() + "); move one with .to(device)");
    }
    metas.emplace_back(t->impl()->id, &t->impl()->meta);
  }
  auto lookup = [&](ir::TensorId id) -> Result<TensorMeta> {
    for (auto& [i, m] : metas)
      if (i == id) return *m;
    return not_found("tensor %" + std::to_string(id) + " is not an input of this op");
  };
  std::vector<ir::TensorId> outs;
  std::visit(
      [&](auto& o) {
        if constexpr (!std::is_same_v<std::decay_t<decltype(o)>, std::monostate>)
          o.fields(AssignOutputs{sink.get(), &outs});
      },
      op);
  auto inferred = ir::infer(op, lookup);
  if (!inferred.ok()) throw Error(inferred.status().message());
  auto impl = std::make_shared<TensorImpl>();
  impl->meta = inferred->at(0);
  // Autograd keeps the op (attributes included) for its backward rule; the sink takes the op.
  std::optional<ir::Op> recorded;
  if (autograd::needs_record(inputs)) recorded = op;
  Status st = sink->submit_inferred(std::move(op), std::move(inferred).value());
  if (!st.ok()) throw Error(st.message());
  impl->sink = sink;
  impl->id = outs.at(0);
  Tensor out(std::move(impl));
  if (recorded) autograd::record(*recorded, inputs, out);
  return out;
}

Tensor emit(const std::shared_ptr<Sink>& sink, ir::Op op,
            std::initializer_list<const Tensor*> inputs) {
  return emit(sink, std::move(op), std::span<const Tensor* const>(inputs.begin(), inputs.size()));
}

}  // namespace tw::detail
