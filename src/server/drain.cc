// Graceful drain (tw::Server::drain, tensorwire-server on SIGTERM): no new sessions, a typed
// notice to every client, the work already received run within a bound, then stop.
#include <chrono>
#include <thread>

#include "server/connection.h"
#include "server/server_impl.h"

namespace tw {

namespace proto = protocol;

namespace server {

void Connection::notify_draining(const proto::Draining& notice) {
  // On the connection's own shard thread, the one that writes what the handshake settled
  // (welcomed_, peer_, version_): read from the draining thread, they raced with a Hello being
  // taken (make tsan found it). Only a welcomed session of a client that knows the message (an
  // older one would take an unknown message for a broken server): the others find out when the
  // connection closes.
  asio::post(shard_.io, [self = shared_from_this(), notice] {
    if (!self->welcomed_ || self->peer_ || self->version_ < proto::kDrainingSince) return;
    proto::OutFrame f;
    proto::encode_draining(notice, f);
    self->send(std::move(f));
  });
}

}  // namespace server

bool Server::Impl::do_drain(std::chrono::milliseconds timeout) {
  if (draining.exchange(true) || stopping.load()) return true;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  // 1. No new sessions: the listeners close (on their loop), handshakes under way are refused.
  asio::post(io(), [this] {
    for (auto& l : listeners) l->close();
  });
  // 2. The notice, to every live session.
  proto::Draining notice;
  notice.timeout_ms = static_cast<uint32_t>(timeout.count());
  notice.message = "server draining: " + self_name() +
                   " is shutting down (SIGTERM); this session's tensors are lost with it: "
                   "resume from a checkpoint on another server";
  std::vector<std::shared_ptr<server::Connection>> live;
  {
    std::lock_guard<std::mutex> lock(sessions_mu);
    for (auto& [id, w] : sessions)
      if (auto c = w.lock()) live.push_back(std::move(c));
  }
  for (auto& c : live) c->notify_draining(notice);
  live.clear();
  // 3. The work already received runs, within the bound.
  while (batches_in_flight.load() > 0) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  do_stop();
  return true;
}

bool Server::drain(std::chrono::milliseconds timeout) { return impl_->do_drain(timeout); }

}  // namespace tw
