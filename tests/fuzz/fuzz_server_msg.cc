// decode_server_message (src/protocol/messages.h): what a client decodes from a server, which
// may be anyone the user pointed it at (welcome, refuse, read/sync/stats/graph/capability
// results, errors, the drain notice).
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tw::protocol;
  tw::Result<ServerMessage> r = decode_server_message(tw::Buffer::copy_of(data, size));
  if (!r.ok()) return 0;
  const ServerMessage& m = *r;
  switch (m.kind) {
    case ServerMsg::kWelcome:
    case ServerMsg::kRefuse:
    case ServerMsg::kReadResult:
    case ServerMsg::kSyncResult:
    case ServerMsg::kStatsResult:
    case ServerMsg::kSessionError:
    case ServerMsg::kGraphResult:
    case ServerMsg::kCapabilityResult:
    case ServerMsg::kReadResultInSegment:
    case ServerMsg::kDraining: break;
    default: tw::fuzz::fail("decode_server_message accepted an unknown message type");
  }
  OutFrame f;
  encode_server_message(m, f);
  (void)refuse_reason_name(m.refuse.reason);
  tw::fuzz::check_round_trip(f, data, size, "server message re-encodes differently");
  return 0;
}
