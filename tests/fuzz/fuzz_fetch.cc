// What another server sends on a peer connection after its Hello (protocol 3), before anything
// is checked: decode_fetch, decode_fetch_bound, decode_fetch_done, decode_fetch_from (a pull) or
// decode_store_request (a collective's rendezvous), as the server dispatches them by message type
// (src/server/server.cc); and the StoreResult a participant reads back (decode_store_reply). A
// message that decodes re-encodes to its bytes.
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tw::protocol;
  const tw::Buffer payload = tw::Buffer::copy_of(data, size);
  using tw::fuzz::check_round_trip;
  check_round_trip(decode_fetch(payload), encode_fetch, data, size, "fetch re-encodes differently");
  check_round_trip(decode_fetch_bound(payload), encode_fetch_bound, data, size,
                   "fetch-bound re-encodes differently");
  check_round_trip(decode_fetch_done(payload), encode_fetch_done, data, size,
                   "fetch-done re-encodes differently");
  check_round_trip(decode_fetch_from(payload), encode_fetch_from, data, size,
                   "fetch-from re-encodes differently");
  check_round_trip(decode_store_request(payload), encode_store_request, data, size,
                   "store request re-encodes differently");
  check_round_trip(decode_store_reply(payload), encode_store_reply, data, size,
                   "store reply re-encodes differently");
  return 0;
}
