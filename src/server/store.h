// The persistent weight store (tensorwire-server --store DIR): the deduplicated uploads'
// bytes (dedup.h) kept on disk by their content hash, so that a client re-uploading the same
// weights after the server restarted sends their hash only (protocol 9's UploadByHash).
//  - Scoped by credential: entries live in DIR/<first 32 hex digits of SHA-256 of the
//    server's credential>, so a server started with another credential (or none) on the same
//    DIR never serves them.
//  - Crash-safe: an entry is written to a temporary file, fsynced, renamed to its name and the
//    directory fsynced; a crash leaves a temporary file (removed at the next open) or nothing,
//    never a partial entry under an entry's name.
//  - Verified: every load hashes the bytes read and compares them with the name; a mismatch
//    (a disk error, a file edited) deletes the entry and misses, so the client sends the bytes.
//  - Bounded: at most `capacity` bytes, least recently used first out (a load or a store
//    touches the file's modification time, which orders the entries found at open).
#pragma once
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "core/buffer.h"
#include "core/status.h"
#include "protocol/content_hash.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw::server {

class DiskStore {
 public:
  // Opens (creating) the store for `credential` under `dir`: lists its entries, removes
  // temporary files a crash left, evicts past `capacity`.
  static Result<std::unique_ptr<DiskStore>> open(const std::string& dir, uint64_t capacity,
                                                 const std::string& credential);
  // Writes the bytes under their hash unless held already (then touches them). Errors (a full
  // disk) leave the store as it was; the upload itself succeeded, so they are only returned.
  Status put(const protocol::ContentHash& h, const Buffer& bytes);
  // The bytes under `h` when they are `size` long and still hash to `h`; an empty Buffer when
  // none (a corrupt entry is deleted).
  Buffer get(const protocol::ContentHash& h, uint64_t size);
  uint64_t held() const;
  size_t entries() const;
  const std::string& path() const { return path_; }
  // The file name of an entry: 32 hex digits of the hash, '-', the size in bytes.
  static std::string name_of(const protocol::ContentHash& h, uint64_t size);

 private:
  DiskStore(std::string path, uint64_t capacity) : path_(std::move(path)), capacity_(capacity) {}
  void evict_locked(uint64_t room);
  void touch_locked(const std::string& path);
  struct Entry {
    std::string name;
    uint64_t size;
  };
  std::string path_;
  uint64_t capacity_;
  mutable std::mutex mu_;
  uint64_t held_ = 0;
  std::list<Entry> lru_;  // front: most recently used
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  uint64_t tmp_seq_ = 0;
  int64_t last_touch_ns_ = 0;  // the latest file time this store set
};

}  // namespace tw::server
TW_INTERNAL_END
