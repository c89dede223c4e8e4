#include "server/store.h"

#include <fcntl.h>
#include <openssl/sha.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <vector>

namespace tw::server {
namespace fs = std::filesystem;

namespace {

std::string hex(const uint8_t* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    out += d[p[i] >> 4];
    out += d[p[i] & 15];
  }
  return out;
}

Status errno_status(const std::string& what) {
  return unavailable(what + ": " + std::strerror(errno));
}

// Writes all of [p, p + n) to fd.
bool write_all(int fd, const std::byte* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::fsync(fd) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

// Sets the file's times to a moment after every earlier touch of this store: the kernel's clock
// for file times ticks coarsely (milliseconds), and the order at the next open must be the
// order of use.
void DiskStore::touch_locked(const std::string& path) {
  struct timespec now;
  ::clock_gettime(CLOCK_REALTIME, &now);
  int64_t ns = int64_t{now.tv_sec} * 1000000000 + now.tv_nsec;
  ns = std::max(ns, last_touch_ns_ + 1000);
  last_touch_ns_ = ns;
  const struct timespec t[2] = {{ns / 1000000000, ns % 1000000000},
                                {ns / 1000000000, ns % 1000000000}};
  (void)::utimensat(AT_FDCWD, path.c_str(), t, 0);
}

std::string DiskStore::name_of(const protocol::ContentHash& h, uint64_t size) {
  uint8_t b[16];
  for (int i = 0; i < 8; ++i) {
    b[i] = static_cast<uint8_t>(h.hi >> (56 - 8 * i));
    b[8 + i] = static_cast<uint8_t>(h.lo >> (56 - 8 * i));
  }
  return hex(b, 16) + "-" + std::to_string(size);
}

Result<std::unique_ptr<DiskStore>> DiskStore::open(const std::string& dir, uint64_t capacity,
                                                   const std::string& credential) {
  // The credential's own directory: its digest, never the credential.
  const std::string salted = "tensorwire-store\n" + credential;
  uint8_t md[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const uint8_t*>(salted.data()), salted.size(), md);
  const std::string path = (fs::path(dir) / hex(md, 16)).string();
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) {
    return unavailable("--store " + dir + ": cannot create " + path + ": " + ec.message() +
                       " (give a directory this server may write)");
  }
  std::unique_ptr<DiskStore> s(new DiskStore(path, capacity));
  struct Found {
    std::string name;
    uint64_t size;
    int64_t when;  // modification time, ns
  };
  std::vector<Found> found;
  for (const fs::directory_entry& e : fs::directory_iterator(path, ec)) {
    const std::string name = e.path().filename().string();
    if (name.find(".tmp") != std::string::npos) {  // a write a crash interrupted
      fs::remove(e.path(), ec);
      continue;
    }
    const size_t dash = name.find('-');
    if (dash != 32 || !e.is_regular_file(ec)) continue;
    const uint64_t size = e.file_size(ec);
    if (ec || std::to_string(size) != name.substr(dash + 1)) {  // not an entry's size: drop it
      fs::remove(e.path(), ec);
      continue;
    }
    struct stat st;
    if (::stat(e.path().c_str(), &st) != 0) continue;
    const int64_t when = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
    found.push_back({name, size, when});
    s->last_touch_ns_ = std::max(s->last_touch_ns_, when);
  }
  std::sort(found.begin(), found.end(),
            [](const Found& a, const Found& b) { return a.when > b.when; });
  std::lock_guard<std::mutex> lock(s->mu_);
  for (const Found& f : found) {
    s->lru_.push_back({f.name, f.size});
    s->index_[f.name] = std::prev(s->lru_.end());
    s->held_ += f.size;
  }
  s->evict_locked(0);
  return s;
}

void DiskStore::evict_locked(uint64_t room) {
  while (!lru_.empty() && held_ + room > capacity_) {
    std::error_code ec;
    fs::remove(fs::path(path_) / lru_.back().name, ec);
    held_ -= lru_.back().size;
    index_.erase(lru_.back().name);
    lru_.pop_back();
  }
}

Status DiskStore::put(const protocol::ContentHash& h, const Buffer& bytes) {
  if (bytes.size() > capacity_) return Status::OK();
  const std::string name = name_of(h, bytes.size());
  const std::string final_path = (fs::path(path_) / name).string();
  std::string tmp;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = index_.find(name); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      touch_locked(final_path);
      return Status::OK();
    }
    tmp = final_path + ".tmp" + std::to_string(::getpid()) + "-" + std::to_string(++tmp_seq_);
  }
  // Written outside the lock: loads of other entries go on meanwhile.
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return errno_status("--store: cannot create " + tmp);
  const bool ok = write_all(fd, bytes.data(), bytes.size()) && ::fsync(fd) == 0;
  const int saved = errno;
  ::close(fd);
  if (!ok) {
    ::unlink(tmp.c_str());
    errno = saved;
    return errno_status("--store: cannot write " + std::to_string(bytes.size()) + " bytes to " +
                        tmp);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (index_.count(name)) {  // another session stored the same bytes meanwhile
    ::unlink(tmp.c_str());
    return Status::OK();
  }
  evict_locked(bytes.size());
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) {
    const Status st = errno_status("--store: cannot rename " + tmp + " to " + final_path);
    ::unlink(tmp.c_str());
    return st;
  }
  touch_locked(final_path);
  (void)fsync_dir(path_);
  lru_.push_front({name, bytes.size()});
  index_[name] = lru_.begin();
  held_ += bytes.size();
  return Status::OK();
}

Buffer DiskStore::get(const protocol::ContentHash& h, uint64_t size) {
  const std::string name = name_of(h, size);
  const std::string path = (fs::path(path_) / name).string();
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(name);
    if (it == index_.end()) return Buffer();
    lru_.splice(lru_.begin(), lru_, it->second);
  }
  Buffer out = Buffer::allocate(size);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  bool ok = fd >= 0;
  uint64_t at = 0;
  while (ok && at < size) {
    const ssize_t r = ::read(fd, out.data() + at, size - at);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0)
      ok = false;
    else
      at += static_cast<uint64_t>(r);
  }
  if (fd >= 0) ::close(fd);
  // Verified against its name: a load never hands out bytes that are not the hash's.
  std::lock_guard<std::mutex> lock(mu_);
  if (ok && protocol::content_hash(out.data(), size) == h) {
    touch_locked(path);
    return out;
  }
  if (auto it = index_.find(name); it != index_.end()) {
    ::unlink(path.c_str());
    held_ -= it->second->size;
    lru_.erase(it->second);
    index_.erase(it);
  }
  return Buffer();
}

uint64_t DiskStore::held() const {
  std::lock_guard<std::mutex> lock(mu_);
  return held_;
}

size_t DiskStore::entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

}  // namespace tw::server
