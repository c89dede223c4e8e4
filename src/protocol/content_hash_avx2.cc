// XXH3-128 built for AVX2 (this file alone is compiled with -mavx2; content_hash.cc calls it only
// where the CPU has AVX2). The digest is the same as the SSE2 build's.
#include "protocol/content_hash.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace tw::protocol {

ContentHash xxh3_128_avx2(const void* data, size_t n) {
  XXH128_hash_t h = XXH3_128bits(data, n);
  return {h.low64, h.high64};
}

}  // namespace tw::protocol
#endif
