// Deduplicated uploads whose bytes the client holds (client/dedup.cc): `t.to(remote)` of a host
// tensor and `from_vector(std::move(v), ...)` ask the server by content hash and return without
// waiting for its answer; the frames made meanwhile wait for it on the client. Checked here: a
// hit sends no bytes and costs the caller no round trip; a miss (new bytes, or bytes the
// server's cache evicted) sends them and the ops after the upload see them; several uploads in
// flight, each hit or miss, keep their order; quotas and frame limits hold; a session whose
// connection is cut while answers are awaited resumes with every tensor right.
#include <gtest/gtest.h>

#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "support/fault_relay.h"
#include "support/server_process.h"
#include "tensorwire/profile.h"
#include "tensorwire/remote.h"
#include "tensorwire/tensorwire.h"

namespace tw {
namespace {

using testing::ServerProcess;

constexpr size_t kBytes = size_t{4} << 20;  // client::Options::kDedupMinBytes

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t x = rng();
    for (size_t k = 0; k < 8 && i + k < n; ++k) v[i + k] = static_cast<uint8_t>(x >> (8 * k));
  }
  return v;
}

Shape shape_of(const std::vector<uint8_t>& v) { return {static_cast<int64_t>(v.size())}; }

// The sum of the bytes, as the server computes it (exact in f64 for these sizes).
double sum_of(const std::vector<uint8_t>& v) { return std::accumulate(v.begin(), v.end(), 0.0); }
double remote_sum(const Tensor& t) { return t.to(kF64).sum().item<double>(); }

struct EnvVar {
  EnvVar(const char* name, const char* value) : name(name) { ::setenv(name, value, 1); }
  ~EnvVar() { ::unsetenv(name); }
  const char* name;
};

// The first upload of the bytes (the server keeps them), from a span: it waits for the answer.
Tensor seed_upload(const std::vector<uint8_t>& host, const Device& d) {
  Tensor t = from_bytes(host, shape_of(host), kU8, d);
  d.sync();
  return t;
}

TEST(Dedup, HitFromAHostTensorSendsAHashAndDoesNotWait) {
  ServerProcess server;
  const std::vector<uint8_t> host = random_bytes(kBytes, 1);
  Device first = Device::remote(server.url());
  Tensor kept = seed_upload(host, first);
  Device d = Device::remote(server.url());
  d.sync();
  const Tensor on_host = from_bytes(host, shape_of(host), kU8);
  const WireCounters before = wire_counters(d);
  Tensor t = on_host.to(d);
  Tensor doubled = t.to(kF64) * 2.0;  // held on the client until the answer
  EXPECT_EQ(wire_counters(d).round_trips, before.round_trips) << "the upload waited";
  d.sync();
  EXPECT_LE(wire_counters(d).bytes_out - before.bytes_out, 1024u);
  EXPECT_EQ(t.to_vector<uint8_t>(), host);
  EXPECT_EQ(doubled.sum().item<double>(), 2 * sum_of(host));
}

TEST(Dedup, MissSendsTheBytesAndLaterOpsSeeThem) {
  ServerProcess server;
  Device d = Device::remote(server.url());
  d.connect();
  std::vector<uint8_t> host = random_bytes(kBytes, 2);
  const double expect = sum_of(host);
  const WireCounters before = wire_counters(d);
  Tensor t = from_vector(std::move(host), {static_cast<int64_t>(kBytes)}, d);
  Tensor plus = t.to(kF64) + 1.0;
  EXPECT_EQ(wire_counters(d).round_trips, before.round_trips) << "the upload waited";
  EXPECT_EQ(plus.sum().item<double>(), expect + static_cast<double>(kBytes));
  EXPECT_GE(wire_counters(d).bytes_out - before.bytes_out, kBytes);
  EXPECT_EQ(remote_sum(t), expect);
}

TEST(Dedup, MissAfterTheServersCacheEvictedTheBytes) {
  EnvVar cache("TW_DEDUP_CACHE_BYTES", "6291456");  // 6 MiB: one 4 MiB entry
  ServerProcess server;
  const std::vector<uint8_t> a = random_bytes(kBytes, 3), b = random_bytes(kBytes, 4);
  Device d = Device::remote(server.url());
  (void)seed_upload(a, d);
  (void)seed_upload(b, d);  // evicts a's entry (the tensors are dropped too)
  const Tensor on_host = from_bytes(a, shape_of(a), kU8);
  const uint64_t before = wire_counters(d).bytes_out;
  Tensor t = on_host.to(d);
  EXPECT_EQ(t.to_vector<uint8_t>(), a);
  EXPECT_GE(wire_counters(d).bytes_out - before, kBytes);
  // Now held again: the next one is a hit.
  const uint64_t again = wire_counters(d).bytes_out;
  Tensor u = on_host.to(d);
  d.sync();
  EXPECT_LE(wire_counters(d).bytes_out - again, 1024u);
  EXPECT_EQ(remote_sum(u), sum_of(a));
}

TEST(Dedup, SeveralInFlightKeepTheirOrder) {
  ServerProcess server;
  const std::vector<uint8_t> a = random_bytes(kBytes, 5), b = random_bytes(kBytes, 6),
                             c = random_bytes(kBytes + 8, 7);
  Device d = Device::remote(server.url());
  Tensor kept = seed_upload(a, d);
  kept = Tensor();
  const Tensor ha = from_bytes(a, shape_of(a), kU8), hb = from_bytes(b, shape_of(b), kU8);
  // hit, miss, hit, miss, with ops and drops between them.
  Tensor ta = ha.to(d);
  Tensor sa = ta.to(kF64).sum();
  Tensor tb = hb.to(d);
  Tensor sb = tb.to(kF64).sum();
  Tensor ta2 = ha.to(d);
  ta = Tensor();
  std::vector<uint8_t> moved = c;
  Tensor tc = from_vector(std::move(moved), shape_of(c), d);
  Tensor sc = tc.to(kF64).sum();
  EXPECT_EQ(sa.item<double>(), sum_of(a));
  EXPECT_EQ(sb.item<double>(), sum_of(b));
  EXPECT_EQ(sc.item<double>(), sum_of(c));
  EXPECT_EQ(ta2.to_vector<uint8_t>(), a);
  EXPECT_EQ(tb.to_vector<uint8_t>(), b);
}

TEST(Dedup, QuotaHoldsForTensorsMadeFromTheCache) {
  ServerProcess server({"--session-memory", "6291456"});
  const std::vector<uint8_t> host = random_bytes(kBytes, 8);
  Device first = Device::remote(server.url());
  Tensor kept = seed_upload(host, first);
  Device d = Device::remote(server.url());
  const Tensor on_host = from_bytes(host, shape_of(host), kU8);
  Tensor one = on_host.to(d);
  Tensor two = on_host.to(d);  // 8 MiB held: over the session's 6 MiB
  EXPECT_EQ(one.to_vector<uint8_t>(), host);
  try {
    (void)two.to_vector<uint8_t>();
    ADD_FAILURE() << "expected a quota error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("quota"), std::string::npos) << e.what();
  }
  EXPECT_EQ(ones({10}, kF32, d).sum().item<float>(), 10.0f);  // the session goes on
}

TEST(Dedup, AnUploadNoFrameCarriesIsRefusedAtOnce) {
  ServerProcess server({"--max-frame", "2097152"});
  Device d = Device::remote(server.url());
  std::vector<uint8_t> host = random_bytes(kBytes, 9);
  try {
    Tensor t = from_vector(std::move(host), {static_cast<int64_t>(kBytes)}, d);
    ADD_FAILURE() << "expected the frame limit's error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--max-frame"), std::string::npos) << e.what();
  }
  EXPECT_EQ(ones({10}, kF32, d).sum().item<float>(), 10.0f);
}

TEST(Dedup, OffSendsTheBytes) {
  ServerProcess server;
  const std::vector<uint8_t> host = random_bytes(kBytes, 10);
  Device first = Device::remote(server.url());
  Tensor kept = seed_upload(host, first);
  EnvVar off("TW_DEDUP", "0");
  Device d = Device::remote(server.url());
  d.connect();
  const uint64_t before = wire_counters(d).bytes_out;
  Tensor t = from_bytes(host, shape_of(host), kU8).to(d);
  d.sync();
  EXPECT_GE(wire_counters(d).bytes_out - before, kBytes);
}

// A connection cut (tests/support/fault_relay.h) while answers are awaited and frames held: the
// session resumes, the question or its answer is sent again, and every tensor is right.
TEST(Dedup, CutsWhileAnswersAreAwaited) {
  ServerProcess server;
  const std::vector<uint8_t> a = random_bytes(kBytes, 11), b = random_bytes(kBytes, 12);
  Device first = Device::remote(server.url());
  Tensor kept = seed_upload(a, first);
  testing::FaultOptions fo;
  fo.seed = 34;
  fo.max_cuts = 6;
  fo.cut_min_bytes = 256;
  fo.cut_max_bytes = 3 << 20;
  testing::FaultRelay relay(std::stoi(server.url().substr(server.url().rfind(':') + 1)), fo);
  Device d = Device::remote(relay.url());
  const Tensor ha = from_bytes(a, shape_of(a), kU8), hb = from_bytes(b, shape_of(b), kU8);
  std::vector<Tensor> sums;
  for (int i = 0; i < 6; ++i) {
    Tensor t = (i % 2 == 0 ? ha : hb).to(d);
    sums.push_back(t.to(kF64).sum());
  }
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(sums[static_cast<size_t>(i)].item<double>(), sum_of(i % 2 == 0 ? a : b)) << i;
  }
  EXPECT_GE(relay.cuts(), 1) << "the run ended before the relay cut it";
  // `first` and d: no new session for d after a cut.
  EXPECT_EQ(remote_stats(d).sessions_opened, 2u) << "a new session instead of the resumed one";
}

}  // namespace
}  // namespace tw
