// The client's side of resumable sessions (protocol 9, issue 35; docs/protocol.md §8.13): the
// session token, the numbering of the frames sent, and the window of those the server has not
// yet shown it executed, which a resume re-sends from the first one the server had not received.
// The connection's part (client/resume.cc: reconnecting with backoff, the replay) is in
// Connection itself; this is its bookkeeping.
#pragma once
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/wire.h"
#include "net/shm.h"
#include "net/stream.h"
#include "net/url.h"
#include "protocol/messages.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw::client {

struct Options;  // connection.h

// The blocking handshake on a fresh stream (connection.cc): a Hello for `device_index`, or, with
// `resume`, one that asks to resume that session (device index kResumeSession). It sends
// options.credential and gives up once options.handshake_timeout_ms pass without the reply.
Result<protocol::Welcome> handshake(net::Stream& sock, const net::Url& url, uint32_t device_index,
                                    const Options& options,
                                    const protocol::Hello::Resume* resume = nullptr);

// Where the window keeps the head bytes of the frames it holds. Fresh heap memory for every copy
// costs page faults (the copies stay alive, so the allocator cannot hand back memory just freed):
// on this project's virtual machines a stream of fire-and-forget ops took 25% more client CPU
// (bench/results/chaos.md). The arena copies into chunks of kChunkBytes that are recycled: frames
// are put and released in order (the window is FIFO), so a chunk is free once its last frame is
// released, and goes to a process-wide pool (at most kPoolBytes) that every connection's window
// takes from, so a program's steady state touches no new pages.
class FrameArena {
 public:
  static constexpr size_t kChunkBytes = size_t{1} << 20;
  static constexpr size_t kPoolBytes = size_t{16} << 20;
  struct Chunk {
    uint8_t* base = nullptr;
    size_t size = 0, used = 0, live = 0;  // bytes mapped, bytes handed out, frames not released
  };
  FrameArena() = default;
  FrameArena(const FrameArena&) = delete;
  FrameArena& operator=(const FrameArena&) = delete;
  ~FrameArena();
  // A copy of `n` bytes and the chunk holding it, or {nullptr, nullptr} when memory cannot be
  // mapped (the caller keeps its own copy then).
  std::pair<uint8_t*, Chunk*> put(const uint8_t* data, size_t n);
  void release(Chunk* c);

 private:
  std::deque<Chunk> chunks_;  // back: being filled; a deque keeps elements in place
};

struct ResumeWindow {
  std::string token;  // the Welcome's; empty: the session is not resumable
  // Frames sent on the session (batches, attaches; not Acks), numbered from 1 across connections.
  uint64_t next_seq = 1;
  struct Sent {
    uint64_t seq = 0;
    // A copy, as written: the head in `arena` (frame.head empty) or, failing that, in frame.head;
    // the segments (tensor payloads) shared.
    OutFrame frame;
    const uint8_t* head = nullptr;
    size_t head_bytes = 0;
    FrameArena::Chunk* chunk = nullptr;
    uint64_t bytes = 0;         // payload bytes
    uint64_t last_request = 0;  // the highest request id sent in this frame or before it
    // An AttachSegment's segment, kept alive so that a resume passes its descriptor again.
    std::shared_ptr<net::SharedSegment> segment;
    OutFrame copy() const;  // the frame as written
  };
  std::deque<Sent> sent;
  uint64_t bytes = 0;           // of the frames in `sent`
  uint64_t let_go_through = 0;  // frames let go unacknowledged (over the bound): not resumable
  uint64_t max_bytes = uint64_t{64} << 20;
  // Reply frames received since the session's first Welcome (the server numbers them alike);
  // counted by the reader of the moment.
  std::atomic<uint64_t> received{0};
  uint64_t acked = 0, acked_bytes_in = 0;             // what the last Ack said, and bytes_in then
  std::vector<std::unique_ptr<net::Stream>> retired;  // dropped streams, kept until close

  void on_sent(const OutFrame& f, uint64_t last_request,
               std::shared_ptr<net::SharedSegment> segment);
  // The reply to `request` came: the frames up to the one that carried it have run.
  void on_reply(uint64_t request);
  // The server had received `received` frames of the session: the ones after it, to re-send
  // (copies), and the ones up to it let go.
  Result<std::vector<Sent>> after(uint64_t received);
  void drop_through(uint64_t seq);

 private:
  void pop_front();
  FrameArena arena_;
};

}  // namespace tw::client
TW_INTERNAL_END
