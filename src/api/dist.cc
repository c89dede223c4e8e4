// tw::dist (tensorwire/dist.h): a collective runs on the servers with Gloo when its tensors are
// on remote devices of more than one server, each speaking protocol 3; otherwise it is
// reduced with ops on the first tensor's device and copied back (within one server those copies
// are same-server moves, so no bytes pass through the client).
#include "tensorwire/dist.h"

#include <openssl/rand.h>

#include <cstdio>
#include <set>

#include "api/sink.h"
#include "ir/collective.h"
#include "tensorwire/error.h"

namespace tw::dist {

struct Group::State {
  std::vector<Device> devices;
  std::chrono::milliseconds timeout;
  std::string id;  // random: names the group's Gloo contexts and rendezvous keys on the servers
};

struct Access {
  static const Group::State& state(const Group& g) { return *g.state_; }
};

namespace {

std::string random_group_id() {
  unsigned char b[16];
  if (RAND_bytes(b, sizeof b) != 1) throw Error("dist: no randomness for a group id (OpenSSL)");
  std::string s = "g";
  char hex[3];
  for (unsigned char c : b) {
    std::snprintf(hex, sizeof hex, "%02x", c);
    s += hex;
  }
  return s;
}

ir::CollectiveReduce reduce_kind(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ir::CollectiveReduce::kSum;
    case ReduceOp::kMean: return ir::CollectiveReduce::kMean;
    case ReduceOp::kMax: return ir::CollectiveReduce::kMax;
  }
  return ir::CollectiveReduce::kSum;
}

// The checks every participant's server repeats, made here first so a mistake fails at the
// call (and not after a timeout on the servers).
void validate(const std::vector<Tensor>& ts, const Group::State& g, ir::CollectiveKind kind,
              ReduceOp op, size_t root) {
  const std::string what = std::string("dist::") + ir::collective_name(kind) + ": ";
  if (ts.empty()) throw Error(what + "no tensors");
  if (ts.size() != g.devices.size()) {
    throw Error(what + std::to_string(ts.size()) + " tensors for a group of " +
                std::to_string(g.devices.size()) + " devices");
  }
  for (size_t i = 0; i < ts.size(); ++i) {
    if (!ts[i].defined()) throw Error(what + "tensor " + std::to_string(i) + " is undefined");
    if (ts[i].device() != g.devices[i]) {
      throw Error(what + "tensor " + std::to_string(i) + " is on " + ts[i].device().str() +
                  ", the group's device " + std::to_string(i) + " is " + g.devices[i].str());
    }
    if (ts[i].shape() != ts[0].shape() || ts[i].dtype() != ts[0].dtype()) {
      throw Error(what + "tensor " + std::to_string(i) + " is " +
                  std::string(dtype_name(ts[i].dtype())) + " " + shape_str(ts[i].shape()) +
                  ", tensor 0 is " + std::string(dtype_name(ts[0].dtype())) + " " +
                  shape_str(ts[0].shape()));
    }
  }
  // A remote device twice would be one session taking two ranks: it would wait for itself.
  std::set<const detail::Sink*> sinks;
  for (const Device& d : g.devices) {
    if (d.kind() == Device::Kind::kRemote && !sinks.insert(d.sink().get()).second) {
      throw Error(what + "device " + d.str() + " appears twice in the group");
    }
  }
  if (kind == ir::CollectiveKind::kBroadcast && root >= ts.size()) {
    throw Error(what + "root " + std::to_string(root) + " of " + std::to_string(ts.size()) +
                " tensors");
  }
  const DType d = ts[0].dtype();
  const bool reduces =
      kind == ir::CollectiveKind::kAllReduce || kind == ir::CollectiveKind::kReduceScatter;
  if (reduces && d != kF32 && d != kF64 && d != kI32 && d != kI64) {
    throw Error(what + "reduces f32, f64, i32 and i64, not " + std::string(dtype_name(d)));
  }
  if (reduces && op == ReduceOp::kMean && d != kF32 && d != kF64) {
    throw Error(what + "a mean needs a floating-point tensor, not " + std::string(dtype_name(d)));
  }
  if ((kind == ir::CollectiveKind::kAllGather || kind == ir::CollectiveKind::kReduceScatter) &&
      ts[0].shape().empty()) {
    throw Error(what + "needs tensors of rank 1 or more");
  }
  if (kind == ir::CollectiveKind::kReduceScatter &&
      ts[0].shape()[0] % static_cast<int64_t>(ts.size()) != 0) {
    throw Error(what + "dimension 0 (" + std::to_string(ts[0].shape()[0]) +
                ") does not split into " + std::to_string(ts.size()) + " equal parts");
  }
}

// Where each device can join a collective across servers (Backend::collective_domain), when Gloo
// is the way: every device on a server that runs collectives, and at least two servers among
// them. Empty otherwise.
std::vector<Backend::CollectiveDomain> gloo_domains(const Group::State& g) {
  std::vector<Backend::CollectiveDomain> out;
  std::set<std::string> servers;
  for (const Device& d : g.devices) {
    Result<Backend::CollectiveDomain> dom = d.sink()->collective_domain();
    if (!dom.ok()) throw Error(dom.status().message());
    if (dom->server_id.empty()) return {};
    servers.insert(dom->server_id);
    out.push_back(std::move(dom).value());
  }
  if (servers.size() < 2) out.clear();
  return out;
}

Shape out_shape(const Shape& in, ir::CollectiveKind kind, size_t n) {
  Shape s = in;
  if (kind == ir::CollectiveKind::kAllGather) s[0] *= static_cast<int64_t>(n);
  if (kind == ir::CollectiveKind::kReduceScatter) s[0] /= static_cast<int64_t>(n);
  return s;
}

void run_on_servers(std::vector<Tensor>& ts, const Group::State& g,
                    const std::vector<Backend::CollectiveDomain>& domains, ir::CollectiveKind kind,
                    ReduceOp op, size_t root) {
  ir::CollectiveSpec c;
  c.kind = kind;
  c.reduce = reduce_kind(op);
  c.size = static_cast<uint32_t>(ts.size());
  c.root = static_cast<uint32_t>(root);
  c.group = g.id;
  c.store_url = domains[0].url;
  c.fingerprint = domains[0].fingerprint;
  c.timeout_ms = static_cast<uint32_t>(std::min<int64_t>(g.timeout.count(), UINT32_MAX));
  c.out_meta = {out_shape(ts[0].shape(), kind, ts.size()), ts[0].dtype()};
  // Each participant is sent its part even when another's could not be (its server gone, say):
  // those parts then fail on their servers within the timeout, and their results say why.
  std::vector<Tensor> results;
  Status failed;
  for (size_t i = 0; i < ts.size(); ++i) {
    c.rank = static_cast<uint32_t>(i);
    c.input = ts[i].impl()->id;
    // A tensor only this list holds, outside autograd, is donated: its id names the result (the
    // server reduces in its storage instead of copying it), since nothing can see it again.
    const std::shared_ptr<detail::TensorImpl>& held = ts[i].impl();
    const bool donate = held.use_count() == 1 && !held->autograd && !held->shared_owner;
    detail::Sink& sink = *g.devices[i].sink();
    c.output = donate ? c.input : sink.new_id();
    Status st = sink.collective(c);
    if (!st.ok() && failed.ok()) failed = st;
    if (donate) {
      held->meta = c.out_meta;
      results.push_back(ts[i]);
      continue;
    }
    auto impl = std::make_shared<detail::TensorImpl>();
    impl->sink = g.devices[i].sink();
    impl->id = c.output;
    impl->meta = c.out_meta;
    results.emplace_back(std::move(impl));
  }
  // Every participant must start: none waits for its batch to fill.
  for (const Device& d : g.devices) d.sink()->flush();
  ts = std::move(results);
  if (!failed.ok())
    throw Error(std::string("dist::") + ir::collective_name(kind) + ": " + failed.message());
}

// Reduced with ops on the first device, in list order, then copied to each device.
void run_with_ops(std::vector<Tensor>& ts, ir::CollectiveKind kind, ReduceOp op, size_t root) {
  const Device home = ts[0].device();
  std::vector<Tensor> at_home;
  for (const Tensor& t : ts) at_home.push_back(t.detach().to(home));
  Tensor r;
  switch (kind) {
    case ir::CollectiveKind::kBroadcast: r = at_home[root]; break;
    case ir::CollectiveKind::kAllGather: r = cat(at_home, 0); break;
    case ir::CollectiveKind::kAllReduce:
    case ir::CollectiveKind::kReduceScatter:
      r = at_home[0];
      for (size_t i = 1; i < at_home.size(); ++i) {
        r = op == ReduceOp::kMax ? r.maximum(at_home[i]) : r + at_home[i];
      }
      if (op == ReduceOp::kMean) r = r / static_cast<double>(ts.size());
      break;
  }
  const int64_t part = kind == ir::CollectiveKind::kReduceScatter
                           ? r.shape()[0] / static_cast<int64_t>(ts.size())
                           : 0;
  std::vector<Tensor> out;
  for (size_t i = 0; i < ts.size(); ++i) {
    Tensor mine = kind == ir::CollectiveKind::kReduceScatter
                      ? r.narrow(0, static_cast<int64_t>(i) * part, part)
                      : r;
    out.push_back(i == 0 ? mine : mine.to(ts[i].device()));
  }
  ts = std::move(out);
}

void run(std::vector<Tensor>& ts, const Group& group, ir::CollectiveKind kind, ReduceOp op,
         size_t root) {
  const Group::State& g = Access::state(group);
  validate(ts, g, kind, op, root);
  std::vector<Backend::CollectiveDomain> domains = gloo_domains(g);
  if (!domains.empty()) return run_on_servers(ts, g, domains, kind, op, root);
  run_with_ops(ts, kind, op, root);
}

Group group_of(const std::vector<Tensor>& ts) {
  std::vector<Device> devices;
  for (const Tensor& t : ts) {
    if (!t.defined()) throw Error("dist: an undefined tensor in the list");
    devices.push_back(t.device());
  }
  return Group(std::move(devices));
}

}  // namespace

Group::Group(std::vector<Device> devices, std::chrono::milliseconds timeout)
    : state_(std::make_shared<State>(State{std::move(devices), timeout, random_group_id()})) {
  if (state_->devices.empty()) throw Error("dist::Group: no devices");
  if (timeout.count() <= 0) throw Error("dist::Group: the timeout must be positive");
}
const std::vector<Device>& Group::devices() const { return state_->devices; }
size_t Group::size() const { return state_->devices.size(); }

void all_reduce(std::vector<Tensor>& ts, ReduceOp op, const Group& g) {
  run(ts, g, ir::CollectiveKind::kAllReduce, op, 0);
}
void all_reduce(std::vector<Tensor>& ts, ReduceOp op) { all_reduce(ts, op, group_of(ts)); }
void broadcast(std::vector<Tensor>& ts, size_t root, const Group& g) {
  run(ts, g, ir::CollectiveKind::kBroadcast, ReduceOp::kSum, root);
}
void broadcast(std::vector<Tensor>& ts, size_t root) { broadcast(ts, root, group_of(ts)); }
void all_gather(std::vector<Tensor>& ts, const Group& g) {
  run(ts, g, ir::CollectiveKind::kAllGather, ReduceOp::kSum, 0);
}
void all_gather(std::vector<Tensor>& ts) { all_gather(ts, group_of(ts)); }
void reduce_scatter(std::vector<Tensor>& ts, ReduceOp op, const Group& g) {
  run(ts, g, ir::CollectiveKind::kReduceScatter, op, 0);
}
void reduce_scatter(std::vector<Tensor>& ts, ReduceOp op) { reduce_scatter(ts, op, group_of(ts)); }

}  // namespace tw::dist
