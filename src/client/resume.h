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

// The blocking handshake on a fresh stream (connection.cc): a Hello for `device_index`, or, with
// `resume`, one that asks to resume that session (device index kResumeSession).
Result<protocol::Welcome> handshake(net::Stream& sock, const net::Url& url, uint32_t device_index,
                                    const std::string& credential,
                                    const protocol::Hello::Resume* resume = nullptr);

struct ResumeWindow {
  std::string token;  // the Welcome's; empty: the session is not resumable
  // Frames sent on the session (batches, attaches; not Acks), numbered from 1 across connections.
  uint64_t next_seq = 1;
  struct Sent {
    uint64_t seq = 0;
    OutFrame frame;             // a copy, as written
    uint64_t last_request = 0;  // the highest request id sent in this frame or before it
    // An AttachSegment's segment, kept alive so that a resume passes its descriptor again.
    std::shared_ptr<net::SharedSegment> segment;
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
  // The server had received `received` frames of the session: the ones after it, to re-send.
  Result<std::vector<Sent>> after(uint64_t received);
};

}  // namespace tw::client
TW_INTERNAL_END
