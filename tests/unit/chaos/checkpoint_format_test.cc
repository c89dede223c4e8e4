// tw::Checkpoint's files: a remote model saved to tmpfs, where each slice's reply is received
// straight into the mapped data file (kept from save to save), loads back bit for bit over every
// transport; and a format-1 checkpoint (the old hash, written here by hand from its definition)
// still loads, while a damaged one, or one whose hash is format 2's, is refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "support/remote_device.h"
#include "tensorwire/tensorwire.h"

namespace tw {
namespace {

namespace fs = std::filesystem;

std::vector<std::vector<uint8_t>> param_bytes(const nn::Module& m) {
  std::vector<std::vector<uint8_t>> out;
  for (const auto& [name, p] : m.named_parameters()) out.push_back(p->value().to_bytes());
  return out;
}

std::string fresh_dir(const fs::path& root, const std::string& name) {
  const fs::path p = root / ("tw_ckpt_fmt_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p.string();
}

class ToTmpfs : public ::testing::TestWithParam<testing::Transport> {};

TEST_P(ToTmpfs, SlicesReceivedIntoTheFileLoadBack) {
  if (!fs::is_directory("/dev/shm")) GTEST_SKIP() << "no /dev/shm (tmpfs)";
  const Device d = testing::remote_test_device(GetParam());
  const std::string dir = fresh_dir("/dev/shm", testing::remote_name(GetParam()));
  // 20 MiB of weight (slices of 8, 8 and 4 MiB, received into the file), a bias small enough to
  // come inside the reader's staging buffer (copied into the file), one of 256 KiB between.
  manual_seed(3);
  nn::Linear big(1024, 5120, true, {d, kF32});
  nn::Linear mid(256, 256, false, {d, kF32});
  NamedParameters params;
  for (auto& [name, p] : big.named_parameters()) params.emplace_back("big." + name, p);
  for (auto& [name, p] : mid.named_parameters()) params.emplace_back("mid." + name, p);
  Checkpoint ckpt(dir, 1);
  // keep 1: the third save and later recycle the spare, into the mapping kept for it.
  for (int64_t step = 1; step <= 4; ++step) {
    {
      NoGradGuard g;
      big.weight()->set(big.weight()->value() + 1.0);
      mid.weight()->set(mid.weight()->value() * 0.5);
    }
    std::vector<std::vector<uint8_t>> want;
    for (const auto& [name, p] : params) want.push_back(p->value().to_bytes());
    const CheckpointInfo saved = ckpt.save(step, params);
    const std::optional<CheckpointInfo> latest = ckpt.latest();
    ASSERT_TRUE(latest);
    EXPECT_EQ(latest->step, step);
    EXPECT_EQ(fs::file_size(saved.data), saved.bytes);
    nn::Linear big2(1024, 5120, true), mid2(256, 256, false);
    NamedParameters into;
    for (auto& [name, p] : big2.named_parameters()) into.emplace_back("big." + name, p);
    for (auto& [name, p] : mid2.named_parameters()) into.emplace_back("mid." + name, p);
    ckpt.load(*latest, into);
    std::vector<std::vector<uint8_t>> got;
    for (const auto& [name, p] : into) got.push_back(p->value().to_bytes());
    EXPECT_EQ(got, want) << "step " << step;
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Transports, ToTmpfs, ::testing::ValuesIn(testing::kTransports),
                         [](const auto& info) { return testing::remote_name(info.param); });

// Format 1's hash, written from its definition (src/api/checkpoint.cc, Hash64): xxHash64's round
// on four lanes of little-endian 8-byte words per 32-byte block, then the lanes merged, the
// length mixed in, the tail's bytes folded one at a time, and xxHash64's avalanche.
uint64_t format1_hash(const std::vector<uint8_t>& bytes) {
  constexpr uint64_t kP1 = 0x9E3779B185EBCA87ull, kP2 = 0xC2B2AE3D27D4EB4Full,
                     kP3 = 0x165667B19E3779F9ull, kP5 = 0x27D4EB2F165667C5ull;
  auto rotl = [](uint64_t x, int r) { return (x << r) | (x >> (64 - r)); };
  uint64_t lane[4] = {kP1 + kP2, kP2, 0, 0 - kP1};
  const size_t blocks = bytes.size() / 32;
  for (size_t b = 0; b < blocks; ++b) {
    for (int i = 0; i < 4; ++i) {
      uint64_t w = 0;
      for (int k = 0; k < 8; ++k) w |= uint64_t{bytes[32 * b + 8 * i + k]} << (8 * k);
      lane[i] = rotl(lane[i] + w * kP2, 31) * kP1;
    }
  }
  uint64_t h = rotl(lane[0], 1) + rotl(lane[1], 7) + rotl(lane[2], 12) + rotl(lane[3], 18);
  h ^= bytes.size() * kP5;
  for (size_t i = 32 * blocks; i < bytes.size(); ++i) h = rotl(h ^ (bytes[i] * kP5), 11) * kP1;
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  return h ^ (h >> 32);
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// Rewrites manifest `path`: its first line (the format) becomes `format`, and its hash `hash`
// when given.
void rewrite_manifest(const std::string& path, const std::string& format,
                      std::optional<uint64_t> hash) {
  std::ifstream in(path);
  std::ostringstream out;
  std::string line;
  std::getline(in, line);
  out << format << "\n";
  while (std::getline(in, line)) {
    if (hash && line.rfind("hash ", 0) == 0) {
      char h[17];
      std::snprintf(h, sizeof(h), "%016llx", static_cast<unsigned long long>(*hash));
      line = std::string("hash ") + h;
    }
    out << line << "\n";
  }
  in.close();
  std::ofstream(path, std::ios::trunc) << out.str();
}

constexpr const char* kFormat1 = "tensorwire-checkpoint 1";
constexpr const char* kFormat2 = "tensorwire-checkpoint 2";

// Makes checkpoint `info` (saved in format 2) what a format-1 writer left: the data file's
// metadata and the manifest name format 1, and the manifest holds the data's format-1 hash.
void make_format1(const CheckpointInfo& info) {
  std::vector<uint8_t> data = read_file(info.data);
  const std::string from = kFormat2, to = kFormat1;
  auto it = std::search(data.begin(), data.end(), from.begin(), from.end());
  ASSERT_NE(it, data.end()) << "the data file's metadata names no format";
  std::copy(to.begin(), to.end(), it);
  write_file(info.data, data);
  rewrite_manifest(info.manifest, kFormat1, format1_hash(data));
}

TEST(CheckpointFormat1, StillLoadsAndDamagedIsRefused) {
  const std::string dir = fresh_dir(fs::temp_directory_path(), "format1");
  manual_seed(5);
  nn::Linear lin(33, 7);  // 924 + 28 bytes of values: a tail past the last 32-byte block
  Checkpoint ckpt(dir, 3);
  const CheckpointInfo saved = ckpt.save(7, lin);
  const std::vector<std::vector<uint8_t>> want = param_bytes(lin);

  make_format1(saved);
  std::optional<CheckpointInfo> latest = ckpt.latest();
  ASSERT_TRUE(latest) << "a format-1 checkpoint no longer loads";
  EXPECT_EQ(latest->step, 7);
  nn::Linear back(33, 7);
  ckpt.load(*latest, back);
  EXPECT_EQ(param_bytes(back), want);

  // One byte of its values changed: refused.
  std::vector<uint8_t> data = read_file(saved.data);
  data[data.size() - 5] ^= 0x01;
  write_file(saved.data, data);
  EXPECT_FALSE(ckpt.latest());
  try {
    ckpt.load(saved, back);
    ADD_FAILURE() << "a damaged format-1 checkpoint loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not match its manifest"), std::string::npos)
        << e.what();
  }
  data[data.size() - 5] ^= 0x01;  // whole again: it loads
  write_file(saved.data, data);
  EXPECT_TRUE(ckpt.latest());
  fs::remove_all(dir);
}

TEST(CheckpointFormat1, IsCheckedWithItsOwnHash) {
  // A format-2 checkpoint whose manifest says format 1 but keeps format 2's hash (which its data
  // matches): the format-1 hash disagrees, so it is refused.
  const std::string dir = fresh_dir(fs::temp_directory_path(), "format1_hash");
  nn::Linear lin(8, 8);
  Checkpoint ckpt(dir, 1);
  const CheckpointInfo saved = ckpt.save(1, lin);
  ASSERT_TRUE(ckpt.latest());
  rewrite_manifest(saved.manifest, kFormat1, std::nullopt);
  EXPECT_FALSE(ckpt.latest()) << "a format-1 manifest was checked with format 2's hash";
  rewrite_manifest(saved.manifest, kFormat2, std::nullopt);
  EXPECT_TRUE(ckpt.latest());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tw
