#include "tensorwire/remote.h"

#include "api/sink.h"
#include "client/remote_backend.h"
#include "tensorwire/error.h"

namespace tw {

namespace {
// The remote backend behind a device of kind kRemote: the only backend of that kind (kind()
// names the implementation, as ggml's backend guid does).
client::RemoteBackend& remote_backend(const Device& d, const char* what) {
  if (d.kind() != Device::Kind::kRemote) {
    throw Error(std::string(what) + ": " + d.str() + " is not a remote device");
  }
  return static_cast<client::RemoteBackend&>(d.sink()->backend());
}
void throw_if(const Status& st) {
  if (!st.ok()) throw Error(st.message());
}
RemoteDeviceInfo info_of(const protocol::Welcome& w, size_t index) {
  const protocol::DeviceInfo& d = w.devices[index];
  RemoteDeviceInfo info;
  info.index = static_cast<int>(index);
  info.name = d.name;
  info.backend = d.backend;
  info.memory_bytes = d.memory_bytes;
  for (int i = 0; i < kNumDTypes; ++i) {
    if (d.dtype_mask & (1u << i)) info.dtypes.push_back(static_cast<DType>(i));
  }
  if (index < w.descriptions.size()) {
    const protocol::DeviceDescription& x = w.descriptions[index];
    info.model = x.model;
    info.memory_total = x.memory_total;
    info.memory_free = x.memory_free;
    info.host_memory = x.host_memory;
    for (uint16_t code : x.ops) {
      // An op this client's IR does not know yet is left out: it could not send it.
      if (code >= 1 && code <= ir::kNumOps) {
        info.ops.emplace_back(ir::op_code_name(static_cast<ir::OpCode>(code)));
      }
    }
  }
  return info;
}
client::Options client_options(const RemoteOptions& options) {
  client::Options o = client::Options::from_env();
  if (!options.tls_ca_file.empty()) o.tls.ca_file = options.tls_ca_file;
  if (!options.tls_fingerprint.empty()) o.tls.fingerprint = options.tls_fingerprint;
  if (!options.credential.empty()) o.credential = options.credential;
  return o;
}
}  // namespace

Device Device::remote(const std::string& url, int index) { return remote_device(url, index, {}); }

Device remote_device(const std::string& url, int index, const RemoteOptions& options) {
  auto parsed = net::parse_url(url);
  if (!parsed.ok()) throw Error("remote device: " + parsed.status().message());
  if (index < 0) throw Error("remote device: index must be >= 0, got " + std::to_string(index));
  return Device(std::make_shared<detail::Sink>(std::make_unique<client::RemoteBackend>(
      *parsed, static_cast<uint32_t>(index), client_options(options))));
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
  for (size_t i = 0; i < w->devices.size(); ++i) out.push_back(info_of(*w, i));
  return out;
}

RemoteStats remote_stats(const Device& device) {
  auto s = remote_backend(device, "remote_stats").connection().stats();
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
  for (const auto& p : s->parked.sessions) {
    r.parked_sessions.push_back({p.session_id, p.bytes, static_cast<double>(p.ms_left) / 1000});
  }
  r.max_memory_bytes = s->memory.max_memory_bytes;
  r.memory_used_bytes = s->memory.used_bytes;
  return r;
}

WireCounters wire_counters(const Device& device) {
  client::Counters c = remote_backend(device, "wire_counters").connection().counters();
  return {c.frames_out, c.bytes_out,   c.frames_in,     c.bytes_in,
          c.ops,        c.round_trips, c.reading_waits, c.spun_waits};
}

RemoteHandshake remote_handshake(const Device& device) {
  client::Connection& c = remote_backend(device, "remote_handshake").connection();
  throw_if(c.ensure_connected());
  const protocol::Welcome& w = c.welcome();
  RemoteHandshake h;
  h.protocol_version = w.version;
  h.session_id = w.session_id;
  h.server_id = w.server_id;
  h.device_count = static_cast<int>(w.devices.size());
  if (w.device_index < w.devices.size()) h.device = info_of(w, w.device_index);
  h.max_frame_bytes = w.limits.max_frame_bytes;
  h.session_memory_bytes = w.limits.session_memory_bytes;
  h.max_sessions = w.limits.max_sessions;
  h.session_queue_depth = w.limits.session_queue_depth;
  return h;
}

}  // namespace tw
