// Server-to-server moves in flight survive dropped connections (issue 35; docs/remote.md,
// "Dropped connections: resumable sessions"): a fault relay (tests/support/fault_relay.h) in
// front of the source cuts the destination's pull mid-transfer, which the destination tries again
// (protocol 10's FetchBound keeps the capability for that pull alone) and, with protocol 11's
// FetchFrom, asks only for the bytes it has not received; relays in front of both
// servers cut the client's own links while moves are in flight, which the resumable sessions
// absorb. Every move lands exactly once (the destination's transfer counter) with the source's
// bytes, over tcp:// and unix://.
#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "support/fault_relay.h"
#include "support/metric.h"
#include "support/server_process.h"
#include "tensorwire/remote.h"
#include "tensorwire/tensorwire.h"

namespace tw {
namespace {

using testing::FaultOptions;
using testing::FaultRelay;
using testing::ServerProcess;

int port_of(const std::string& url) { return std::stoi(url.substr(url.rfind(':') + 1)); }

// Tensors the server at `metrics` (its --metrics endpoint) received from other servers.
double transfers_in(const ServerProcess& s) {
  return testing::metric_value(s, "tensorwire_transfers_total{direction=\"in\"}");
}

// The fingerprint a server printed for its generated certificate ("tls certificate sha256 ...").
std::string fingerprint_of(const ServerProcess& s) {
  const std::string prefix = "tls certificate sha256 ";
  for (const std::string& l : s.lines())
    if (l.rfind(prefix, 0) == 0) return l.substr(prefix.size(), 95);  // AB:CD:... 32 bytes
  return {};
}

// tls: the source serves tls:// and the relay cuts the encrypted stream (the destination pins the
// certificate the client pins).
void pull_cut_mid_transfer(bool tls) {
  ServerProcess sa(tls ? std::vector<std::string>{"--listen", "tls://127.0.0.1:0", "--metrics",
                                                  "tcp://127.0.0.1:0"}
                       : std::vector<std::string>{"--metrics", "tcp://127.0.0.1:0"});
  ServerProcess sb({"--metrics", "tcp://127.0.0.1:0"});
  FaultOptions fo;
  fo.seed = tls ? 355 : 351;
  fo.max_cuts = 4;
  fo.cut_min_bytes = 256 << 10;  // every connection carrying a whole 4 MiB tensor is cut
  fo.cut_max_bytes = 3 << 20;
  FaultRelay relay(port_of(sa.urls().back()), fo);
  RemoteOptions pin;
  if (tls) pin.tls_fingerprint = fingerprint_of(sa);
  // The destination dials the source at the address the client used: the relay.
  Device a = remote_device(relay.url(tls ? "tls" : "tcp"), 0, pin);
  Device b = Device::remote(sb.url());
  manual_seed(35);
  constexpr int kMoves = 4;
  std::vector<Tensor> xs, ys;
  for (int i = 0; i < kMoves; ++i) {
    xs.push_back(randn({1024, 1024}, kF32, a) + static_cast<double>(i));  // 4 MiB, made on A
    ys.push_back(xs.back().to(b));
  }
  b.sync();
  // (The client's own link carries a few KB until the reads below: the cuts hit the pulls.)
  EXPECT_EQ(relay.cuts(), 4) << "the pulls were not cut";
  for (int i = 0; i < kMoves; ++i) EXPECT_EQ(xs[i].to_bytes(), ys[i].to_bytes()) << "move " << i;
  EXPECT_EQ(transfers_in(sb), kMoves) << "a move lost or landed twice";
  EXPECT_EQ(remote_stats(a).sessions_opened, 1u) << "the client's session on A was not resumed";
  // Each retry resumed where its pull was cut: the source sent the remainder only. A try from
  // offset o sends n - o bytes, o being at least what the retries before it kept.
  const double retries = testing::metric_value(sb, "tensorwire_pull_retries_total");
  const double kept = testing::metric_value(sb, "tensorwire_pull_bytes_kept_total");
  const double served =
      testing::metric_value(sa, "tensorwire_transfer_bytes_total{direction=\"out\"}");
  constexpr double kBytes = 4 << 20;
  EXPECT_GE(retries, kMoves) << "every pull was cut once at least";
  EXPECT_GT(kept, 0) << "no retry kept what it had received";
  EXPECT_EQ(testing::metric_value(sb, "tensorwire_pull_bytes_refetched_total"), 0);
  EXPECT_LE(served, kBytes * (kMoves + retries) - kept) << "bytes received before a cut sent again";
  EXPECT_GE(served, kBytes * kMoves);
}

TEST(ResumeMoves, PullCutMidTransferIsRetriedAndLandsOnce) { pull_cut_mid_transfer(false); }

TEST(ResumeMoves, PullCutMidTransferOverTls) { pull_cut_mid_transfer(true); }

struct Link {
  std::unique_ptr<ServerProcess> server;
  std::unique_ptr<FaultRelay> relay;
};

// A server and a relay in front of it, over tcp:// or unix://.
Link relayed(bool unix_socket, const std::string& name, const FaultOptions& fo) {
  Link l;
  if (!unix_socket) {
    l.server =
        std::make_unique<ServerProcess>(std::vector<std::string>{"--metrics", "tcp://127.0.0.1:0"});
    l.relay = std::make_unique<FaultRelay>(port_of(l.server->url()), fo);
    return l;
  }
  const std::string base = ::testing::TempDir() + "tw_rm_" + name + std::to_string(::getpid());
  l.server = std::make_unique<ServerProcess>(std::vector<std::string>{
      "--listen", "unix://" + base + ".sock", "--metrics", "tcp://127.0.0.1:0"});
  l.relay = std::make_unique<FaultRelay>(base + ".sock", base + "_relay.sock", fo);
  return l;
}

void client_links_cut_during_moves(bool unix_socket) {
  FaultOptions fo;
  fo.seed = unix_socket ? 353 : 352;
  fo.max_cuts = 12;
  // (A pull of 256 KiB is cut about one time in four: far from the kPullAttempts in a row that
  // would fail it.)
  fo.cut_min_bytes = 16 << 10;
  fo.cut_max_bytes = 1 << 20;
  Link la = relayed(unix_socket, "a", fo), lb = relayed(unix_socket, "b", fo);
  Device a = Device::remote(la.relay->url());
  Device b = Device::remote(lb.relay->url());
  manual_seed(36);
  constexpr int kMoves = 24;
  std::vector<Tensor> want, got;
  for (int i = 0; i < kMoves; ++i) {
    Tensor x = randn({256, 256}, kF32, a) * static_cast<double>(i + 1);  // 256 KiB
    Tensor y = x.to(b) * 2.0 + 1.0;
    want.push_back(x * 2.0 + 1.0);
    got.push_back(y);
    if (i % 4 == 3) (void)y.to_bytes();  // the client's links carry data while moves run
  }
  for (int i = 0; i < kMoves; ++i) EXPECT_EQ(want[i].to_bytes(), got[i].to_bytes()) << "move " << i;
  EXPECT_GE(la.relay->cuts() + lb.relay->cuts(), 6) << "the links were hardly cut";
  EXPECT_EQ(transfers_in(*lb.server), kMoves) << "a move lost or landed twice";
  EXPECT_EQ(remote_stats(a).sessions_opened, 1u);
  EXPECT_EQ(remote_stats(b).sessions_opened, 1u);
}

TEST(ResumeMoves, ClientLinksCutWhileMovesAreInFlight) { client_links_cut_during_moves(false); }

TEST(ResumeMoves, ClientLinksCutWhileMovesAreInFlightOverUnixSockets) {
  client_links_cut_during_moves(true);
}

}  // namespace
}  // namespace tw
