#include "net/shm.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "core/thread_pool.h"

namespace tw::net {

namespace {

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

Result<std::byte*> map_shared(int fd, size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return resource_exhausted(errno_text("cannot map the shared segment"));
  return static_cast<std::byte*>(p);
}

}  // namespace

Result<std::shared_ptr<SharedSegment>> SharedSegment::create(size_t capacity) {
  if (capacity > (size_t{1} << 46)) return invalid_argument("shared segment too large");
  const size_t total = kHeaderBytes + capacity;
  int fd = ::memfd_create("tensorwire", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return unavailable(errno_text("memfd_create"));
  // Sealed against shrinking (and growing) before the peer sees it, so a mapping of it can never
  // lose its pages (see shm.h); F_SEAL_SEAL keeps the set fixed.
  if (::ftruncate(fd, static_cast<off_t>(total)) != 0 ||
      ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    Status st = resource_exhausted(errno_text("cannot size the shared segment"));
    ::close(fd);
    return st;
  }
  auto base = map_shared(fd, total);
  if (!base.ok()) {
    ::close(fd);
    return base.status();
  }
  return std::shared_ptr<SharedSegment>(new SharedSegment(fd, *base, capacity));
}

Result<std::shared_ptr<SharedSegment>> SharedSegment::adopt(int fd, size_t capacity) {
  auto refuse = [fd](std::string why) {
    ::close(fd);
    return invalid_argument("shared segment refused: " + why);
  };
  if (fd < 0) return invalid_argument("shared segment refused: no descriptor came with it");
  if (capacity > (size_t{1} << 46)) return refuse("announced size too large");
  // F_GET_SEALS answers only for memfd (and shmem) files: anything else is refused here.
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0) return refuse("not a memfd (" + std::string(std::strerror(errno)) + ")");
  if (!(seals & F_SEAL_SHRINK)) return refuse("not sealed against shrinking (F_SEAL_SHRINK)");
  struct stat st;
  if (::fstat(fd, &st) != 0) return refuse(errno_text("fstat"));
  const size_t total = kHeaderBytes + capacity;
  if (static_cast<uint64_t>(st.st_size) < total) {
    return refuse("holds " + std::to_string(st.st_size) + " bytes, fewer than the " +
                  std::to_string(total) + " announced");
  }
  auto base = map_shared(fd, total);
  if (!base.ok()) {
    ::close(fd);
    return base.status();
  }
  return std::shared_ptr<SharedSegment>(new SharedSegment(fd, *base, capacity));
}

SharedSegment::~SharedSegment() {
  ::munmap(base_, kHeaderBytes + capacity_);
  ::close(fd_);
}

void parallel_copy(void* dst, const void* src, size_t n) {
  constexpr size_t kChunk = size_t{4} << 20;
  // From here on one memcpy is as fast or faster: glibc copies a block this large with
  // non-temporal stores (its threshold is 3/4 of the L3 it sees, 190 MiB on the 2-core VM this
  // was measured on), which no chunk of a split copy reaches. There, 256 MiB: one memcpy
  // 9.6-10.8 GB/s, two threads of 4 MiB or 128 MiB memcpys 6.4-7.5 GB/s; at 128 MiB the two
  // were even (8.3-8.6 GB/s).
  constexpr size_t kWhole = size_t{128} << 20;
  if (n < 2 * kChunk || n >= kWhole) {
    if (n) std::memcpy(dst, src, n);
    return;
  }
  const int64_t chunks = static_cast<int64_t>((n + kChunk - 1) / kChunk);
  intra_op_pool().run(chunks, [&](int64_t i) {
    const size_t at = static_cast<size_t>(i) * kChunk;
    std::memcpy(static_cast<std::byte*>(dst) + at, static_cast<const std::byte*>(src) + at,
                std::min(kChunk, n - at));
  });
}

}  // namespace tw::net
