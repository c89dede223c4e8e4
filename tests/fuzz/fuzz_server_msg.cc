// decode_server_message (src/protocol/messages.h): what a client decodes from a server, which
// may be anyone the user pointed it at (welcome, refuse, read/sync/stats/graph/capability
// results, errors).
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tw::protocol;
  tw::Result<ServerMessage> r = decode_server_message(tw::Buffer::copy_of(data, size));
  if (!r.ok()) return 0;
  const ServerMessage& m = *r;
  OutFrame f;
  switch (m.kind) {
    case ServerMsg::kWelcome: encode_welcome(m.welcome, f); break;
    case ServerMsg::kRefuse: encode_refuse(m.refuse, f); break;
    case ServerMsg::kReadResult:
      if (m.status.ok()) {
        encode_read_result(m.request_id, m.data, f);
      } else {
        encode_read_result(m.request_id, m.status, f);
      }
      break;
    case ServerMsg::kSyncResult: encode_sync_result(m.request_id, m.status, f); break;
    case ServerMsg::kStatsResult: encode_stats_result(m.request_id, m.stats, f); break;
    case ServerMsg::kSessionError: encode_session_error(m.status, f); break;
    case ServerMsg::kGraphResult:
      if (m.status.ok()) {
        encode_graph_result(m.request_id, m.graph_id, f);
      } else {
        encode_graph_result(m.request_id, m.status, f);
      }
      break;
    case ServerMsg::kCapabilityResult:
      if (m.status.ok()) {
        encode_capability_result(m.request_id, m.exported, f);
      } else {
        encode_capability_result(m.request_id, m.status, f);
      }
      break;
    case ServerMsg::kReadResultInSegment:
      encode_read_result_in_segment(m.request_id, m.data.meta, f);
      break;
    default: tw::fuzz::fail("decode_server_message accepted an unknown message type");
  }
  (void)refuse_reason_name(m.refuse.reason);
  tw::fuzz::check_round_trip(f, data, size, "server message re-encodes differently");
  return 0;
}
