// A connection's part in resumable sessions (server/resume.h, docs/protocol.md §8.13): the token
// a new session's Welcome carries, the numbering of the frames received (Acks apart), parking
// the session when the connection ends, and taking a parked session up again on a new connection
// (its replies not yet acknowledged sent again first).
#include <utility>

#include "server/connection.h"

namespace tw::server {

namespace proto = protocol;

void Connection::make_resumable(proto::Welcome& w, const std::string& credential) {
  if (!srv_.resume || version_ < proto::kResumeSince) return;
  Result<std::string> token = new_session_token();
  if (!token.ok()) return;  // (a session that cannot be resumed; the client is told none)
  resume_pending_ = std::make_shared<ResumeState>(*token, credential, device_);
  w.session.token = *token;
  w.session.received = 0;
}

void Connection::start_resumable() {
  if (!resume_pending_) return;
  srv_.resume->add(resume_pending_, [weak = weak_from_this()] {
    if (auto c = weak.lock()) c->close();
  });
  std::lock_guard<std::mutex> lock(write_mu_);
  resume_ = std::move(resume_pending_);
}

bool Connection::count_frame(const Buffer& frame) {
  if (frame.as<const uint8_t>()[0] == static_cast<uint8_t>(proto::ClientMsg::kAck)) {
    Result<proto::Ack> ack = proto::decode_ack(frame);
    if (!ack.ok()) {
      send_error(ack.status());
    } else if (resume_) {
      resume_->ack(ack->acked, ack->flags);
    }
    return true;
  }
  if (resume_) ++resume_->received;
  return false;
}

bool Connection::park_session() {
  if (!resume_ || !session_ || !srv_.resume || srv_.stopping) return false;
  session_ = srv_.resume->park({resume_, id_, std::move(session_)});
  return !session_;
}

void Connection::resume_session(const proto::Hello& h, proto::Welcome w, uint16_t version) {
  if (!srv_.resume || version < proto::kResumeSince) {
    return refuse(proto::RefuseReason::kCannotResume,
                  "server " + srv_.server_id +
                      " keeps no sessions for resuming (tensorwire-server --resume-grace 0)");
  }
  if (!has_slot_) {
    return refuse(proto::RefuseReason::kServerBusy,
                  "server has reached its limit of " + std::to_string(srv_.opts.max_sessions) +
                      " sessions (tensorwire-server --max-sessions); try again later");
  }
  ResumeRegistry* reg = srv_.resume.get();
  const uint64_t acked = h.resume.acked;
  // Called at once with a parked session, or once the old connection (closed now) has ended.
  srv_.resume->resume(
      h.resume.token, h.credential,
      [weak = weak_from_this(), reg, acked, w, version](Result<ParkedSession> got) -> bool {
        auto self = weak.lock();
        if (!self) {
          if (got.ok()) reg->park(std::move(got).value());  // (destroyed if it cannot be parked)
          return false;
        }
        auto held = std::make_shared<Result<ParkedSession>>(std::move(got));
        asio::post(self->shard_.io, [self, held, acked, w, version]() mutable {
          self->adopt(std::move(*held), acked, std::move(w), version);
        });
        return true;
      });
}

void Connection::adopt(Result<ParkedSession> got, uint64_t acked, proto::Welcome w,
                       uint16_t version) {
  if (!got.ok()) return refuse(proto::RefuseReason::kCannotResume, got.status().message());
  ParkedSession p = std::move(got).value();
  if (closed_ || closing_ || srv_.stopping) {
    p.session = srv_.resume->park(std::move(p));
    return;  // (a session that could not be parked again goes with p)
  }
  Result<std::deque<OutFrame>> replay = p.state->since(acked);
  if (!replay.ok()) {
    if (srv_.collectives) srv_.collectives->forget(p.id);
    return refuse(proto::RefuseReason::kCannotResume, replay.status().message());
  }
  {
    std::lock_guard<std::mutex> lock(srv_.sessions_mu);
    id_ = p.id;
    srv_.sessions[id_] = weak_from_this();
    session_ = std::move(p.session);
    device_ = p.state->device;
    compress_replies_.store(session_->compress_replies());  // (protocol 10)
  }
  welcomed_ = true;
  version_ = version;
  handshake_timer_.cancel();
  // What the session's last connection had received and not run runs first (issue 52: nothing
  // ran while it was parked).
  std::deque<Batch> stashed = session_->take_queue();
  bool run_stashed = false;
  if (!stashed.empty()) {
    std::lock_guard<std::mutex> lock(exec_mu_);
    for (Batch& b : stashed) {
      exec_q_.push_back(std::move(b));
      ++queued_;
      srv_.batches_in_flight.fetch_add(1);
    }
    if (!executing_) run_stashed = executing_ = true;
  }
  w.session_id = id_;
  w.device_index = device_;
  w.session.token = p.state->token;
  w.session.received = p.state->received;
  proto::OutFrame f;
  proto::encode_welcome(w, f);
  send(std::move(f));
  srv_.resume->add(p.state, [weak = weak_from_this()] {
    if (auto c = weak.lock()) c->close();
  });
  std::lock_guard<std::mutex> lock(write_mu_);
  for (OutFrame& r : *replay) {
    srv_.frames_out.fetch_add(1, std::memory_order_relaxed);
    srv_.bytes_out.fetch_add(r.payload_size() + 4, std::memory_order_relaxed);
    writer_.push(std::move(r));
  }
  resume_ = std::move(p.state);
  if (!closed_ && !writer_.writing()) pump_locked();
  if (run_stashed) asio::post(shard_.io, [self = shared_from_this()] { self->drain(); });
}

}  // namespace tw::server
