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
void xxh3_128_update_avx2(void* state, const void* data, size_t n);
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

struct ContentHasher::Chunk {
  XXH3_state_t state;
  void reset() { XXH3_128bits_reset(&state); }
  void update(const void* data, size_t n) {
#if defined(__x86_64__) && defined(__GNUC__)
    static const bool avx2 = __builtin_cpu_supports("avx2");
    if (avx2) return xxh3_128_update_avx2(&state, data, n);
#endif
    XXH3_128bits_update(&state, data, n);
  }
  ContentHash digest() const {
    const XXH128_hash_t h = XXH3_128bits_digest(&state);
    return {h.low64, h.high64};
  }
};

ContentHasher::ContentHasher() : chunk_(std::make_unique<Chunk>()) { chunk_->reset(); }
ContentHasher::~ContentHasher() = default;

void ContentHasher::update(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    if (in_chunk_ == kContentHashChunkBytes) {  // the chunk is whole and more bytes follow
      const ContentHash h = chunk_->digest();
      digests_.resize(digests_.size() + 16);
      put_u64(digests_.data() + digests_.size() - 16, h.lo);
      put_u64(digests_.data() + digests_.size() - 8, h.hi);
      chunk_->reset();
      in_chunk_ = 0;
    }
    const size_t take = std::min(n, kContentHashChunkBytes - in_chunk_);
    chunk_->update(p, take);
    in_chunk_ += take;
    total_ += take;
    p += take;
    n -= take;
  }
}

ContentHash ContentHasher::digest() const {
  const ContentHash last = chunk_->digest();
  if (digests_.empty()) return last;  // one chunk or less: XXH3-128 of the bytes
  std::vector<uint8_t> all(digests_.size() + 24);
  std::copy(digests_.begin(), digests_.end(), all.begin());
  put_u64(all.data() + digests_.size(), last.lo);
  put_u64(all.data() + digests_.size() + 8, last.hi);
  put_u64(all.data() + digests_.size() + 16, total_);
  return xxh3_128(all.data(), all.size());
}

}  // namespace tw::protocol
