// tw::Checkpoint (tensorwire/checkpoint.h): streamed, hashed, fsync'd safetensors files committed
// by an atomically renamed manifest.
#include "tensorwire/checkpoint.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef __linux__
#include <linux/magic.h>
#include <sys/vfs.h>
#endif

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <mutex>
#include <sstream>

#include "api/safetensors_layout.h"
#include "api/sink.h"
#include "client/remote_backend.h"
#include "core/shape.h"
#include "protocol/content_hash.h"
#include "tensorwire/error.h"

namespace tw {

namespace {

namespace fs = std::filesystem;

// Format 2 hashes with ContentHash64 (XXH3); format 1 (still read) with Hash64.
constexpr const char* kFormat = "tensorwire-checkpoint 2";
constexpr const char* kFormat1 = "tensorwire-checkpoint 1";
constexpr const char* kTempPrefix = ".ckpt-tmp-";
// A removed checkpoint's data file, kept to be overwritten by the next save: rewriting a file's
// pages costs a copy, where a new file's pages must first be allocated and zeroed (on tmpfs that
// was half of a save's time; on a disk it saves the block allocation). No manifest names it.
constexpr const char* kSpare = ".ckpt-spare.safetensors";

// Format 1's hash (read only): a 64-bit hash of a byte stream fed in pieces of any size
// (xxHash64's round and avalanche on four lanes of 8-byte words).
class Hash64 {
 public:
  void update(const uint8_t* p, size_t n) {
    total_ += n;
    while (n > 0) {
      if (fill_ == 0 && n >= kBlock) {
        block(p);
        p += kBlock;
        n -= kBlock;
        continue;
      }
      const size_t take = std::min(kBlock - fill_, n);
      std::memcpy(buf_ + fill_, p, take);
      fill_ += take;
      p += take;
      n -= take;
      if (fill_ == kBlock) {
        block(buf_);
        fill_ = 0;
      }
    }
  }
  uint64_t digest() const {
    uint64_t h = rotl(lane_[0], 1) + rotl(lane_[1], 7) + rotl(lane_[2], 12) + rotl(lane_[3], 18);
    h ^= total_ * kP5;
    for (size_t i = 0; i < fill_; ++i) h = rotl(h ^ (buf_[i] * kP5), 11) * kP1;
    h ^= h >> 33;
    h *= kP2;
    h ^= h >> 29;
    h *= kP3;
    return h ^ (h >> 32);
  }

 private:
  static constexpr size_t kBlock = 32;
  static constexpr uint64_t kP1 = 0x9E3779B185EBCA87ull, kP2 = 0xC2B2AE3D27D4EB4Full,
                            kP3 = 0x165667B19E3779F9ull, kP5 = 0x27D4EB2F165667C5ull;
  static uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
  void block(const uint8_t* p) {
    for (int i = 0; i < 4; ++i) {
      uint64_t w = 0;
      if constexpr (std::endian::native == std::endian::little) {
        std::memcpy(&w, p + 8 * i, 8);  // one load (3x faster than assembling bytes)
      } else {
        for (int b = 0; b < 8; ++b) w |= uint64_t{p[8 * i + b]} << (8 * b);
      }
      lane_[i] = rotl(lane_[i] + w * kP2, 31) * kP1;
    }
  }
  uint64_t lane_[4] = {kP1 + kP2, kP2, 0, 0 - kP1};
  uint8_t buf_[kBlock] = {};
  size_t fill_ = 0;
  uint64_t total_ = 0;
};

// Format 2's hash: the low 64 bits of protocol::content_hash (XXH3-128 of 4 MiB chunks, then of
// their digests; libxxhash, with AVX2 where the CPU has it), fed while the file is written.
// A checksum against damage and torn writes, not a cryptographic hash.
class ContentHash64 {
 public:
  void update(const uint8_t* p, size_t n) { h_.update(p, n); }
  uint64_t digest() const { return h_.digest().lo; }

 private:
  protocol::ContentHasher h_;
};

// The hash a manifest's format names, of `bytes`.
uint64_t hash_of(int format, const uint8_t* p, size_t n) {
  if (format == 1) {
    Hash64 h;
    h.update(p, n);
    return h.digest();
  }
  ContentHash64 h;
  h.update(p, n);
  return h.digest();
}

std::string hex(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof(b), "%016" PRIx64, v);
  return b;
}

std::string stem(int64_t step) {
  char b[32];
  std::snprintf(b, sizeof(b), "ckpt-%012" PRId64, step);
  return b;
}

[[noreturn]] void fail_errno(const std::string& what, const std::string& path) {
  throw Error("Checkpoint: " + what + " " + path + ": " + std::strerror(errno));
}

// A file descriptor closed on every path out.
class Fd {
 public:
  Fd(const std::string& path, int flags) : path_(path), fd_(::open(path.c_str(), flags, 0644)) {
    if (fd_ < 0) fail_errno("cannot open", path);
  }
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  void write_all(const uint8_t* p, size_t n) {
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        fail_errno("writing", path_);
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
  }
  // Starts writing [offset, offset + n) back to the disk without waiting (Linux), so that the
  // final fsync finds most of the file there already: the disk works while later tensors are
  // still being downloaded.
  void start_writeback(uint64_t offset, uint64_t n) {
#ifdef __linux__
    (void)::sync_file_range(fd_, static_cast<off64_t>(offset), static_cast<off64_t>(n),
                            SYNC_FILE_RANGE_WRITE);
#else
    (void)offset;
    (void)n;
#endif
  }
  void sync() {
    if (::fsync(fd_) != 0) fail_errno("fsync of", path_);
  }
  void truncate(uint64_t size) {
    if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) fail_errno("truncating", path_);
  }
  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  void close() {
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail_errno("closing", path_);
  }

 private:
  std::string path_;
  int fd_;
};

void sync_dir(const std::string& dir) {
  Fd d(dir, O_RDONLY | O_DIRECTORY);
  d.sync();
}

void rename_or_throw(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) fail_errno("cannot rename " + from + " to", to);
}

std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) throw Error("Checkpoint: cannot open " + path);
  const std::streamoff size = f.tellg();
  if (size < 0) throw Error("Checkpoint: cannot read " + path);
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  f.seekg(0);
  if (size > 0 && !f.read(reinterpret_cast<char*>(bytes.data()), size))
    throw Error("Checkpoint: cannot read " + path);
  return bytes;
}

bool parse_u64(const std::string& s, uint64_t& out, int base = 10) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  out = std::strtoull(s.c_str(), &end, base);
  return errno == 0 && *end == '\0' && s[0] != '-';
}

// The manifest at `path`, or nullopt when it is not a complete, well-formed one.
// Its format (1 or 2) goes to `format`.
std::optional<CheckpointInfo> parse_manifest(const std::string& dir, const std::string& path,
                                             uint64_t& hash, uint64_t& slots, int& format) {
  std::ifstream f(path);
  if (!f) return std::nullopt;
  std::string line;
  if (!std::getline(f, line) || (line != kFormat && line != kFormat1)) return std::nullopt;
  format = line == kFormat ? 2 : 1;
  std::map<std::string, std::string> kv;
  CheckpointInfo info;
  bool ended = false;
  while (std::getline(f, line)) {
    if (line == "end") {
      ended = true;
      break;
    }
    const size_t sp = line.find(' ');
    if (sp == std::string::npos) return std::nullopt;
    const std::string key = line.substr(0, sp), value = line.substr(sp + 1);
    if (key.rfind("extra.", 0) == 0) {
      info.extra[key.substr(6)] = value;
    } else {
      kv[key] = value;
    }
  }
  if (!ended) return std::nullopt;
  uint64_t step = 0;
  for (const char* k : {"file", "bytes", "hash", "step", "rng_seed", "rng_counter", "optim_slots"})
    if (!kv.count(k)) return std::nullopt;
  const std::string& file = kv["file"];
  if (file.empty() || file.find('/') != std::string::npos) return std::nullopt;
  if (!parse_u64(kv["bytes"], info.bytes) || !parse_u64(kv["hash"], hash, 16) ||
      !parse_u64(kv["step"], step) || !parse_u64(kv["rng_seed"], info.rng.seed) ||
      !parse_u64(kv["rng_counter"], info.rng.counter) || !parse_u64(kv["optim_slots"], slots))
    return std::nullopt;
  info.step = static_cast<int64_t>(step);
  info.manifest = path;
  info.data = (fs::path(dir) / file).string();
  return info;
}

// The data file's bytes when they match the manifest (size and hash); nullopt otherwise.
std::optional<std::vector<uint8_t>> checked_data(const CheckpointInfo& info, uint64_t hash,
                                                 int format) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(info.data, ec);
  if (ec || size != info.bytes) return std::nullopt;
  std::vector<uint8_t> bytes = read_all(info.data);
  if (bytes.size() != info.bytes || hash_of(format, bytes.data(), bytes.size()) != hash)
    return std::nullopt;
  return bytes;
}

struct Candidate {
  CheckpointInfo info;
  uint64_t hash = 0, slots = 0;
  int format = 2;
};

std::vector<Candidate> candidates(const std::string& dir) {
  std::vector<Candidate> out;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("ckpt-", 0) != 0 || e.path().extension() != ".manifest") continue;
    Candidate c;
    if (auto info = parse_manifest(dir, e.path().string(), c.hash, c.slots, c.format)) {
      c.info = std::move(*info);
      out.push_back(std::move(c));
    }
  }
  std::sort(out.begin(), out.end(),
            [](const Candidate& a, const Candidate& b) { return a.info.step < b.info.step; });
  return out;
}

}  // namespace

Checkpoint::Checkpoint(std::string dir, int keep) : dir_(std::move(dir)), keep_(keep) {
  if (keep_ < 1) throw Error("Checkpoint: keep must be >= 1, got " + std::to_string(keep));
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) throw Error("Checkpoint: cannot create " + dir_ + ": " + ec.message());
}

CheckpointInfo Checkpoint::save(int64_t step, const nn::Module& model, optim::Optimizer* opt,
                                const std::map<std::string, std::string>& extra) {
  return save(step, model.named_parameters(), opt, extra);
}

// What a save reads, taken at the call: the tensors' handles (tensors are immutable, so later
// steps do not change what they hold), the random generator's state and the step.
struct Checkpoint::Snapshot {
  int64_t step = 0;
  RngState rng;
  std::map<std::string, std::string> extra;
  size_t slots = 0;
  std::vector<safetensors::Named> named;
  // What is read, in file order: each tensor whole, or a remote tensor of more than kSlice bytes
  // in slices of kSlice (of its flat view, cut on the device), so that writing and hashing one
  // slice overlap the download of the next.
  struct Piece {
    Tensor tensor;
    uint64_t bytes = 0;
  };
  std::vector<Piece> pieces;
};

namespace {

constexpr uint64_t kSlice = 8 << 20;
// At most this many bytes are read ahead of the one being written: the replies' buffers go back
// to the buffer pool and are reused, where reading everything at once touched fresh memory
// (slow on a VM) and held the whole checkpoint in memory.
constexpr uint64_t kWindow = 64 << 20;
constexpr size_t kChunk = 256 << 10;  // hashed, then written while still in the cache

// Receiving into the file (tmpfs): a save maps its data file (MAP_SHARED) and each read's reply
// is received straight into the file's pages (client::Connection::read_into): one copy, from the
// kernel to the pages, where a reply buffer then write() took two; the hash then reads the bytes
// just received. The mapping is kept for a later save that recycles the same file (the spare,
// kSpare): on our hosts the first access through a new mapping costs ~9 us per 4 KiB page
// (256 MiB mapped anew and touched: 0.6 s, far more than the copy saved; so the first save into
// a new file is slower), through a kept one nothing (256 MiB copied into it: 20 ms). Only on
// tmpfs, where the pages are the storage: to a disk (ext4) the same saves took 458-895 ms
// against 303-416 ms with write() (256 MiB, alternating runs; bench/results/chaos.md), and
// the disk, not the copy, is the slow side there anyway.
struct Mapping {
  uint8_t* data = nullptr;
  size_t size = 0;
  dev_t dev = 0;
  ino_t ino = 0;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  Mapping(uint8_t* d, size_t n, dev_t dv, ino_t in) : data(d), size(n), dev(dv), ino(in) {}
  ~Mapping() { ::munmap(data, size); }
};

// The mappings kept per Checkpoint, of its files that a later save may recycle (the spare and
// the data files retained); beside the object rather than in it so that the public header stays
// as it is; dropped with the object.
std::mutex kept_mu;
std::map<const void*, std::vector<std::shared_ptr<Mapping>>> kept_maps;

bool same_file(const Mapping& m, const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && st.st_dev == m.dev && st.st_ino == m.ino;
}

// `f` (sized `total` bytes) mapped for writing: a kept mapping of the same file, or a new one;
// null when the file is not on tmpfs or cannot be mapped (then the save writes it).
std::shared_ptr<Mapping> map_file(const void* owner, const Fd& f, uint64_t total) {
  struct stat st;
  if (::fstat(f.fd(), &st) != 0) return nullptr;
#ifdef __linux__
  struct statfs fsinfo;
  if (::fstatfs(f.fd(), &fsinfo) != 0 || fsinfo.f_type != TMPFS_MAGIC) return nullptr;
#else
  return nullptr;
#endif
  {
    std::lock_guard<std::mutex> lock(kept_mu);
    for (const std::shared_ptr<Mapping>& m : kept_maps[owner])
      if (m->dev == st.st_dev && m->ino == st.st_ino && m->size >= total) return m;
  }
  // Its pages reserved first: a write through a mapping that finds the tmpfs full raises
  // SIGBUS, where write() fails with ENOSPC.
  if (const int rc = ::posix_fallocate(f.fd(), 0, static_cast<off_t>(total)); rc != 0) {
    errno = rc;
    fail_errno("cannot reserve " + std::to_string(total) + " bytes for", f.path());
  }
  void* p =
      ::mmap(nullptr, static_cast<size_t>(total), PROT_READ | PROT_WRITE, MAP_SHARED, f.fd(), 0);
  if (p == MAP_FAILED) return nullptr;
  return std::make_shared<Mapping>(static_cast<uint8_t*>(p), static_cast<size_t>(total), st.st_dev,
                                   st.st_ino);
}

// After a save: keeps `m` and drops the kept mappings of files no longer in `live`.
void keep_mappings(const void* owner, std::shared_ptr<Mapping> m,
                   const std::vector<std::string>& live) {
  std::vector<std::shared_ptr<Mapping>> dropped;  // unmapped outside the lock
  std::lock_guard<std::mutex> lock(kept_mu);
  std::vector<std::shared_ptr<Mapping>>& kept = kept_maps[owner];
  if (m && std::find(kept.begin(), kept.end(), m) == kept.end()) kept.push_back(std::move(m));
  for (auto it = kept.begin(); it != kept.end();) {
    const bool used = std::any_of(live.begin(), live.end(),
                                  [&](const std::string& path) { return same_file(**it, path); });
    if (used) {
      ++it;
    } else {
      dropped.push_back(std::move(*it));
      it = kept.erase(it);
    }
  }
}

// Reads `t`'s values into `into` (exactly its bytes); the function returned waits for them
// (and throws tw::Error when the read failed). From a remote device the reply is received
// straight into `into`; from another device the values are read, then copied.
std::function<void()> read_into(const Tensor& t, Buffer into) {
  const detail::TensorImpl& impl = *t.impl();
  if (impl.sink->kind() == DeviceKind::kRemote) {
    // (The remote backend is the only backend of that kind; see api/remote.cc.)
    auto& remote = static_cast<client::RemoteBackend&>(impl.sink->backend());
    auto fut = std::make_shared<std::future<Result<TensorData>>>(
        remote.read_into(impl.id, std::move(into)));
    return [sink = impl.sink, fut] {
      const Result<TensorData> r = sink->await(*fut);
      if (!r.ok()) throw Error(r.status().message());
    };
  }
  return [values = t.host_values_async(), into] {
    const detail::HostValues v = values();
    if (into.size()) std::memcpy(into.data(), v.data, into.size());
  };
}

}  // namespace

std::shared_ptr<Checkpoint::Snapshot> Checkpoint::snapshot(
    int64_t step, const NamedParameters& params, optim::Optimizer* opt,
    const std::map<std::string, std::string>& extra) const {
  if (step < 0) throw Error("Checkpoint: step must be >= 0, got " + std::to_string(step));
  for (const auto& [k, v] : extra) {
    if (k.empty() || k.find_first_of(" \n") != std::string::npos ||
        v.find('\n') != std::string::npos)
      throw Error("Checkpoint: extra key '" + k + "' or its value holds a space or a newline");
  }
  auto snap = std::make_shared<Snapshot>();
  snap->step = step;
  snap->rng = rng_state();
  snap->extra = extra;
  auto add = [&](const std::string& name, const Tensor& t) {
    snap->named.push_back({name, t.dtype(), t.shape(), {}});
    const uint64_t n = safetensors::byte_size(snap->named.back());
    if (n <= kSlice || t.device().kind() != DeviceKind::kRemote) {
      snap->pieces.push_back({t, n});
      return;
    }
    const uint64_t esize = dtype_size(t.dtype());
    const int64_t per = static_cast<int64_t>(kSlice / esize);
    const Tensor flat = t.reshape({t.numel()});
    for (int64_t b = 0; b < t.numel(); b += per) {
      const int64_t e = std::min(t.numel(), b + per);
      snap->pieces.push_back({flat.slice(0, b, e), static_cast<uint64_t>(e - b) * esize});
    }
  };
  for (const auto& [name, p] : params) {
    if (!p->value().defined()) throw Error("Checkpoint: parameter " + name + " is undefined");
    add("param." + name, p->value());
  }
  const std::vector<Tensor*> state = opt ? opt->state() : std::vector<Tensor*>{};
  snap->slots = state.size();
  for (size_t i = 0; i < state.size(); ++i)
    if (state[i]->defined()) add("optim." + std::to_string(i), *state[i]);
  return snap;
}

CheckpointInfo Checkpoint::write(Snapshot& snap) {
  const int64_t step = snap.step;
  CheckpointInfo info;
  info.step = step;
  info.rng = snap.rng;
  info.extra = snap.extra;
  const std::map<std::string, std::string> meta = {{"format", kFormat},
                                                   {"step", std::to_string(step)}};
  const std::vector<uint8_t> header = safetensors::write_header(snap.named, meta);
  std::vector<uint64_t> offset;  // of each piece in the file
  info.bytes = header.size();
  for (const Snapshot::Piece& piece : snap.pieces) {
    offset.push_back(info.bytes);
    info.bytes += piece.bytes;
  }

  // Leftovers of a writer that died: temporaries, and data files no manifest names.
  std::error_code ec;
  std::vector<std::string> named_files;
  for (const Candidate& c : candidates(dir_)) named_files.push_back(c.info.data);
  for (const fs::directory_entry& e : fs::directory_iterator(dir_, ec)) {
    const std::string name = e.path().filename().string();
    const bool orphan =
        name.rfind("ckpt-", 0) == 0 && e.path().extension() == ".safetensors" &&
        std::find(named_files.begin(), named_files.end(), e.path().string()) == named_files.end();
    if (name.rfind(kTempPrefix, 0) == 0 || orphan) fs::remove(e.path(), ec);
  }

  const std::string base = stem(step);
  const std::string data_name = base + ".safetensors";
  info.data = (fs::path(dir_) / data_name).string();
  info.manifest = (fs::path(dir_) / (base + ".manifest")).string();
  const std::string tmp = (fs::path(dir_) / (kTempPrefix + data_name)).string();
  const std::string spare = (fs::path(dir_) / kSpare).string();
  const bool recycled = ::rename(spare.c_str(), tmp.c_str()) == 0;
  ContentHash64 hash;
  std::shared_ptr<Mapping> map;
  {
    Fd f(tmp, O_RDWR | O_CREAT | O_CLOEXEC | (recycled ? 0 : O_TRUNC));
    f.truncate(info.bytes);  // (a recycled file may be longer)
    map = map_file(this, f, info.bytes);

    // Each piece's read goes out at most kWindow bytes ahead of the one being hashed, into its
    // place in the mapped file (or, unmapped, into a buffer written from there).
    struct Read {
      std::function<void()> wait;
      Buffer into;
    };
    std::deque<Read> inflight;
    size_t next = 0;
    uint64_t ahead = 0;
    auto read_ahead = [&] {
      while (next < snap.pieces.size() &&
             (inflight.empty() || ahead + snap.pieces[next].bytes <= kWindow)) {
        const size_t n = static_cast<size_t>(snap.pieces[next].bytes);
        Buffer into = map ? Buffer::wrap(map->data + offset[next], n, map) : Buffer::allocate(n);
        inflight.push_back({read_into(snap.pieces[next].tensor, into), into});
        ahead += n;
        ++next;
      }
    };
    read_ahead();

    if (map) {
      std::memcpy(map->data, header.data(), header.size());
    } else {
      f.write_all(header.data(), header.size());
    }
    hash.update(header.data(), header.size());
    for (size_t i = 0; i < snap.pieces.size(); ++i) {
      Snapshot::Piece& piece = snap.pieces[i];
      Read r = std::move(inflight.front());
      inflight.pop_front();
      r.wait();
      ahead -= piece.bytes;
      piece.tensor = Tensor();  // a slice is released on the device
      read_ahead();             // the next read goes out before this one is hashed
      const auto* p = reinterpret_cast<const uint8_t*>(r.into.data());
      if (map) {
        hash.update(p, piece.bytes);
      } else {
        for (uint64_t at = 0; at < piece.bytes; at += kChunk) {
          const size_t m = static_cast<size_t>(std::min<uint64_t>(kChunk, piece.bytes - at));
          hash.update(p + at, m);
          f.write_all(p + at, m);
        }
      }
      f.start_writeback(offset[i], piece.bytes);
    }
    // (On Linux fsync also writes back the pages written through the shared mapping: there is
    // one page cache.)
    f.sync();
    f.close();
  }
  rename_or_throw(tmp, info.data);

  std::string manifest = std::string(kFormat) + "\nfile " + data_name + "\nbytes " +
                         std::to_string(info.bytes) + "\nhash " + hex(hash.digest()) + "\nstep " +
                         std::to_string(step) + "\nrng_seed " + std::to_string(info.rng.seed) +
                         "\nrng_counter " + std::to_string(info.rng.counter) + "\noptim_slots " +
                         std::to_string(snap.slots) + "\n";
  for (const auto& [k, v] : snap.extra) manifest += "extra." + k + " " + v + "\n";
  manifest += "end\n";
  const std::string mtmp = (fs::path(dir_) / (kTempPrefix + base + ".manifest")).string();
  {
    Fd f(mtmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC);
    f.write_all(reinterpret_cast<const uint8_t*>(manifest.data()), manifest.size());
    f.sync();
    f.close();
  }
  rename_or_throw(mtmp, info.manifest);
  sync_dir(dir_);

  // Retention: the newest keep_ (by step), counting this one. The first data file removed
  // becomes the spare.
  std::vector<Candidate> all = candidates(dir_);
  bool have_spare = fs::exists(spare, ec);
  std::vector<std::string> live = {spare};  // the files a later save may write into
  for (size_t i = 0; i < all.size(); ++i) {
    if (i + static_cast<size_t>(keep_) >= all.size() || all[i].info.step == step) {
      live.push_back(all[i].info.data);
      continue;
    }
    fs::remove(all[i].info.manifest, ec);  // the manifest first: never a manifest without data
    if (!have_spare && ::rename(all[i].info.data.c_str(), spare.c_str()) == 0) {
      have_spare = true;
    } else {
      fs::remove(all[i].info.data, ec);
    }
  }
  keep_mappings(this, std::move(map), live);
  return info;
}

CheckpointInfo Checkpoint::save(int64_t step, const NamedParameters& params, optim::Optimizer* opt,
                                const std::map<std::string, std::string>& extra) {
  wait();
  std::shared_ptr<Snapshot> snap = snapshot(step, params, opt, extra);
  return write(*snap);
}

void Checkpoint::save_async(int64_t step, const nn::Module& model, optim::Optimizer* opt,
                            const std::map<std::string, std::string>& extra) {
  save_async(step, model.named_parameters(), opt, extra);
}

void Checkpoint::save_async(int64_t step, const NamedParameters& params, optim::Optimizer* opt,
                            const std::map<std::string, std::string>& extra) {
  wait();
  std::shared_ptr<Snapshot> snap = snapshot(step, params, opt, extra);
  pending_ = std::async(std::launch::async, [this, snap] { return write(*snap); });
}

std::optional<CheckpointInfo> Checkpoint::wait() {
  if (!pending_.valid()) return std::nullopt;
  return pending_.get();  // (a failed save's error is thrown here)
}

bool Checkpoint::saving() const {
  return pending_.valid() &&
         pending_.wait_for(std::chrono::seconds(0)) != std::future_status::ready;
}

Checkpoint::~Checkpoint() {
  if (pending_.valid()) {
    try {
      pending_.get();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tw::Checkpoint: the save in progress failed: %s\n", e.what());
    }
  }
  std::vector<std::shared_ptr<Mapping>> dropped;  // unmapped outside the lock
  std::lock_guard<std::mutex> lock(kept_mu);
  if (auto it = kept_maps.find(this); it != kept_maps.end()) {
    dropped = std::move(it->second);
    kept_maps.erase(it);
  }
}

std::vector<CheckpointInfo> Checkpoint::list(bool validate) const {
  std::vector<CheckpointInfo> out;
  for (Candidate& c : candidates(dir_)) {
    std::error_code ec;
    const bool ok = validate ? checked_data(c.info, c.hash, c.format).has_value()
                             : fs::file_size(c.info.data, ec) == c.info.bytes && !ec;
    if (ok) out.push_back(std::move(c.info));
  }
  return out;
}

std::optional<CheckpointInfo> Checkpoint::latest() const {
  std::vector<Candidate> all = candidates(dir_);
  for (auto it = all.rbegin(); it != all.rend(); ++it)
    if (checked_data(it->info, it->hash, it->format)) return it->info;
  return std::nullopt;
}

void Checkpoint::load(const CheckpointInfo& info, nn::Module& model, optim::Optimizer* opt,
                      bool restore_rng, std::optional<Device> state_device) const {
  load(info, model.named_parameters(), opt, restore_rng, state_device);
}

void Checkpoint::load(const CheckpointInfo& info, const NamedParameters& params,
                      optim::Optimizer* opt, bool restore_rng,
                      std::optional<Device> state_device) const {
  uint64_t hash = 0, slots = 0;
  int format = 2;
  const std::optional<CheckpointInfo> m = parse_manifest(dir_, info.manifest, hash, slots, format);
  if (!m) throw Error("Checkpoint: " + info.manifest + " is missing or not a complete manifest");
  const std::optional<std::vector<uint8_t>> bytes = checked_data(*m, hash, format);
  if (!bytes)
    throw Error("Checkpoint: " + m->data + " does not match its manifest " + m->manifest +
                " (size or hash differ): the file is damaged");
  const safetensors::Layout layout = safetensors::parse_layout(*bytes, m->data);
  std::map<std::string, const safetensors::Entry*> entries;
  for (const safetensors::Entry& e : layout.entries) entries[e.name] = &e;
  auto make = [&](const safetensors::Entry& e, const Device& device) {
    return from_bytes(std::span<const uint8_t>(bytes->data() + layout.data_offset + e.begin,
                                               static_cast<size_t>(e.end - e.begin)),
                      e.shape, e.dtype, device);
  };

  // Check everything before changing anything.
  size_t n_params = 0;
  for (const auto& [name, p] : params) {
    auto it = entries.find("param." + name);
    if (it == entries.end())
      throw Error("Checkpoint: " + m->data + " has no parameter " + name + " of the model");
    const Tensor& v = p->value();
    if (v.defined() && (it->second->shape != v.shape() || it->second->dtype != v.dtype())) {
      throw Error("Checkpoint: parameter " + name + " is " + shape_str(it->second->shape) + " in " +
                  m->data + " but " + shape_str(v.shape()) + " in the model");
    }
    ++n_params;
  }
  size_t n_saved_params = 0;
  for (const auto& [name, e] : entries) n_saved_params += name.rfind("param.", 0) == 0;
  if (n_saved_params != n_params) {
    throw Error("Checkpoint: " + m->data + " holds " + std::to_string(n_saved_params) +
                " parameters, the model " + std::to_string(n_params));
  }
  const std::vector<Tensor*> state = opt ? opt->state() : std::vector<Tensor*>{};
  if (opt && state.size() != slots) {
    throw Error("Checkpoint: " + m->data + " holds an optimizer with " + std::to_string(slots) +
                " state slots, this optimizer has " + std::to_string(state.size()));
  }

  std::optional<Device> fallback;
  for (const auto& [name, p] : params) {
    const Tensor& v = p->value();
    const Device d = v.defined() ? v.device() : Device::cpu();
    if (!fallback) fallback = d;
    p->set(make(*entries.at("param." + name), d));
  }
  const Device sd = state_device ? *state_device : fallback ? *fallback : Device::cpu();
  for (size_t i = 0; i < state.size(); ++i) {
    auto it = entries.find("optim." + std::to_string(i));
    *state[i] = it == entries.end() ? Tensor() : make(*it->second, sd);
  }
  if (opt) opt->state_restored();
  if (restore_rng) set_rng_state(m->rng);
}

std::optional<CheckpointInfo> Checkpoint::restore(nn::Module& model, optim::Optimizer* opt,
                                                  bool restore_rng) const {
  return restore(model.named_parameters(), opt, restore_rng);
}

std::optional<CheckpointInfo> Checkpoint::restore(const NamedParameters& params,
                                                  optim::Optimizer* opt, bool restore_rng) const {
  std::optional<CheckpointInfo> info = latest();
  if (info) load(*info, params, opt, restore_rng);
  return info;
}

}  // namespace tw
