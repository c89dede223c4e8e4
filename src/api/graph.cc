// tw::graph::Trace (tensorwire/graph.h): a validated ir::Graph with its tensors' metas, its file
// form (ir/trace.h) and its replay on a device.
#include "tensorwire/graph.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "api/capture.h"
#include "ir/infer.h"
#include "ir/printer.h"
#include "ir/trace.h"
#include "tensorwire/profile.h"

namespace tw::graph {

struct Trace::Impl {
  ir::Graph graph;
  ir::GraphPlan plan;
  std::unordered_map<ir::TensorId, TensorMeta> metas;  // of every tensor the graph names
  std::vector<TensorSpec> inputs, outputs;
  // Graphs registered per device (the key's sink, held weakly); 0: the device refused graphs,
  // so replay issues the ops one by one.
  std::mutex mu;
  std::vector<std::pair<std::weak_ptr<detail::Sink>, ir::GraphId>> registered;
};

namespace {

TensorSpec spec_of(const TensorMeta& m) { return TensorSpec{m.shape, m.dtype}; }

std::shared_ptr<Trace::Impl> make_impl(ir::Graph graph) {
  Result<ir::GraphPlan> plan = ir::validate_graph(graph);
  if (!plan.ok()) throw Error("trace: " + plan.status().message());
  auto impl = std::make_shared<Trace::Impl>();
  for (size_t i = 0; i < graph.inputs.size(); ++i) {
    impl->metas.emplace(graph.input_ids[i], graph.inputs[i]);
    impl->inputs.push_back(spec_of(graph.inputs[i]));
  }
  const ir::MetaLookup lookup = [&](ir::TensorId id) -> Result<TensorMeta> {
    return impl->metas.at(id);  // validate_graph checked every id is known by now
  };
  for (const ir::Op& op : graph.ops) {
    Result<std::vector<TensorMeta>> out = ir::infer(op, lookup);
    const std::vector<ir::TensorId> ids = ir::op_outputs(op);
    for (size_t k = 0; k < ids.size(); ++k) impl->metas.emplace(ids[k], out->at(k));
  }
  for (const TensorMeta& m : plan->outputs) impl->outputs.push_back(spec_of(m));
  impl->graph = std::move(graph);
  impl->plan = std::move(plan).value();
  return impl;
}

Tensor tensor_on(const std::shared_ptr<detail::Sink>& sink, ir::TensorId id, const TensorMeta& m) {
  auto impl = std::make_shared<detail::TensorImpl>();
  impl->sink = sink;
  impl->id = id;
  impl->meta = m;
  return Tensor(std::move(impl));
}

// Issues the ops one by one under fresh ids of the device, freeing intermediates after their
// last reader, exactly as the same eager calls would run.
void replay_ops(const Trace::Impl& t, const std::shared_ptr<detail::Sink>& sink,
                const std::vector<Tensor>& inputs, std::span<const ir::TensorId> out_ids) {
  std::unordered_map<ir::TensorId, ir::TensorId> ids;
  for (size_t i = 0; i < inputs.size(); ++i)
    ids.emplace(t.graph.input_ids[i], inputs[i].impl()->id);
  for (size_t i = 0; i < t.graph.output_ids.size(); ++i)
    ids.emplace(t.graph.output_ids[i], out_ids[i]);
  for (size_t i = 0; i < t.graph.ops.size(); ++i) {
    ir::Op op = t.graph.ops[i];
    for (ir::TensorId o : ir::op_outputs(op)) ids.try_emplace(o, sink->new_id());
    ir::remap_op(op, [&](ir::TensorId id) { return ids.at(id); });
    Status st = sink->submit(std::move(op));
    if (!st.ok()) throw Error("replay: op " + std::to_string(i) + ": " + st.message());
    for (ir::TensorId dead : t.plan.free_after[i]) sink->drop(ids.at(dead));
  }
}

}  // namespace

std::string TensorSpec::str() const { return meta_str(TensorMeta{shape, dtype}); }

Trace::Trace() : impl_(make_impl(ir::Graph{})) {}

std::vector<uint8_t> Trace::to_bytes() const { return ir::encode_trace_file(impl_->graph); }

Trace Trace::from_bytes(std::span<const uint8_t> bytes) {
  Result<ir::Graph> g = ir::decode_trace_file(bytes.data(), bytes.size());
  if (!g.ok()) throw Error("trace: " + g.status().message());
  return Trace(make_impl(std::move(g).value()));
}

void Trace::save(const std::string& path) const {
  const std::vector<uint8_t> bytes = to_bytes();
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  f.close();
  if (!f) throw Error("trace: cannot write " + path);
}

Trace Trace::load(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("trace: cannot open " + path);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)),
                                   std::istreambuf_iterator<char>());
  try {
    return from_bytes(bytes);
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
}

const std::vector<TensorSpec>& Trace::inputs() const { return impl_->inputs; }
const std::vector<TensorSpec>& Trace::outputs() const { return impl_->outputs; }
size_t Trace::num_ops() const { return impl_->graph.ops.size(); }

std::string Trace::str() const {
  const ir::Graph& g = impl_->graph;
  std::ostringstream os;
  os << "trace: " << g.input_ids.size() << " inputs, " << g.ops.size() << " ops, "
     << g.output_ids.size() << " outputs\n";
  for (size_t i = 0; i < g.input_ids.size(); ++i)
    os << "input " << i << ": %" << g.input_ids[i] << " " << meta_str(g.inputs[i]) << "\n";
  for (size_t i = 0; i < g.ops.size(); ++i) {
    os << i << ": " << ir::to_string(g.ops[i]) << " ->";
    for (ir::TensorId o : ir::op_outputs(g.ops[i])) os << " " << meta_str(impl_->metas.at(o));
    os << "\n";
  }
  for (size_t i = 0; i < g.output_ids.size(); ++i)
    os << "output " << i << ": %" << g.output_ids[i] << " " << impl_->outputs[i].str() << "\n";
  return os.str();
}

std::vector<Tensor> Trace::replay(const Device& device, const std::vector<Tensor>& inputs) const {
  const Impl& t = *impl_;
  const std::shared_ptr<detail::Sink>& sink = device.sink();
  if (device.kind() == Device::Kind::kCapture) {
    throw Error("replay: " + device.str() + " records ops; replay on the device it wraps");
  }
  if (inputs.size() != t.inputs.size()) {
    throw Error("replay: the trace takes " + std::to_string(t.inputs.size()) + " inputs, " +
                std::to_string(inputs.size()) + " were given");
  }
  std::vector<ir::TensorId> in_ids;
  in_ids.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    // The message only when one is thrown: a replay checks every input every time.
    auto which = [i] { return "replay: input " + std::to_string(i); };
    if (!x.defined()) throw Error(which() + " is undefined");
    const TensorMeta& want = t.graph.inputs[i];
    if (x.impl()->meta != want) {
      throw Error(which() + " is " + meta_str(x.impl()->meta) + ", the trace takes " +
                  meta_str(want));
    }
    if (x.impl()->sink != sink) {
      throw Error(which() + " is on " + x.impl()->sink->str() + ", not on " + device.str() +
                  "; move it with .to(device)");
    }
    in_ids.push_back(x.impl()->id);
  }
  std::vector<ir::TensorId> out_ids;
  for (size_t i = 0; i < t.outputs.size(); ++i) out_ids.push_back(sink->new_id());

  ir::GraphId gid = 0;
  bool known = false;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    for (auto& [weak, id] : impl_->registered) {
      if (weak.lock() == sink) {
        gid = id;
        known = true;
      }
    }
    if (!known) {
      Result<ir::GraphId> r = sink->register_graph(t.graph);
      if (!r.ok() && r.status().code() != StatusCode::kUnimplemented) {
        throw Error("replay on " + device.str() + ": " + r.status().message());
      }
      gid = r.ok() ? *r : 0;
      impl_->registered.emplace_back(sink, gid);
    }
  }
  if (gid != 0) {
    Status st = sink->run_graph(gid, in_ids, out_ids);
    if (!st.ok()) throw Error("replay on " + device.str() + ": " + st.message());
  } else {
    replay_ops(t, sink, inputs, out_ids);
  }
  std::vector<Tensor> outs;
  for (size_t i = 0; i < out_ids.size(); ++i)
    outs.push_back(tensor_on(sink, out_ids[i], t.plan.outputs[i]));
  return outs;
}

bool Trace::runs_as_graph(const Device& device) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (auto& [weak, id] : impl_->registered) {
    if (weak.lock() == device.sink()) return id != 0;
  }
  return false;
}

Trace Capture::finish() {
  return Trace(
      make_impl(static_cast<detail::CaptureBackend&>(device_.sink()->backend()).finish(nullptr)));
}

Trace Capture::finish(const std::vector<Tensor>& outputs) {
  std::vector<ir::TensorId> ids;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].defined() || outputs[i].impl()->sink != device_.sink()) {
      throw Error("Capture::finish: output " + std::to_string(i) + " is not a tensor of " +
                  device_.str());
    }
    ids.push_back(outputs[i].impl()->id);
  }
  return Trace(
      make_impl(static_cast<detail::CaptureBackend&>(device_.sink()->backend()).finish(&ids)));
}

}  // namespace tw::graph

namespace tw::graph {

std::vector<Slot> state_slots(optim::Optimizer& optimizer) {
  std::vector<Slot> out;
  for (const nn::ParameterPtr& p : optimizer.params()) {
    out.push_back({[p] { return p->value(); }, [p](Tensor t) { p->set(std::move(t)); }});
  }
  for (Tensor* t : optimizer.state()) {
    out.push_back({[t] { return *t; }, [t](Tensor v) { *t = std::move(v); }});
  }
  return out;
}

Step::Step(Fn fn, std::vector<Slot> state) : fn_(std::move(fn)), state_(std::move(state)) {
  if (!fn_) throw Error("graph::Step: the function is empty");
}

namespace {
// What a trace is specialised to: every argument's and defined slot's device, dtype and shape.
std::string key_of(const std::vector<Tensor>& args, const std::vector<Slot>& state) {
  std::string k;
  auto add = [&](const Tensor& t) {
    if (!t.defined()) {
      k += "-;";
      return;
    }
    k += std::to_string(reinterpret_cast<uintptr_t>(t.impl()->sink.get())) + ":" +
         meta_str(t.impl()->meta) + ";";
  };
  for (const Tensor& a : args) add(a);
  k += "|";
  for (const Slot& s : state) add(s.get());
  return k;
}
}  // namespace

std::vector<Tensor> Step::operator()(const std::vector<Tensor>& args) {
  // TW_PROFILE's per-step figures, on the device of the step's tensors.
  const auto on =
      std::find_if(args.begin(), args.end(), [](const Tensor& a) { return a.defined(); });
  if (on == args.end()) {
    profile::step();
  } else {
    profile::step(on->device().str());
  }
  for (size_t i = 0; i < args.size(); ++i) {
    if (!args[i].defined())
      throw Error("graph::Step: argument " + std::to_string(i) + " is undefined");
  }
  Cached& c = cache_[key_of(args, state_)];
  ++c.seen;
  if (c.trace) return replay(args, c);
  if (c.seen == 1 || args.empty()) {
    ++eager_;
    return fn_(args);
  }
  return record(args, c);
}

std::vector<Tensor> Step::record(const std::vector<Tensor>& args, Cached& c) {
  const Device inner = args[0].device();
  Capture cap(inner);
  std::vector<Tensor> cap_args;
  for (const Tensor& a : args) cap_args.push_back(cap.input(a));
  std::vector<Tensor> before;     // the slots' own tensors, restored if fn throws
  std::vector<uint64_t> entered;  // each slot's capture id (0: undefined)
  for (Slot& s : state_) {
    const Tensor t = s.get();
    before.push_back(t);
    entered.push_back(0);
    if (!t.defined()) continue;
    const Tensor x = cap.input(t);
    entered.back() = x.id();
    s.set(x);
  }
  std::vector<Tensor> results;
  std::vector<Tensor> outs;
  std::vector<bool> state_out;
  try {
    results = fn_(cap_args);
    outs = results;
    for (size_t i = 0; i < state_.size(); ++i) {
      // A slot fn left as it was (a parameter without a gradient) keeps its tensor.
      const Tensor t = state_[i].get();
      const bool changed = t.defined() && !(t.device() == cap.device() && t.id() == entered[i]);
      state_out.push_back(changed);
      if (changed) outs.push_back(t);
    }
    c.trace = std::make_shared<Trace>(cap.finish(outs));
  } catch (...) {
    for (size_t i = 0; i < state_.size(); ++i)
      if (before[i].defined()) state_[i].set(before[i]);
    throw;
  }
  ++recordings_;
  c.state_out = std::move(state_out);
  c.results = results.size();
  std::vector<Tensor> released;
  for (const Tensor& t : outs) released.push_back(cap.release(t));
  size_t k = results.size();
  for (size_t i = 0; i < state_.size(); ++i) {
    if (c.state_out[i]) {
      state_[i].set(released[k++]);
    } else if (before[i].defined()) {
      state_[i].set(before[i]);
    }
  }
  released.resize(results.size());
  return released;
}

std::vector<Tensor> Step::replay(const std::vector<Tensor>& args, Cached& c) {
  std::vector<Tensor> in = args;
  for (Slot& s : state_) {
    const Tensor t = s.get();
    if (t.defined()) in.push_back(t);
  }
  std::vector<Tensor> out = c.trace->replay(args[0].device(), in);
  ++replays_;
  size_t k = c.results;
  for (size_t i = 0; i < state_.size(); ++i)
    if (c.state_out[i]) state_[i].set(out[k++]);
  out.resize(c.results);
  return out;
}

}  // namespace tw::graph
