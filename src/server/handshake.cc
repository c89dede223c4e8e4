// A connection's handshake: the Hello (protocol versions, credential, device index, the session
// limit) answered by a Welcome that opens the session, or by a refusal naming the reason; and
// the peer connections of other servers, which fetch tensors and rendezvous keys instead.
#include <algorithm>
#include <string>

#include "server/connection.h"

namespace tw::server {

namespace proto = protocol;

namespace {

// Compares without an early exit, so the time taken does not tell how much of a guess matched.
bool same_secret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i)
    diff |= static_cast<unsigned char>(a[i] ^ b[i % (b.empty() ? 1 : b.size())]);
  return diff == 0 && !b.empty();
}

}  // namespace

void Connection::refuse(proto::RefuseReason reason, const std::string& message) {
  srv_.totals.metrics.error(server::error_kind_of(reason));
  proto::OutFrame f;
  proto::encode_refuse({reason, message}, f);
  send(std::move(f));
  close_when_flushed();
}

void Connection::on_hello(const Buffer& frame) {
  auto hello = proto::decode_hello(frame);
  if (!hello.ok()) return refuse(proto::RefuseReason::kMalformed, hello.status().message());
  const proto::Hello& h = *hello;
  uint16_t lo = std::max(h.min_version, proto::kMinProtocolVersion);
  uint16_t hi = std::min(h.max_version, proto::kProtocolVersion);
  if (lo > hi) {
    return refuse(proto::RefuseReason::kBadVersion,
                  "client speaks protocol versions " + std::to_string(h.min_version) + ".." +
                      std::to_string(h.max_version) + ", this server " +
                      std::to_string(proto::kMinProtocolVersion) + ".." +
                      std::to_string(proto::kProtocolVersion) + "; upgrade the older side");
  }
  if (!srv_.opts.credential.empty() && !same_secret(h.credential, srv_.opts.credential)) {
    return refuse(proto::RefuseReason::kUnauthorized, "bad or missing credential");
  }
  if (srv_.draining.load()) {
    return refuse(proto::RefuseReason::kDraining,
                  "server draining (shutting down): connect to another server");
  }
  proto::Welcome w;
  w.version = hi;
  w.server_id = srv_.server_id;
  w.devices = srv_.device_infos();
  if (hi >= proto::kDeviceDescriptionVersion) w.descriptions = srv_.device_descriptions();
  w.limits = {srv_.opts.max_frame_bytes, srv_.opts.session_memory_bytes, srv_.opts.max_sessions,
              srv_.opts.session_queue_depth};
  w.device_index = h.device_index;
  if (h.device_index == proto::kEnumerateOnly) {
    proto::OutFrame f;
    proto::encode_welcome(w, f);
    send(std::move(f));
    close_when_flushed();
    return;
  }
  if (h.device_index == proto::kPeerOnly && hi >= proto::kMovesSince) return welcome_peer(w);
  if (h.device_index == proto::kResumeSession) return resume_session(h, std::move(w), hi);
  if (h.device_index >= static_cast<uint32_t>(srv_.opts.devices)) {
    return refuse(proto::RefuseReason::kBadDeviceIndex,
                  "device index " + std::to_string(h.device_index) + " out of range: server " +
                      srv_.server_id + " hosts " + std::to_string(srv_.opts.devices) +
                      " device(s) (0.." + std::to_string(srv_.opts.devices - 1) + ")");
  }
  if (!has_slot_) {
    return refuse(proto::RefuseReason::kServerBusy,
                  "server has reached its limit of " + std::to_string(srv_.opts.max_sessions) +
                      " sessions (tensorwire-server --max-sessions); try again later");
  }
  {
    std::lock_guard<std::mutex> lock(srv_.sessions_mu);
    id_ = srv_.next_session.fetch_add(1);
    srv_.sessions[id_] = weak_from_this();
  }
  const server::OpLimits limits{srv_.opts.max_op_cost,
                                server::device_rate(srv_.backends[h.device_index])};
  auto session =
      server::Session::open(id_, srv_.backends[h.device_index], srv_.opts.session_memory_bytes,
                            srv_.totals, srv_.opts.max_graph_ops, limits);
  if (!session.ok()) return refuse(proto::RefuseReason::kCannotHost, session.status().message());
  if (server::MemoryBudget* own = srv_.device_memory[h.device_index].get()) {
    (*session)->use_device_memory(own, srv_.device_infos()[h.device_index].name);
  }
  {
    std::lock_guard<std::mutex> lock(srv_.sessions_mu);  // snapshot() reads held() under it
    session_ = std::move(session).value();
    device_ = h.device_index;
  }
  srv_.sessions_opened.fetch_add(1);
  welcomed_ = true;
  version_ = hi;
  handshake_timer_.cancel();
  w.session_id = id_;
  make_resumable(w, h.credential);
  proto::OutFrame f;
  proto::encode_welcome(w, f);
  send(std::move(f));
  start_resumable();
}

// A peer connection (another server pulling tensors, transfer.h): no session, only fetches.
void Connection::welcome_peer(proto::Welcome& w) {
  if (!has_slot_) {
    return refuse(proto::RefuseReason::kServerBusy,
                  "server has reached its limit of " + std::to_string(srv_.opts.max_sessions) +
                      " connections (tensorwire-server --max-sessions); try again later");
  }
  peer_ = true;
  welcomed_ = true;
  handshake_timer_.cancel();
  proto::OutFrame f;
  proto::encode_welcome(w, f);
  send(std::move(f));
}

// A peer's Fetch, FetchBound or FetchDone (a pull, transfer.h) or Store (a collective's
// rendezvous, collective.h). A FetchDone has no reply.
void Connection::on_fetch(const Buffer& frame, bool parked) {
  proto::OutFrame f;
  Result<proto::ClientMsg> kind = proto::peek_client_msg(frame);
  if (kind.ok() && *kind == proto::ClientMsg::kStore) {
    server::serve_store(srv_.store, frame, f);
  } else {
    // A fetch of a ticket not yet exported waits (without blocking this shard) for the session's
    // ExportAs, and is served again on this shard's thread once it has run.
    server::CapabilityTable::Wake wake;
    std::shared_ptr<asio::steady_timer> timer;
    if (!parked) {
      timer = std::make_shared<asio::steady_timer>(shard_.io);
      wake = [self = shared_from_this(), frame, timer] {
        asio::post(self->shard_.io, [self, frame, timer] {
          timer->cancel();
          self->on_fetch(frame, true);
        });
      };
    }
    const bool may_park = wake && !(kind.ok() && *kind == proto::ClientMsg::kFetchDone);
    server::serve_fetch(srv_.totals.capabilities, srv_.totals.metrics, frame, f, std::move(wake));
    if (f.payload_size() == 0 && may_park) sweep_parked(std::move(timer));
    if (f.payload_size() == 0) return;
  }
  send(std::move(f));
}

// A parked fetch is refused once its session has made no progress for the capability ttl
// (CapabilityTable::progress): sweeps after each ttl until it is woken, so that happens even if
// nothing else sweeps meanwhile.
// (The wake cancels `timer`, which then lets the connection go.)
void Connection::sweep_parked(std::shared_ptr<asio::steady_timer> timer) {
  timer->expires_after(srv_.opts.capability_ttl + std::chrono::milliseconds(50));
  timer->async_wait([timer, self = shared_from_this()](const asio::error_code& ec) {
    if (ec == asio::error::operation_aborted) return;
    self->srv_.totals.capabilities.sweep();
    self->sweep_parked(timer);
  });
}

}  // namespace tw::server
