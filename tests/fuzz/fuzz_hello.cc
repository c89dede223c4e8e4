// decode_hello (src/protocol/messages.h): the first frame a stranger sends the server.
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tw::protocol;
  const tw::Buffer payload = tw::Buffer::copy_of(data, size);
  (void)peek_client_msg(payload);
  tw::Result<Hello> hello = decode_hello(payload);
  if (!hello.ok()) return 0;
  OutFrame f;
  encode_hello(*hello, f);
  tw::fuzz::check_round_trip(f, data, size, "hello re-encodes differently");
  return 0;
}
