// One client's connection to the server (server.cc says how connections, shards and sessions
// fit together). Its code is in two files: connection.cc (closing, reading frames, the
// execution queue, writing replies) and handshake.cc (the Hello and what it may be refused for,
// and the peer connections of other servers).
#pragma once
#include <array>
#include <asio.hpp>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "net/framing.h"
#include "net/stream.h"
#include "protocol/messages.h"
#include "server/resume.h"
#include "server/server_impl.h"
#include "server/session.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw::server {

// Reads its frames, shakes hands, queues its batches for its Session and writes the replies.
// Replies are written by whichever thread runs the session while another may be reading (a
// stream allows one reader and one writer at a time).
class Connection : public std::enable_shared_from_this<Connection>, private SessionOutput {
 public:
  Connection(Server::Impl& srv, Server::Impl::Shard& shard, std::unique_ptr<net::Stream> stream);
  ~Connection() override;

  void start();
  uint64_t id() const { return id_; }
  // Call with srv_.sessions_mu held (the session is set under it).
  uint64_t held() const { return session_ ? session_->held() : 0; }
  // Call with srv_.sessions_mu held.
  SessionView view() const {
    return {id_, device_, held(), session_ ? session_->ops() : 0,
            queued_.load(std::memory_order_relaxed)};
  }
  void close_when_flushed();
  // Tells the client the server is draining (drain.cc), when its protocol has the message.
  void notify_draining(const protocol::Draining& notice);

 private:
  // ---- closing (connection.cc) ----
  void shutdown_locked();
  void linger_locked();
  void discard_more();
  void give_slot_back();
  void close();

  // ---- reading and the execution queue (connection.cc) ----
  struct Queued {
    bool run_here = false;  // this thread is to run the session's queue
    bool paused = false;    // the queue is full: reading stops until drain() resumes it
  };
  void read_more();
  bool read_directly();
  void process(bool run_here = false);
  Status reserve_frame();
  Queued on_frame(Buffer frame);
  Status decompress_frame(Buffer& frame);  // a Compressed frame (protocol 9) in place
  void attach_segment(const Buffer& frame, Batch& batch);
  void drain();
  void yield();

  // ---- the handshake and peer connections (handshake.cc) ----
  void refuse(protocol::RefuseReason reason, const std::string& message);
  void on_hello(const Buffer& frame);
  void welcome_peer(protocol::Welcome& w);
  // `parked`: served again after CapabilityTable::park woke it (it is not parked twice).
  void on_fetch(const Buffer& frame, bool parked = false);
  void sweep_parked(std::shared_ptr<asio::steady_timer> timer);

  // ---- resumable sessions (resume_connection.cc; server/resume.h) ----
  // A new session's token, in `w` (protocol 9, a server with --resume-grace).
  void make_resumable(protocol::Welcome& w, const std::string& credential);
  // After the Welcome of a new or resumed session went out.
  void start_resumable();
  void resume_session(const protocol::Hello& h, protocol::Welcome w, uint16_t version);
  void adopt(Result<ParkedSession> got, uint64_t acked, protocol::Welcome w, uint16_t version);
  // An Ack or a numbered frame; true when the frame was an Ack (handled).
  bool count_frame(const Buffer& frame);
  // At the end: the session parked for a resume, or (false) to be destroyed.
  bool park_session();

  // ---- SessionOutput, called by session_->run() on the draining thread (connection.cc) ----
  Status begin_collective(const protocol::CollectiveTask& t, TensorData input) override;
  void reply(protocol::OutFrame f) override;
  Status begin_import(const protocol::ImportTask& t) override;
  protocol::ServerStats server_stats(uint64_t asking) override;
  uint16_t protocol_version() const override { return version_; }
  bool runs_long() const override { return srv_.long_work != nullptr; }
  void run_long(std::function<void()> work) override;
  void compress_replies(bool on) override { compress_replies_.store(on); }

  // ---- writing: from any thread, under write_mu_ (connection.cc) ----
  void send_error(const Status& s);
  void send(protocol::OutFrame f);
  void pump_locked();

  Server::Impl& srv_;
  Server::Impl::Shard& shard_;
  std::unique_ptr<net::Stream> stream_;
  uint64_t id_ = 0;
  uint32_t device_ = 0;
  uint16_t version_ = 0;  // the protocol version the handshake settled on
  // The client asked for compressed replies (protocol 10; send() says when they go compressed).
  std::atomic<bool> compress_replies_{false};
  std::unique_ptr<Session> session_;  // set by the handshake; run by the draining thread
  std::atomic<bool> closed_{false};
  // Set when the connection closes and its session will not be parked for a resume: its long
  // work under way stops at the kernel's next look (core/cancel.h).
  std::atomic<bool> cancel_{false};
  std::atomic<bool> closing_{false};               // to close once the replies queued are out
  std::atomic<bool> has_slot_{false};              // holds one of srv_.slots_taken
  asio::steady_timer handshake_timer_{shard_.io};  // drops a peer that never completes Hello
  // reading (one read at a time)
  // Small: an idle session holds it, and larger frames are read straight into their own buffer.
  static constexpr uint64_t kStagingBytes = 8 * 1024;
  net::FrameReader reader_{kStagingBytes};
  uint64_t frame_reserved_ = 0;  // reserve_frame() for the frame being read, until on_frame()
  bool reading_ = false;         // a receive is outstanding
  // read_directly() is polling the stream, and process() asked it for more.
  bool in_direct_read_ = false, direct_again_ = false;
  // lingering close (linger_locked)
  static constexpr auto kLinger = std::chrono::seconds(1);
  static constexpr uint64_t kLingerBytes = uint64_t{1} << 30;
  bool linger_ = false;                 // close_when_flushed() lingers (under write_mu_)
  std::atomic<bool> lingering_{false};  // the sending side is shut; what arrives is dropped
  uint64_t lingered_ = 0;               // bytes dropped so far
  std::unique_ptr<std::array<std::byte, 4096>> discard_;  // where they go (only once lingering)
  bool welcomed_ = false;
  bool peer_ = false;  // another server's connection: fetches, no session
  // execution queue
  std::mutex exec_mu_;
  // A session's turn on its shard: long beside what a yield costs (two posts, a few
  // microseconds), so a session streaming small ops loses nothing measurable; short beside a
  // heavy op, so another session waits little more than the op under way.
  static constexpr auto kSlice = std::chrono::milliseconds(1);
  std::deque<Batch> exec_q_;
  std::vector<protocol::Task> spare_tasks_;  // the last batch's task vector, kept for its capacity
  bool executing_ = false;
  bool read_paused_ = false;
  // Batches received and not finished; atomic only so that a metrics scrape can read it.
  std::atomic<uint32_t> queued_{0};
  // writing
  std::mutex write_mu_;
  net::FrameWriter writer_;
  bool close_after_write_ = false;
  // A resumable session's numbering and reply log (server/resume.h); set after its Welcome.
  std::shared_ptr<ResumeState> resume_;
  std::shared_ptr<ResumeState> resume_pending_;  // made with the Welcome, set once it is out
};

}  // namespace tw::server
TW_INTERNAL_END
