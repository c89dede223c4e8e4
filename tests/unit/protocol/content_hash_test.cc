// The content hash of deduplicated uploads (protocol/content_hash.h): XXH3-128 up to one chunk,
// the documented digest-of-chunk-digests construction above, whatever the threads.
#include "protocol/content_hash.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace tw::protocol {
namespace {

std::vector<uint8_t> random_bytes(size_t n) {
  std::vector<uint8_t> v(n);
  std::mt19937_64 rng(3);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

ContentHash reference(const std::vector<uint8_t>& v) {
  if (v.size() <= kContentHashChunkBytes) {
    XXH128_hash_t h = XXH3_128bits(v.data(), v.size());
    return {h.low64, h.high64};
  }
  std::vector<uint8_t> digests;
  auto put = [&](uint64_t x) {
    for (int i = 0; i < 8; ++i) digests.push_back(static_cast<uint8_t>(x >> (8 * i)));
  };
  for (size_t at = 0; at < v.size(); at += kContentHashChunkBytes) {
    XXH128_hash_t h = XXH3_128bits(v.data() + at, std::min(kContentHashChunkBytes, v.size() - at));
    put(h.low64);
    put(h.high64);
  }
  put(v.size());
  XXH128_hash_t h = XXH3_128bits(digests.data(), digests.size());
  return {h.low64, h.high64};
}

TEST(ContentHash, MatchesTheDocumentedConstruction) {
  for (size_t n : {size_t{0}, size_t{1000}, kContentHashChunkBytes, kContentHashChunkBytes + 1,
                   3 * kContentHashChunkBytes, (size_t{20} << 20) + 77}) {
    const std::vector<uint8_t> v = random_bytes(n);
    EXPECT_EQ(content_hash(v.data(), v.size()), reference(v)) << n << " bytes";
  }
}

TEST(ContentHash, OneByteChangedChangesIt) {
  std::vector<uint8_t> v = random_bytes((size_t{17} << 20) + 5);
  const ContentHash a = content_hash(v.data(), v.size());
  v[v.size() - 1] ^= 1;
  EXPECT_NE(content_hash(v.data(), v.size()), a);
  const ContentHash shorter = content_hash(v.data(), v.size() - 1);
  EXPECT_NE(shorter, a);
}

// ContentHasher fed in pieces gives content_hash's digest, whatever the pieces' sizes and
// wherever the chunk boundaries fall (0, below, at and past one chunk and several).
TEST(ContentHasher, PiecesOfAnySizeGiveTheWholeHash) {
  const size_t c = kContentHashChunkBytes;
  for (size_t n : {size_t{0}, size_t{1}, size_t{4095}, c - 1, c, c + 1, 2 * c, 3 * c + 777}) {
    const std::vector<uint8_t> v = random_bytes(n);
    for (size_t piece : {size_t{1} << 18, size_t{1000003}, c, n + 1}) {
      if (piece == 0) continue;
      ContentHasher h;
      for (size_t at = 0; at < n; at += piece) h.update(v.data() + at, std::min(piece, n - at));
      EXPECT_EQ(h.digest(), reference(v)) << n << " bytes in pieces of " << piece;
      EXPECT_EQ(h.digest(), content_hash(v.data(), v.size())) << n;
    }
  }
  ContentHasher h;  // a digest midway does not disturb what follows
  const std::vector<uint8_t> v = random_bytes(c + 5);
  h.update(v.data(), c);
  (void)h.digest();
  h.update(v.data() + c, 5);
  EXPECT_EQ(h.digest(), reference(v));
}

}  // namespace
}  // namespace tw::protocol
