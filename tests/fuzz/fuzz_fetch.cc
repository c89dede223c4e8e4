// decode_fetch (src/protocol/messages.h): what another server sends on a peer connection after
// its Hello (protocol 3), before any capability is checked.
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tw::protocol;
  tw::Result<Fetch> r = decode_fetch(tw::Buffer::copy_of(data, size));
  if (!r.ok()) return 0;
  OutFrame f;
  encode_fetch(*r, f);
  tw::fuzz::check_round_trip(f, data, size, "fetch re-encodes differently");
  return 0;
}
