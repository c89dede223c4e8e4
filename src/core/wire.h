// Explicit little-endian encoding of scalars into a byte vector, and a bounds-checked reader.
// Never memcpy a struct onto the wire: every field is written one by one in a fixed order.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/status.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw {

// A byte run kept out of a writer's buffer: it belongs after the first `offset` bytes written.
// Lets a frame carry tensor payloads without copying them (the transport gathers the pieces).
struct WireSegment {
  size_t offset = 0;
  Buffer data;
};

// A message encoded for the wire (the payload, without the frame header): its head bytes, with
// large byte runs (tensor payloads) kept out of the head as segments that the transport sends by
// a gather write. Encoders (protocol/) make it, framing (net/framing.h) writes it.
struct OutFrame {
  std::vector<uint8_t> head;
  std::vector<WireSegment> segments;  // inserted at their offsets into head
  uint64_t payload_size() const {
    uint64_t n = head.size();
    for (const auto& s : segments) n += s.data.size();
    return n;
  }
};

class WireWriter {
 public:
  explicit WireWriter(std::vector<uint8_t>& out, std::vector<WireSegment>* segments = nullptr)
      : out_(out), segments_(segments) {
    // A message's head is mostly a few dozen bytes: one allocation for it, not the doubling
    // from 1 byte that its first writes would otherwise cost (six reallocations for a reply).
    if (out_.capacity() < kInitialBytes) out_.reserve(kInitialBytes);
  }
  static constexpr size_t kInitialBytes = 128;
  // Byte runs at least this long become segments when the writer collects segments.
  static constexpr size_t kMinSegmentBytes = 16 * 1024;
  void u8(uint8_t v) { out_.push_back(v); }
  void u16(uint16_t v) { le(v, 2); }
  void u32(uint32_t v) { le(v, 4); }
  void u64(uint64_t v) { le(v, 8); }
  void i64(int64_t v) { le(static_cast<uint64_t>(v), 8); }
  void f64(double v) {
    uint64_t b;
    std::memcpy(&b, &v, 8);
    le(b, 8);
  }
  void raw(const void* p, size_t n) {
    const uint8_t* b = static_cast<const uint8_t*>(p);
    out_.insert(out_.end(), b, b + n);
  }
  // Writes b's bytes: as a segment (no copy) when segments are collected and b is large.
  void raw_ref(const Buffer& b) {
    if (segments_ && b.size() >= kMinSegmentBytes) {
      segments_->push_back({out_.size(), b});
    } else {
      raw(b.data(), b.size());
    }
  }
  void str(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    raw(s.data(), s.size());
  }
  size_t size() const { return out_.size(); }
  std::vector<uint8_t>& bytes() { return out_; }

 private:
  // One insert of n bytes (a push_back per byte cost ~4 instructions of bookkeeping each on
  // every op encoded).
  void le(uint64_t v, int n) {
    uint8_t b[8];
    for (int i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
    out_.insert(out_.end(), b, b + n);
  }
  std::vector<uint8_t>& out_;
  std::vector<WireSegment>* segments_;
};

// Reads from [data, data + size). Every read checks the remaining length first and returns
// kDataLoss on a short read. When constructed over a Buffer, raw byte runs can be taken as
// zero-copy slices of it.
class WireReader {
 public:
  WireReader(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  explicit WireReader(const Buffer& buf)
      : p_(buf.as<const uint8_t>()), end_(buf.as<const uint8_t>() + buf.size()), base_(buf) {}

  size_t remaining() const { return static_cast<size_t>(end_ - p_); }
  bool done() const { return p_ == end_; }

  Status u8(uint8_t& v) { return le(v); }
  Status u16(uint16_t& v) { return le(v); }
  Status u32(uint32_t& v) { return le(v); }
  Status u64(uint64_t& v) { return le(v); }
  Status i64(int64_t& v) {
    uint64_t u;
    TW_RETURN_NOT_OK(le(u));
    v = static_cast<int64_t>(u);
    return Status::OK();
  }
  Status f64(double& v) {
    uint64_t u;
    TW_RETURN_NOT_OK(le(u));
    std::memcpy(&v, &u, 8);
    return Status::OK();
  }
  Status str(std::string& s, size_t max_len) {
    uint32_t n;
    TW_RETURN_NOT_OK(u32(n));
    if (n > max_len || n > remaining()) return short_read(n);
    s.assign(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return Status::OK();
  }
  // n bytes as a Buffer: a slice of the underlying Buffer when there is one, else a copy.
  Status bytes(size_t n, Buffer& out) {
    if (n > remaining()) return short_read(n);
    if (base_.data() != nullptr) {
      out = base_.slice(static_cast<size_t>(p_ - base_.as<const uint8_t>()), n);
    } else {
      out = Buffer::copy_of(p_, n);
    }
    p_ += n;
    return Status::OK();
  }
  // A count of items of item_size bytes each; fails unless that many bytes remain, so a decoder
  // never allocates more than the frame could hold.
  Status count(uint32_t& n, size_t item_size) {
    TW_RETURN_NOT_OK(u32(n));
    if (item_size && n > remaining() / item_size) return short_read(size_t{n} * item_size);
    return Status::OK();
  }

 private:
  template <class T>
  Status le(T& v) {
    v = T{};
    if (remaining() < sizeof(T)) return short_read(sizeof(T));
    uint64_t acc = 0;
    for (size_t i = 0; i < sizeof(T); ++i) acc |= uint64_t{p_[i]} << (8 * i);
    v = static_cast<T>(acc);
    p_ += sizeof(T);
    return Status::OK();
  }
  Status short_read(size_t wanted) const {
    return data_loss("truncated input: needed " + std::to_string(wanted) + " bytes, " +
                     std::to_string(remaining()) + " left");
  }
  const uint8_t* p_;
  const uint8_t* end_;
  Buffer base_;
};

}  // namespace tw
TW_INTERNAL_END
