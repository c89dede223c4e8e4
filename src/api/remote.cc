#include "tensorwire/remote.h"


#include "api/remote_sink.h"
#include "tensorwire/error.h"

namespace tw {

namespace {
client::RemoteSink& remote_sink(const Device& d, const char* what) {
  auto* s = dynamic_cast<client::RemoteSink*>(d.sink().get());
  if (!s) throw Error(std::string(what) + ": " + d.str() + " is not a remote device");
  return *s;
}
void throw_if(const Status& st) {
  if (!st.ok()) throw Error(st.message());
}
RemoteDeviceInfo info_of(int index, const protocol::DeviceInfo& d) {
  return {index, d.name, d.backend, d.memory_bytes};
}
client::Options client_options(const RemoteOptions& options) {
  client::Options o = client::Options::from_env();
  if (!options.tls_ca_file.empty()) o.tls.ca_file = options.tls_ca_file;
  if (!options.tls_fingerprint.empty()) o.tls.fingerprint = options.tls_fingerprint;
  return o;
}
}  // namespace

namespace client {

// Graphs go to the server's session (protocol 2): registration waits for the id the server
// gives after validating and planning the graph; a run is one task, batched like an op.
Result<ir::GraphId> RemoteSink::register_graph(ir::Graph graph) {
  TW_RETURN_NOT_OK(conn_.ensure_connected());
  if (conn_.welcome().version < 2) {
    return unimplemented("register_graph: the server at " + conn_.url().str() +
                         " speaks protocol " + std::to_string(conn_.welcome().version) +
                         ", which has no graph tasks (they need 2); submit the ops one by one");
  }
  return conn_.register_graph(graph);
}

Status RemoteSink::copy_to(ir::TensorId src, detail::Sink& dst, ir::TensorId dst_id) {
  auto* to = dynamic_cast<RemoteSink*>(&dst);
  if (!to) return Sink::copy_to(src, dst, dst_id);
  TW_RETURN_NOT_OK(conn_.ensure_connected());
  TW_RETURN_NOT_OK(to->conn_.ensure_connected());
  if (conn_.welcome().version < 3 || to->conn_.welcome().version < 3) {
    return Sink::copy_to(src, dst, dst_id);
  }
  TW_ASSIGN_OR_RETURN(protocol::Exported e, conn_.export_tensor(src));
  protocol::TensorSource source{conn_.welcome().session_id, src, std::move(e.capability), "", ""};
  if (conn_.welcome().server_id == to->conn_.welcome().server_id) {
    return to->conn_.move_in(protocol::TaskKind::kMoveLocal, dst_id, e.meta, source);
  }
  // The destination dials the source at the address this client used, pinning the certificate
  // fingerprint this client pins (when it pins one), with its own credential.
  source.url = conn_.url().str();
  source.fingerprint = conn_.options().tls.fingerprint;
  return to->conn_.move_in(protocol::TaskKind::kImport, dst_id, e.meta, source);
}

Status RemoteSink::run_graph(ir::GraphId graph, std::span<const ir::TensorId> inputs,
                             std::span<const ir::TensorId> outputs) {
  return conn_.run_graph(graph, {inputs.begin(), inputs.end()}, {outputs.begin(), outputs.end()});
}

}  // namespace client

Device Device::remote(const std::string& url, int index) { return remote_device(url, index, {}); }

Device remote_device(const std::string& url, int index, const RemoteOptions& options) {
  auto parsed = net::parse_url(url);
  if (!parsed.ok()) throw Error("remote device: " + parsed.status().message());
  if (index < 0) throw Error("remote device: index must be >= 0, got " + std::to_string(index));
  auto sink = std::make_shared<client::RemoteSink>(*parsed, static_cast<uint32_t>(index),
                                                   client_options(options));
  return Device(sink);
}

void Device::connect() const { throw_if(sink_->connect()); }
void Device::flush() const { sink_->flush(); }

std::vector<RemoteDeviceInfo> remote_devices(const std::string& url) {
  return remote_devices(url, {});
}

std::vector<RemoteDeviceInfo> remote_devices(const std::string& url, const RemoteOptions& options) {
  auto parsed = net::parse_url(url);
  if (!parsed.ok()) throw Error("remote_devices: " + parsed.status().message());
  auto w = client::enumerate(*parsed, client_options(options));
  throw_if(w.status());
  std::vector<RemoteDeviceInfo> out;
  for (size_t i = 0; i < w->devices.size(); ++i) out.push_back(info_of(static_cast<int>(i), w->devices[i]));
  return out;
}

RemoteStats remote_stats(const Device& device) {
  auto s = remote_sink(device, "remote_stats").connection().stats();
  throw_if(s.status());
  RemoteStats r;
  r.sessions = s->sessions;
  r.sessions_opened = s->sessions_opened;
  r.bytes_held = s->bytes_held;
  r.session_bytes_held = s->session_bytes_held;
  r.ops_executed = s->ops_executed;
  r.frames_in = s->frames_in;
  r.frames_out = s->frames_out;
  r.bytes_in = s->bytes_in;
  r.bytes_out = s->bytes_out;
  r.per_session_bytes = s->per_session_bytes;
  return r;
}

WireCounters wire_counters(const Device& device) {
  client::Counters c = remote_sink(device, "wire_counters").connection().counters();
  return {c.frames_out, c.bytes_out, c.frames_in, c.bytes_in, c.ops, c.round_trips, c.reading_waits, c.spun_waits};
}

RemoteHandshake remote_handshake(const Device& device) {
  client::Connection& c = remote_sink(device, "remote_handshake").connection();
  throw_if(c.ensure_connected());
  const protocol::Welcome& w = c.welcome();
  RemoteHandshake h;
  h.protocol_version = w.version;
  h.session_id = w.session_id;
  h.server_id = w.server_id;
  h.device_count = static_cast<int>(w.devices.size());
  if (w.device_index < w.devices.size()) h.device = info_of(static_cast<int>(w.device_index), w.devices[w.device_index]);
  h.max_frame_bytes = w.limits.max_frame_bytes;
  h.session_memory_bytes = w.limits.session_memory_bytes;
  h.max_sessions = w.limits.max_sessions;
  h.session_queue_depth = w.limits.session_queue_depth;
  return h;
}

}  // namespace tw
