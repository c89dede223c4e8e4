// Deduplicated uploads (protocol 9): the server keeps the bytes of recent large uploads by their
// content hash (XXH3-128), so that a client uploading the same bytes again (the same weights or
// data set, on the same connection or after a reconnect) sends a hash instead
// (protocol::UploadByHashTask). Server-wide: every session of the server shares it. Uploaded
// tensors' bytes are kept by reference (no copy); an entry pins its bytes until evicted (least
// recently used first); the capacity (TW_DEDUP_CACHE_BYTES) bounds what entries hold that no
// tensor does, which --max-memory does not count. A tensor made from an entry is charged to its
// session's quota (and the server's budget) like an upload.
// Trust: XXH3 is not a cryptographic hash; clients of one server share its cache, so run with
// TW_DEDUP_CACHE_BYTES=0 where sessions do not trust each other (docs/remote.md).
#pragma once
#include <cstdint>
#include <list>
#include <mutex>
#include <unordered_map>

#include "core/buffer.h"
#include "protocol/content_hash.h"
#include "server/store.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw::server {

using protocol::ContentHash;

class ContentCache {
 public:
  // Uploads smaller than this are not kept: a round trip costs more than their bytes.
  static constexpr uint64_t kMinBytes = uint64_t{4} << 20;
  // TW_DEDUP_CACHE_BYTES (server's environment) or 2 GiB: the bytes entries may hold.
  ContentCache();
  // Keeps `bytes` (an upload's, at least kMinBytes, or of any size when `asked`: the upload that
  // followed an UploadByHash this server missed, which says the client wants it kept) under its
  // hash, evicting older entries past the capacity. Thread-safe, as is find().
  void remember(const Buffer& bytes, bool asked = false);
  // The bytes held under `h` when they are `size` long; an empty Buffer when none.
  Buffer find(const ContentHash& h, uint64_t size);
  uint64_t capacity() const { return capacity_; }
  // The persistent store behind the cache (tensorwire-server --store, store.h): remember()
  // writes there too, and find() looks there after memory. Set before the first session opens.
  void set_store(std::unique_ptr<DiskStore> store) { store_ = std::move(store); }
  DiskStore* store() const { return store_.get(); }

 private:
  void keep_locked(const ContentHash& h, const Buffer& bytes);
  struct HashOf {
    size_t operator()(const ContentHash& h) const { return static_cast<size_t>(h.lo ^ h.hi); }
  };
  struct Entry {
    ContentHash hash;
    Buffer bytes;
  };
  std::mutex mu_;
  uint64_t capacity_;
  uint64_t held_ = 0;
  std::list<Entry> lru_;  // front: most recently used
  std::unordered_map<ContentHash, std::list<Entry>::iterator, HashOf> index_;
  std::unique_ptr<DiskStore> store_;
};

}  // namespace tw::server
TW_INTERNAL_END
