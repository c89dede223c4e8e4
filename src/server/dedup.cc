#include "server/dedup.h"

#include <cstdio>
#include <cstdlib>

#include "core/env.h"

namespace tw::server {

ContentCache::ContentCache() : capacity_(uint64_t{2} << 30) {
  if (auto n = env_number(Env::kDEDUP_CACHE_BYTES)) capacity_ = *n;
}

void ContentCache::remember(const Buffer& bytes, bool asked) {
  if ((bytes.size() < kMinBytes && !asked) || bytes.size() == 0 ||
      (bytes.size() > capacity_ && !store_))
    return;
  const ContentHash h = protocol::content_hash(bytes.data(), bytes.size());
  if (store_) {
    // A store that cannot write (a full disk) only misses later: the upload itself succeeded.
    if (Status st = store_->put(h, bytes); !st.ok())
      std::fprintf(stderr, "tensorwire-server: %s\n", st.message().c_str());
  }
  if (bytes.size() > capacity_) return;
  std::lock_guard<std::mutex> lock(mu_);
  keep_locked(h, bytes);
}

void ContentCache::keep_locked(const ContentHash& h, const Buffer& bytes) {
  if (auto it = index_.find(h); it != index_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);
    return;
  }
  while (held_ + bytes.size() > capacity_ && !lru_.empty()) {
    held_ -= lru_.back().bytes.size();
    index_.erase(lru_.back().hash);
    lru_.pop_back();
  }
  lru_.push_front({h, bytes});
  index_[h] = lru_.begin();
  held_ += bytes.size();
}

Buffer ContentCache::find(const ContentHash& h, uint64_t size) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(h);
    if (it != index_.end() && it->second->bytes.size() == size) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->bytes;
    }
  }
  if (!store_) return Buffer();
  Buffer b = store_->get(h, size);  // verified against h
  if (b.size() == size && size > 0 && size <= capacity_) {
    std::lock_guard<std::mutex> lock(mu_);
    keep_locked(h, b);
  }
  return b;
}

}  // namespace tw::server
