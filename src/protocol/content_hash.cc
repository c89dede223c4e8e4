#include "protocol/content_hash.h"

// Inlined from the header: Debian's libxxhash-dev, no library to link.
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace tw::protocol {

ContentHash content_hash(const void* data, size_t n) {
  XXH128_hash_t h = XXH3_128bits(data, n);
  return {h.low64, h.high64};
}

}  // namespace tw::protocol
