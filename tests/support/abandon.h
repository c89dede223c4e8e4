// Issue 52 §1's hostile client, for tests/integration/op_cost_test.cc and bench/remote_bench.cc
// (row x): one small frame (Full [1, T, 4] f32; ScaledDotProductAttention with q = k = v of that
// tensor; Sync), O(T^2) work from O(T) bytes, sent on a fresh session whose connection is closed
// at once; and a raw session's view of the server's figures (a Stats request).
#pragma once
#include <stdexcept>
#include <string>
#include <vector>

#include "integration/raw_client.h"
#include "ir/ops.h"
#include "protocol/messages.h"
#include "protocol/tasks.h"

namespace tw::testing {

// The frame: tensor `base` = Full [1, t, 4], `base + 1` = attention of it with itself, a sync.
inline protocol::OutFrame attention_frame(int64_t t, ir::TensorId base = 1, uint64_t sync = 1) {
  protocol::BatchWriter b;
  b.add_op(ir::Full{.out = {base}, .shape = {1, t, 4}, .dtype = kF32, .value = 1.0});
  b.add_op(ir::ScaledDotProductAttention{.query = {base},
                                         .key = {base},
                                         .value = {base},
                                         .mask = {},
                                         .causal = false,
                                         .scale = 0.5,
                                         .out = {base + 1}});
  b.add_sync(sync);
  return b.take();
}

// Opens a session, sends `frames` (after an Ack that makes the session resumable when
// `resumable`: the server then parks it for --resume-grace when the connection drops) and closes
// the connection without reading a reply.
inline void send_and_go(const std::string& url, const std::vector<protocol::OutFrame>& frames,
                        bool resumable = false) {
  RawClient c(url, 30000);
  Result<protocol::ServerMessage> w = c.hello();
  if (!w.ok() || w->kind != protocol::ServerMsg::kWelcome) {
    throw std::runtime_error("the hostile client got no Welcome: " +
                             (w.ok() ? w->refuse.message : w.status().message()));
  }
  if (resumable) {
    protocol::OutFrame ack;
    protocol::encode_ack({0, protocol::kAckResumable}, ack);
    c.send_frame(ack);
  }
  for (const protocol::OutFrame& f : frames) c.send_frame(f);
}

// The server's figures as session `c` sees them (a raw session that shook hands).
inline protocol::ServerStats server_stats(RawClient& c, uint64_t request_id) {
  protocol::BatchWriter b;
  b.add_stats(request_id);
  if (!c.send_frame(b.take())) throw std::runtime_error("stats: send failed");
  Result<protocol::ServerMessage> m = c.read_message();
  if (!m.ok() || m->kind != protocol::ServerMsg::kStatsResult) {
    throw std::runtime_error("stats: no StatsResult: " +
                             (m.ok() ? m->status().message() : m.status().message()));
  }
  return m->stats.stats;
}

}  // namespace tw::testing
