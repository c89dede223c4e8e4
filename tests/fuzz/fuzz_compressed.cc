// decompress (src/protocol/compress.h): a Compressed frame (protocol 9) from a client, which the
// server unwraps before anything else looks at it; its announced length is checked against the
// limit before allocating.
#include "fuzz_util.h"
#include "protocol/compress.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const tw::Buffer payload = tw::Buffer::copy_of(data, size);
  (void)tw::protocol::decompress(payload, 1 << 20);
  return 0;
}
