// A server::SessionOutput for tests that drive a Session without a socket: every reply decoded
// as the client would (a reply that does not decode fails the test), and the server figures a
// stats task reports (`stats`, set by the test), with who asked.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "protocol/messages.h"
#include "server/session.h"
#include "support/frames.h"

namespace tw::testing {

struct Replies : server::SessionOutput {
  std::vector<protocol::ServerMessage> got;
  std::vector<uint64_t> stats_asked_by;
  protocol::ServerStats stats;
  void reply(protocol::OutFrame f) override {
    std::vector<uint8_t> bytes = flatten(f);
    auto m = protocol::decode_server_message(Buffer::copy_of(bytes.data(), bytes.size()));
    ASSERT_TRUE(m.ok()) << m.status().message();
    got.push_back(std::move(m).value());
  }
  protocol::ServerStats server_stats(uint64_t asking) override {
    stats_asked_by.push_back(asking);
    return stats;
  }
};

}  // namespace tw::testing
