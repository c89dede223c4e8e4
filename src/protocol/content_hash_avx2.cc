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

// ContentHasher's streaming update; `state` is an XXH3_state_t (the same header, so the same
// layout as content_hash.cc's).
void xxh3_128_update_avx2(void* state, const void* data, size_t n) {
  XXH3_128bits_update(static_cast<XXH3_state_t*>(state), data, n);
}

}  // namespace tw::protocol
#endif
