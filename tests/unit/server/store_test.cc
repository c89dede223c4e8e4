// The persistent weight store (server/store.h, tensorwire-server --store): entries survive a
// reopen (a server restart), are verified at every load, bounded with least-recently-used
// eviction, written crash-safe (a crash's temporary file is removed, never taken for an entry),
// scoped by credential; and a re-upload to a restarted server sends the hash only.
#include "server/store.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "tensorwire/remote.h"
#include "tensorwire/server.h"
#include "tensorwire/tensorwire.h"

namespace tw::server {
namespace {
namespace fs = std::filesystem;
using protocol::content_hash;

struct TempDir {
  TempDir() {
    std::random_device rd;
    path = (fs::temp_directory_path() / ("tw_store_" + std::to_string(rd()) + std::to_string(rd())))
               .string();
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string path;
};

Buffer bytes_of(size_t n, int seed) {
  Buffer b = Buffer::allocate(n);
  for (size_t i = 0; i < n; ++i) b.data()[i] = static_cast<std::byte>((i * 31 + seed * 7) & 255);
  return b;
}

bool same(const Buffer& a, const Buffer& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size()) == 0;
}

std::unique_ptr<DiskStore> open(const std::string& dir, uint64_t cap, const std::string& cred) {
  auto s = DiskStore::open(dir, cap, cred);
  EXPECT_TRUE(s.ok()) << s.status().message();
  return std::move(s).value();
}

TEST(Store, EntriesSurviveAReopenAndAreVerifiedAtEveryLoad) {
  TempDir d;
  const Buffer a = bytes_of(100000, 1);
  const auto h = content_hash(a.data(), a.size());
  {
    auto s = open(d.path, 1 << 20, "secret");
    ASSERT_TRUE(s->put(h, a).ok());
    EXPECT_EQ(s->entries(), 1u);
  }
  auto s = open(d.path, 1 << 20, "secret");
  EXPECT_EQ(s->held(), a.size());
  EXPECT_TRUE(same(s->get(h, a.size()), a));
  EXPECT_EQ(s->get(h, a.size() - 1).size(), 0u);  // another size: not that entry
  // A flipped byte on disk: the load misses and the entry is gone.
  const std::string file = s->path() + "/" + DiskStore::name_of(h, a.size());
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(5000);
    const char was = static_cast<char>(f.get());
    f.seekp(5000);
    f.put(static_cast<char>(~was));
  }
  EXPECT_EQ(s->get(h, a.size()).size(), 0u);
  EXPECT_FALSE(fs::exists(file));
  EXPECT_EQ(s->entries(), 0u);
}

TEST(Store, EvictsTheLeastRecentlyUsedPastItsLimit) {
  TempDir d;
  const Buffer a = bytes_of(40000, 1), b = bytes_of(40000, 2), c = bytes_of(40000, 3);
  const auto ha = content_hash(a.data(), a.size()), hb = content_hash(b.data(), b.size()),
             hc = content_hash(c.data(), c.size());
  auto s = open(d.path, 100000, "");
  ASSERT_TRUE(s->put(ha, a).ok());
  ASSERT_TRUE(s->put(hb, b).ok());
  EXPECT_TRUE(same(s->get(ha, a.size()), a));  // a is now the most recent
  ASSERT_TRUE(s->put(hc, c).ok());             // b goes
  EXPECT_EQ(s->entries(), 2u);
  EXPECT_LE(s->held(), 100000u);
  EXPECT_EQ(s->get(hb, b.size()).size(), 0u);
  EXPECT_TRUE(same(s->get(ha, a.size()), a));
  EXPECT_TRUE(same(s->get(hc, c.size()), c));
  // A reopen with a smaller limit keeps the most recent only.
  s.reset();
  auto t = open(d.path, 50000, "");
  EXPECT_EQ(t->entries(), 1u);
  EXPECT_TRUE(same(t->get(hc, c.size()), c));
}

TEST(Store, ACrashsTemporaryFileIsRemovedAndNeverTakenForAnEntry) {
  TempDir d;
  const Buffer a = bytes_of(30000, 4);
  const auto h = content_hash(a.data(), a.size());
  std::string dir;
  {
    auto s = open(d.path, 1 << 20, "k");
    dir = s->path();
  }
  const std::string name = DiskStore::name_of(h, a.size());
  // What a crash leaves: a temporary file, and (never made by the store, but a disk might) a
  // truncated file under an entry's name.
  std::ofstream(dir + "/" + name + ".tmp123-1") << "partial";
  std::ofstream(dir + "/" + name) << "short";
  auto s = open(d.path, 1 << 20, "k");
  EXPECT_EQ(s->entries(), 0u);
  EXPECT_FALSE(fs::exists(dir + "/" + name + ".tmp123-1"));
  EXPECT_FALSE(fs::exists(dir + "/" + name));
  ASSERT_TRUE(s->put(h, a).ok());
  for (const auto& e : fs::directory_iterator(dir))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos);
}

TEST(Store, IsScopedByCredential) {
  TempDir d;
  const Buffer a = bytes_of(30000, 5);
  const auto h = content_hash(a.data(), a.size());
  ASSERT_TRUE(open(d.path, 1 << 20, "alice")->put(h, a).ok());
  EXPECT_EQ(open(d.path, 1 << 20, "bob")->get(h, a.size()).size(), 0u);
  EXPECT_EQ(open(d.path, 1 << 20, "")->get(h, a.size()).size(), 0u);
  EXPECT_TRUE(same(open(d.path, 1 << 20, "alice")->get(h, a.size()), a));
}

TEST(Store, AReuploadToARestartedServerSendsTheHashOnly) {
  TempDir d;
  const int64_t n = int64_t{2} << 20;  // 8 MiB of f32
  std::vector<float> w(static_cast<size_t>(n));
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 977) * 0.5f;
  ServerOptions o;
  o.store_dir = d.path;
  for (int run = 0; run < 2; ++run) {
    auto srv = serve(Device::cpu(), o);  // a fresh server: its memory cache starts empty
    const Device dev = Device::remote(srv->url());
    dev.connect();
    const WireCounters before = wire_counters(dev);
    const Tensor t = from_vector<float>(std::vector<float>(w), {n}, dev);
    const float sum = t.sum().item<float>();
    const WireCounters after = wire_counters(dev);
    const uint64_t sent = after.bytes_out - before.bytes_out;
    if (run == 0) {
      EXPECT_GT(sent, static_cast<uint64_t>(n) * 4) << "the first upload sends the bytes";
    } else {
      EXPECT_LT(sent, 1024u) << "after the restart only the hash";
      EXPECT_EQ(t.to_vector<float>(), w);
    }
    EXPECT_GT(sum, 0.0f);
  }
}

// Small weights (a LayerNorm's, a bias) too: with TW_DEDUP_MIN_BYTES lowered, the client asks by
// hash for every upload of at least that many bytes, and the server keeps the bytes that follow a
// miss whatever their size, so after a restart each tensor costs the question only.
TEST(Store, SmallTensorsAreReuploadedByTheirHashWhenTheClientAsks) {
  TempDir d;
  ::setenv("TW_DEDUP_MIN_BYTES", "1024", 1);
  constexpr int kTensors = 24;
  std::vector<std::vector<float>> w(kTensors);
  for (int k = 0; k < kTensors; ++k) {
    w[k].resize(256 + 64 * static_cast<size_t>(k));  // 1 KiB to 7 KiB
    for (size_t i = 0; i < w[k].size(); ++i) w[k][i] = static_cast<float>((i * 13 + k) % 101);
  }
  ServerOptions o;
  o.store_dir = d.path;
  uint64_t sent[2] = {0, 0};
  for (int run = 0; run < 2; ++run) {
    auto srv = serve(Device::cpu(), o);  // a fresh server: its memory cache starts empty
    const Device dev = Device::remote(srv->url());
    dev.connect();
    const WireCounters before = wire_counters(dev);
    std::vector<Tensor> ts;
    for (int k = 0; k < kTensors; ++k) {
      ts.push_back(
          from_vector<float>(std::vector<float>(w[k]), {static_cast<int64_t>(w[k].size())}, dev));
    }
    dev.sync();
    sent[run] = wire_counters(dev).bytes_out - before.bytes_out;
    for (int k = 0; k < kTensors; ++k) EXPECT_EQ(ts[k].to_vector<float>(), w[k]) << k;
  }
  ::unsetenv("TW_DEDUP_MIN_BYTES");
  EXPECT_GT(sent[0], uint64_t{kTensors} * 1024) << "the first upload sends the bytes";
  EXPECT_LT(sent[1], uint64_t{kTensors} * 1024) << "after the restart the hashes only";
  EXPECT_LT(sent[1] * 8, sent[0]);
}

}  // namespace
}  // namespace tw::server
