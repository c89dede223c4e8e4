#include "protocol/content_hash.h"

#include <algorithm>
#include <thread>
#include <vector>

// Inlined from the header: Debian's libxxhash-dev, no library to link.
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace tw::protocol {

#if defined(__x86_64__) && defined(__GNUC__)
// content_hash_avx2.cc, compiled with -mavx2 (the same digest, about 3x faster than SSE2 here).
ContentHash xxh3_128_avx2(const void* data, size_t n);
#endif

ContentHash xxh3_128(const void* data, size_t n) {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) return xxh3_128_avx2(data, n);
#endif
  XXH128_hash_t h = XXH3_128bits(data, n);
  return {h.low64, h.high64};
}

namespace {
// From here on a second thread hashes half the chunks (starting one costs ~50 us).
constexpr size_t kParallelBytes = size_t{16} << 20;
void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
}  // namespace

ContentHash content_hash(const void* data, size_t n) {
  if (n <= kContentHashChunkBytes) return xxh3_128(data, n);
  const size_t chunks = (n + kContentHashChunkBytes - 1) / kContentHashChunkBytes;
  std::vector<uint8_t> digests(chunks * 16 + 8);
  const auto* bytes = static_cast<const uint8_t*>(data);
  // Chunks first..chunks-1 in steps of `stride`: the caller takes the even ones, a helper thread
  // the odd ones (not the intra-op pool: its OpenMP threads took 9-21 ms for 64 MiB on the 2-core
  // VM, where one thread alone takes ~2 ms).
  auto hash_chunks = [&](size_t first, size_t stride) {
    for (size_t i = first; i < chunks; i += stride) {
      const size_t at = i * kContentHashChunkBytes;
      const ContentHash h = xxh3_128(bytes + at, std::min(kContentHashChunkBytes, n - at));
      put_u64(digests.data() + 16 * i, h.lo);
      put_u64(digests.data() + 16 * i + 8, h.hi);
    }
  };
  if (n >= kParallelBytes && std::thread::hardware_concurrency() > 1) {
    std::thread helper(hash_chunks, 1, 2);
    hash_chunks(0, 2);
    helper.join();
  } else {
    hash_chunks(0, 1);
  }
  put_u64(digests.data() + chunks * 16, n);
  return xxh3_128(digests.data(), digests.size());
}

}  // namespace tw::protocol
