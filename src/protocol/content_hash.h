// The content hash of a deduplicated upload (protocol 9, UploadByHashTask), computed by the client
// to name the bytes and by the server to keep them (server/dedup.h). Up to kChunkBytes: XXH3-128
// of the bytes. Longer: the bytes are cut into kChunkBytes chunks (the last may be shorter), each
// chunk hashed with XXH3-128 (in parallel, on the intra-op pool), and the result is XXH3-128 of
// the chunk digests in order (each as u64 low, u64 high, little-endian) followed by the total
// length (u64, little-endian). The chunking is fixed, so the hash does not depend on the number
// of threads. docs/protocol.md §8.12 states the same.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw::protocol {

struct ContentHash {
  uint64_t lo = 0, hi = 0;
  bool operator==(const ContentHash&) const = default;
};
inline constexpr size_t kContentHashChunkBytes = size_t{4} << 20;
ContentHash content_hash(const void* data, size_t n);
// XXH3-128 of the bytes, whole (content_hash's per-chunk hash): with AVX2 where the CPU has it.
ContentHash xxh3_128(const void* data, size_t n);

// content_hash of bytes given in pieces, in order, of any sizes: the same digest as content_hash
// of them all at once (on the calling thread alone). Checkpoints hash their data files with it
// while writing them.
class ContentHasher {
 public:
  ContentHasher();
  ~ContentHasher();
  ContentHasher(const ContentHasher&) = delete;
  ContentHasher& operator=(const ContentHasher&) = delete;
  void update(const void* data, size_t n);
  ContentHash digest() const;  // of everything given so far; update may go on after

 private:
  struct Chunk;  // XXH3-128's streaming state of the chunk being hashed
  std::unique_ptr<Chunk> chunk_;
  size_t in_chunk_ = 0;  // bytes of the current chunk given so far
  uint64_t total_ = 0;
  std::vector<uint8_t> digests_;  // the finished chunks' digests, as content_hash lays them out
};

}  // namespace tw::protocol
TW_INTERNAL_END
