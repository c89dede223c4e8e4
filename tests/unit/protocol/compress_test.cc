// Compressed frames (protocol 9, protocol/compress.h): what pays is compressed and comes back
// byte for byte; what does not stays raw; a malformed or oversized one is refused before it
// allocates.
#include "protocol/compress.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "protocol/messages.h"

namespace tw::protocol {
namespace {

// An OutFrame as the encoders make it: a head with a large segment spliced in.
OutFrame frame_with(const std::vector<uint8_t>& body) {
  OutFrame f;
  f.head = {2, 1, 0, 0, 0, 9, 9};
  f.segments.push_back({3, Buffer::copy_of(body.data(), body.size())});
  return f;
}
std::vector<uint8_t> flat(const OutFrame& f) {
  std::vector<uint8_t> out;
  size_t pos = 0;
  for (const auto& s : f.segments) {
    out.insert(out.end(), f.head.begin() + static_cast<long>(pos),
               f.head.begin() + static_cast<long>(s.offset));
    const auto* p = reinterpret_cast<const uint8_t*>(s.data.data());
    out.insert(out.end(), p, p + s.data.size());
    pos = s.offset;
  }
  out.insert(out.end(), f.head.begin() + static_cast<long>(pos), f.head.end());
  return out;
}
Buffer as_buffer(const std::vector<uint8_t>& v) { return Buffer::copy_of(v.data(), v.size()); }

TEST(Compress, CompressibleFrameRoundTrips) {
  std::vector<uint8_t> body(1 << 20, 0);
  for (size_t i = 0; i < body.size(); i += 8) body[i] = static_cast<uint8_t>(i % 10);  // labels
  const OutFrame f = frame_with(body);
  const std::vector<uint8_t> raw = flat(f);
  OutFrame c = maybe_compress(frame_with(body), kCompressedClientType);
  EXPECT_EQ(c.head[0], kCompressedClientType);
  EXPECT_LT(c.payload_size(), raw.size() / 10);
  Buffer wire = as_buffer(flat(c));
  ASSERT_TRUE(is_compressed(wire, kCompressedClientType));
  Result<Buffer> back = decompress(wire, 1 << 30);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  ASSERT_EQ(back->size(), raw.size());
  EXPECT_EQ(std::memcmp(back->data(), raw.data(), raw.size()), 0);
}

TEST(Compress, RandomAndSmallFramesStayRaw) {
  std::vector<uint8_t> body(1 << 20);
  std::mt19937 rng(1);
  for (auto& b : body) b = static_cast<uint8_t>(rng());
  OutFrame c = maybe_compress(frame_with(body), kCompressedClientType);
  EXPECT_EQ(c.segments.size(), 1u);  // untouched: the sample did not pay
  std::vector<uint8_t> small(kCompressMinBytes - 100, 0);
  EXPECT_EQ(maybe_compress(frame_with(small), kCompressedClientType).segments.size(), 1u);
}

TEST(Compress, MalformedOrOversizedIsRefused) {
  std::vector<uint8_t> body(1 << 20, 0);
  const std::vector<uint8_t> c = flat(maybe_compress(frame_with(body), kCompressedServerType));
  ASSERT_EQ(c[0], kCompressedServerType);
  // Over the receiver's limit: refused before allocating.
  EXPECT_EQ(decompress(as_buffer(c), 1000).status().code(), StatusCode::kResourceExhausted);
  // A wrong announced length, a truncated body, trailing bytes, a header alone.
  std::vector<uint8_t> wrong = c;
  wrong[1] ^= 1;
  EXPECT_FALSE(decompress(as_buffer(wrong), 1 << 30).ok());
  std::vector<uint8_t> cut(c.begin(), c.end() - 5);
  EXPECT_FALSE(decompress(as_buffer(cut), 1 << 30).ok());
  std::vector<uint8_t> longer = c;
  longer.push_back(0);
  EXPECT_FALSE(decompress(as_buffer(longer), 1 << 30).ok());
  EXPECT_FALSE(decompress(as_buffer({kCompressedServerType, 1, 0}), 1 << 30).ok());
}

TEST(Compress, ModeFollowsTheLink) {
  EXPECT_FALSE(compress_link(CompressMode::kAuto, "127.0.0.1"));
  EXPECT_FALSE(compress_link(CompressMode::kAuto, "localhost"));
  EXPECT_TRUE(compress_link(CompressMode::kAuto, "10.0.0.2"));
  EXPECT_TRUE(compress_link(CompressMode::kMeasure, "127.0.0.1"));
  EXPECT_FALSE(compress_link(CompressMode::kOff, "10.0.0.2"));
}

}  // namespace
}  // namespace tw::protocol
