// The content hash of a deduplicated upload (protocol 9, UploadByHashTask): XXH3-128 of the
// tensor's bytes, computed by the client to name them and by the server to keep them
// (server/dedup.h).
#pragma once
#include <cstddef>
#include <cstdint>

#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw::protocol {

struct ContentHash {
  uint64_t lo = 0, hi = 0;
  bool operator==(const ContentHash&) const = default;
};
ContentHash content_hash(const void* data, size_t n);

}  // namespace tw::protocol
TW_INTERNAL_END
