// A resumable session over unix:// whose shared-memory path (protocol 5, client/shm_pool.cc) is
// in use when the connection drops (issue 35): a fault relay that passes descriptors along
// (tests/support/fault_relay.h) cuts the link every few kilobytes, so that cuts land while
// segments are being attached and while uploads and reads go through them; the resume passes an
// attachment the server had not received again with its descriptor. Every byte comes back
// identical, the session is the same one, and the bulk bytes still skip the socket.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "support/fault_relay.h"
#include "support/server_process.h"
#include "tensorwire/remote.h"
#include "tensorwire/tensorwire.h"

namespace tw {
namespace {

using testing::ServerProcess;

TEST(ResumeShm, CutsDuringAttachmentsAndSegmentTransfers) {
  const std::string base = ::testing::TempDir() + "tw_rshm_" + std::to_string(::getpid());
  ServerProcess server({"--listen", "unix://" + base + ".sock"});
  tw::testing::FaultOptions fo;
  fo.seed = 354;
  fo.max_cuts = 10;
  fo.cut_min_bytes = 384;  // the socket carries only the frames: cut every few of them
  fo.cut_max_bytes = 1536;
  tw::testing::FaultRelay relay(base + ".sock", base + "_relay.sock", fo);
  const Device d = Device::remote(relay.url());
  uint64_t payload = 0;
  for (int i = 0; i < 16; ++i) {
    // 1 to 8 MiB and odd sizes: new segments, larger ones replacing smaller ones (re-attached).
    const int64_t n = (int64_t{1} << (18 + i % 4)) + 7 * i;
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t k = 0; k < n; ++k) v[static_cast<size_t>(k)] = static_cast<float>(k % 977) + i;
    const Tensor t = from_vector<float>(v, {n}, d);
    EXPECT_EQ((t + 0.0).to_vector<float>(), v) << "transfer " << i;
    payload += 2 * static_cast<uint64_t>(n) * sizeof(float);
  }
  std::fprintf(stderr, "%d cuts, %d connections, %llu bytes through the relay\n", relay.cuts(),
               relay.connections(), static_cast<unsigned long long>(relay.bytes()));
  EXPECT_GE(relay.cuts(), 5) << "the link was hardly cut";
  EXPECT_EQ(remote_stats(d).sessions_opened, 1u) << "the session was not resumed";
  const WireCounters w = wire_counters(d);
  EXPECT_LT(w.bytes_out + w.bytes_in, payload / 10) << "the bulk bytes went through the socket";
}

}  // namespace
}  // namespace tw
