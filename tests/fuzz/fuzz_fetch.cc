// What another server sends on a peer connection after its Hello (protocol 3), before anything
// is checked: decode_fetch, decode_fetch_bound, decode_fetch_done, decode_fetch_from (a pull) or
// decode_store_request (a collective's rendezvous), as the server dispatches them by message type
// (src/server/server.cc); and the StoreResult a participant reads back (decode_store_reply). A
// message that decodes re-encodes to its bytes.
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tw::protocol;
  const tw::Buffer payload = tw::Buffer::copy_of(data, size);
  if (tw::Result<Fetch> r = decode_fetch(payload); r.ok()) {
    OutFrame f;
    encode_fetch(*r, f);
    tw::fuzz::check_round_trip(f, data, size, "fetch re-encodes differently");
  }
  if (tw::Result<FetchBound> r = decode_fetch_bound(payload); r.ok()) {
    OutFrame f;
    encode_fetch_bound(*r, f);
    tw::fuzz::check_round_trip(f, data, size, "fetch-bound re-encodes differently");
  }
  if (tw::Result<FetchDone> r = decode_fetch_done(payload); r.ok()) {
    OutFrame f;
    encode_fetch_done(*r, f);
    tw::fuzz::check_round_trip(f, data, size, "fetch-done re-encodes differently");
  }
  if (tw::Result<FetchFrom> r = decode_fetch_from(payload); r.ok()) {
    OutFrame f;
    encode_fetch_from(*r, f);
    tw::fuzz::check_round_trip(f, data, size, "fetch-from re-encodes differently");
  }
  if (tw::Result<StoreRequest> r = decode_store_request(payload); r.ok()) {
    OutFrame f;
    encode_store_request(*r, f);
    tw::fuzz::check_round_trip(f, data, size, "store request re-encodes differently");
  }
  if (tw::Result<StoreReply> r = decode_store_reply(payload); r.ok()) {
    OutFrame f;
    encode_store_reply(*r, f);
    tw::fuzz::check_round_trip(f, data, size, "store reply re-encodes differently");
  }
  return 0;
}
