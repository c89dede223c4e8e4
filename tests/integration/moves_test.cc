// Tensor moves without the client (protocol 3; docs/remote.md, "Moving tensors between
// servers"): same-server moves, server-to-server pulls by capability, the refusals, and a source
// that dies or stalls mid-transfer, against real server processes on 127.0.0.1 (port 0).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "api/sink.h"
#include "client/remote_backend.h"
#include "support/helpers.h"
#include "support/metric.h"
#include "support/server_process.h"
#include "tensorwire/remote.h"
#include "tensorwire/tensorwire.h"

namespace tw {
namespace {

using testing::read_error;
using testing::ServerProcess;
namespace proto = protocol;
using Clock = std::chrono::steady_clock;

client::Connection& conn(const Device& d) {
  return static_cast<client::RemoteBackend&>(d.sink()->backend()).connection();
}

// A Tensor naming id `id` of device `d` (made by a task sent below the API).
Tensor handle(const Device& d, ir::TensorId id, const TensorMeta& meta) {
  auto impl = std::make_shared<detail::TensorImpl>();
  impl->sink = d.sink();
  impl->id = id;
  impl->meta = meta;
  return Tensor(impl);
}

// Bytes the client sent and received on both devices' connections.
uint64_t client_bytes(const Device& a, const Device& b) {
  uint64_t n = 0;
  for (const Device* d : {&a, &b}) {
    WireCounters c = wire_counters(*d);
    n += c.bytes_out + c.bytes_in;
  }
  return n;
}

std::string id_of(const Device& d) { return remote_handshake(d).server_id; }

TEST(Moves, SameServerMoveIsBitExactAndSkipsTheClient) {
  ServerProcess server({"--devices", "2"});
  Device d0 = Device::remote(server.url(), 0);
  Device d1 = Device::remote(server.url(), 1);
  Device d0b = Device::remote(server.url(), 0);  // another session of the same device
  manual_seed(7);
  Tensor a = randn({256, 1024}, kF32, d0) * 3.0;  // 1 MiB, still being computed when moved
  Tensor n = from_vector<int32_t>({1, -2, 3, 2147483647, -2147483647 - 1, 0}, {2, 3}, d0);
  d0.flush();
  d1.connect();
  d0b.connect();
  const uint64_t before =
      client_bytes(d0, d1) + wire_counters(d0b).bytes_out + wire_counters(d0b).bytes_in;
  Tensor b = a.to(d1);
  Tensor c = a.to(d0b);
  Tensor m = n.to(d1);
  Tensor same = a.to(d0);  // within the session: a second id for the same storage
  Tensor b2 = b + 1.0;     // ops after the move run on the moved tensor
  d1.flush();
  d0b.flush();
  const uint64_t through =
      client_bytes(d0, d1) + wire_counters(d0b).bytes_out + wire_counters(d0b).bytes_in - before;
  EXPECT_LE(through, 4 * 1024u) << "four moves should cost a few hundred bytes each";
  EXPECT_EQ(b.device().str(), d1.str());
  EXPECT_EQ(a.to_bytes(), b.to_bytes());
  EXPECT_EQ(a.to_bytes(), c.to_bytes());
  EXPECT_EQ(a.to_bytes(), same.to_bytes());
  EXPECT_EQ(n.to_vector<int32_t>(), m.to_vector<int32_t>());
  EXPECT_EQ((a + 1.0).to_bytes(), b2.to_bytes());
}

TEST(Moves, ServerToServerMoveIsBitExact) {
  ServerProcess sa, sb;
  Device a = Device::remote(sa.url(), 0);
  Device b = Device::remote(sb.url(), 0);
  a.connect();
  b.connect();
  ASSERT_NE(id_of(a), id_of(b));
  manual_seed(11);
  Tensor x = randn({512, 1024}, kF32, a).relu();  // 2 MiB
  std::vector<int64_t> iv(1000);
  for (size_t i = 0; i < iv.size(); ++i) iv[i] = static_cast<int64_t>(i * i) - 77777;
  Tensor i64 = from_vector<int64_t>(iv, {10, 100}, a);
  Tensor empty = full({0, 3}, 1.0, kF32, a);
  a.flush();  // the upload above counts before the moves
  const uint64_t before = client_bytes(a, b);
  Tensor y = x.to(b);
  Tensor j = i64.to(b);
  Tensor e = empty.to(b);
  Tensor y2 = y * 2.0;
  b.flush();
  EXPECT_LE(client_bytes(a, b) - before, 3 * 1024u) << "the bytes must go from server to server";
  EXPECT_EQ(x.to_bytes(), y.to_bytes());
  EXPECT_EQ((x * 2.0).to_bytes(), y2.to_bytes());
  EXPECT_EQ(iv, j.to_vector<int64_t>());
  EXPECT_EQ(e.shape(), (Shape{0, 3}));
  EXPECT_TRUE(e.to_vector<float>().empty());
  // The source keeps its tensor; moving it again works (a fresh capability each time).
  EXPECT_EQ(x.to(b).to_bytes(), x.to_bytes());
}

// Protocol 17: a move between servers is issued without waiting for the source (an ExportAs
// task under a ticket the client drew, no reply): no round trip of the client's, the
// destination's pull waits at the source while the tensor is still computed there, and a source
// tensor that failed poisons the destination with the source's error.
TEST(Moves, TicketMovesTakeNoRoundTripOfTheClient) {
  ServerProcess sa, sb;
  Device a = Device::remote(sa.url(), 0);
  Device b = Device::remote(sb.url(), 0);
  a.connect();
  b.connect();
  manual_seed(5);
  Tensor w = randn({256, 256}, kF32, a) * 0.05;
  Tensor x = randn({64, 256}, kF32, a);
  for (int i = 0; i < 16; ++i) x = x.matmul(w).tanh();  // queued on a when the move is issued
  const uint64_t trips = wire_counters(a).round_trips + wire_counters(b).round_trips;
  Tensor y = x.to(b);
  Tensor y2 = y * 2.0;
  Tensor bad_index = tensor<int64_t>({0, 700}, a);
  Tensor bad = x.index_select(0, bad_index);  // fails on a
  Tensor bad_on_b = bad.to(b);
  EXPECT_EQ(wire_counters(a).round_trips + wire_counters(b).round_trips, trips)
      << "a move waited for the source";
  EXPECT_EQ(x.to_bytes(), y.to_bytes());
  EXPECT_EQ((x * 2.0).to_bytes(), y2.to_bytes());
  const std::string err = read_error(bad_on_b);
  EXPECT_NE(err.find("index_select"), std::string::npos) << err;
  EXPECT_NE(err.find("export of tensor"), std::string::npos) << err;
}

// A ticket capability for a ticket its session never exported under (made up below the API) is
// refused once the capability ttl has passed, naming the ticket; one naming another shape than
// the tensor's is refused at once.
TEST(Moves, TicketsNeverExportedAreRefusedAfterTheTtl) {
  ServerProcess sa({"--capability-ttl", "0.3"}), sb;
  Device a = Device::remote(sa.url(), 0);
  Device b = Device::remote(sb.url(), 0);
  Tensor x = full({4}, 1.5, kF32, a);
  a.flush();
  b.connect();
  const ir::TensorId xid = x.impl()->id;
  const TensorMeta meta{{4}, kF32};
  const std::string ticket(proto::kTicketBytes, 'q');
  auto import = [&](const TensorMeta& m) {
    const std::string cap =
        proto::encode_ticket_capability({id_of(a), remote_handshake(a).session_id, xid, m, ticket});
    const proto::TensorSource src{remote_handshake(a).session_id, xid, cap, sa.url(), ""};
    const ir::TensorId id = b.sink()->new_id();
    EXPECT_TRUE(conn(b).move_in(proto::TaskKind::kImport, id, m, src).ok());
    return handle(b, id, m);
  };
  const auto start = Clock::now();
  const std::string never = read_error(import(meta));
  EXPECT_NE(never.find("no tensor was exported under its ticket"), std::string::npos) << never;
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10)) << "not refused after the ttl";
  ASSERT_TRUE(conn(a).export_as(xid, ticket).ok());
  const std::string shape = read_error(import(TensorMeta{{2, 2}, kF32}));
  EXPECT_NE(shape.find("names a tensor f32[2, 2]"), std::string::npos) << shape;
}

// The source serves tls:// (a pinned self-signed certificate) and both servers require a
// credential: the destination dials tls:// pinning the fingerprint the client pins, and presents
// its own credential; a destination with another credential is refused by the source.
std::string credential_file(const std::string& secret) {
  char path[] = "/tmp/tw_moves_credential_XXXXXX";
  int fd = ::mkstemp(path);
  EXPECT_GE(fd, 0);
  const std::string line = secret + "\n";
  EXPECT_EQ(::write(fd, line.data(), line.size()), static_cast<ssize_t>(line.size()));
  ::close(fd);
  return path;
}

std::string printed_fingerprint(const ServerProcess& s) {
  const std::string prefix = "tls certificate sha256 ";
  for (const std::string& l : s.lines()) {
    if (l.rfind(prefix, 0) == 0) return l.substr(prefix.size(), 95);
  }
  return {};
}

TEST(Moves, OverTlsBetweenServersSharingACredential) {
  const std::string shared = credential_file("moves-secret"), other = credential_file("other");
  ServerProcess sa({"--listen", "tls://127.0.0.1:0", "--credential-file", shared});
  ServerProcess sb({"--credential-file", shared}), sc({"--credential-file", other});
  ASSERT_EQ(sa.urls().size(), 2u);
  RemoteOptions pin;
  pin.tls_fingerprint = printed_fingerprint(sa);
  ASSERT_EQ(pin.tls_fingerprint.size(), 95u) << "no fingerprint printed";
  ::setenv("TW_CREDENTIAL", "moves-secret", 1);
  Device a = remote_device(sa.urls()[1], 0, pin);
  Device b = Device::remote(sb.url(), 0);
  ::setenv("TW_CREDENTIAL", "other", 1);
  Device c = Device::remote(sc.url(), 0);
  ::unsetenv("TW_CREDENTIAL");
  Tensor x = arange(0, 1 << 20, 1, kF32, a);
  // Compared on b (over tcp): the bytes came over tls:// from server to server only.
  EXPECT_EQ(x.to(b).to_bytes(), arange(0, 1 << 20, 1, kF32, b).to_bytes());
  const std::string err = read_error(x.to(c));
  EXPECT_NE(err.find("from server " + sa.urls()[1]), std::string::npos) << err;
  EXPECT_NE(err.find("unauthorised"), std::string::npos) << err;
  ::unlink(shared.c_str());
  ::unlink(other.c_str());
}

// Below the API: capabilities used twice, altered, for another tensor, at another server, or
// after they expired are refused, and the refusal poisons the destination tensor.
TEST(Moves, RefusedCapabilitiesPoisonTheDestination) {
  ServerProcess sa({"--capability-ttl", "0.2"}), sb;
  Device a = Device::remote(sa.url(), 0);
  Device a2 = Device::remote(sa.url(), 0);
  Device b = Device::remote(sb.url(), 0);
  Tensor x = full({4}, 2.5, kF32, a);
  const ir::TensorId xid = x.impl()->id;
  const TensorMeta meta{{4}, kF32};
  a2.connect();
  b.connect();
  auto source = [&](const proto::Exported& e) {
    return proto::TensorSource{remote_handshake(a).session_id, xid, e.capability, "", ""};
  };
  auto move_local = [&](const proto::TensorSource& s) {
    const ir::TensorId id = a2.sink()->new_id();
    EXPECT_TRUE(conn(a2).move_in(proto::TaskKind::kMoveLocal, id, meta, s).ok());
    return handle(a2, id, meta);
  };
  auto e = conn(a).export_tensor(xid);
  ASSERT_TRUE(e.ok()) << e.status().message();

  proto::TensorSource tampered = source(*e);
  tampered.capability[tampered.capability.size() / 2] ^= 0x01;
  EXPECT_NE(read_error(move_local(tampered)).find("signature does not verify"), std::string::npos);

  proto::TensorSource wrong = source(*e);
  wrong.tensor = xid + 1000;
  EXPECT_NE(read_error(move_local(wrong)).find("does not grant tensor"), std::string::npos);

  EXPECT_EQ(move_local(source(*e)).to_vector<float>(), std::vector<float>(4, 2.5f));
  EXPECT_NE(read_error(move_local(source(*e))).find("used already"), std::string::npos);

  // Another server's capability, shown to b as if it were b's own.
  auto e2 = conn(a).export_tensor(xid);
  ASSERT_TRUE(e2.ok());
  const ir::TensorId bid = b.sink()->new_id();
  ASSERT_TRUE(conn(b).move_in(proto::TaskKind::kMoveLocal, bid, meta, source(*e2)).ok());
  const std::string other = read_error(handle(b, bid, meta));
  EXPECT_NE(other.find("issued by server " + id_of(a)), std::string::npos) << other;

  // A session of another client cannot make one up.
  proto::TensorSource forged = source(*e2);
  forged.capability = "not a capability";
  EXPECT_NE(read_error(move_local(forged)).find("capability refused: malformed"),
            std::string::npos);

  auto e3 = conn(a).export_tensor(xid);
  ASSERT_TRUE(e3.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_NE(read_error(move_local(source(*e3))).find("expired"), std::string::npos);
}

// A fake source server on 127.0.0.1 speaking protocol `version`: answers the peer's Hello with a
// Welcome, then announces a tensor and sends `send` bytes of it before closing (send < 0: stalls,
// never closing); a connection after the first (a retry) gets the whole tensor.
class FakeSource {
 public:
  explicit FakeSource(long send, uint16_t version = 9) : version_(version) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(fd_, 4) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      throw std::runtime_error("fake source: cannot listen");
    }
    url_ = "tcp://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
    thread_ = std::thread([this, send] { serve(send); });
  }
  ~FakeSource() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  const std::string& url() const { return url_; }

 private:
  static void write_all(int fd, const uint8_t* p, size_t n) {
    while (n > 0) {
      const ssize_t w = ::write(fd, p, n);
      if (w <= 0) return;
      p += w;
      n -= static_cast<size_t>(w);
    }
  }
  static void put(int fd, const proto::OutFrame& f) {
    std::vector<uint8_t> bytes(4);
    const uint64_t n = f.payload_size();
    for (int i = 0; i < 4; ++i) bytes[i] = static_cast<uint8_t>(n >> (8 * i));
    bytes.insert(bytes.end(), f.head.begin(), f.head.end());
    (void)!::write(fd, bytes.data(), bytes.size());
  }
  void serve(long send) {
    for (bool first = true; !stop_; first = false) {
      int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      serve_one(c, first ? send : long{4} << 20);
    }
  }
  void serve_one(int c, long send) {
    char buf[4096];
    (void)!::read(c, buf, sizeof buf);  // the Hello and the Fetch
    proto::OutFrame w;
    proto::Welcome welcome;
    // (9: a source before retryable pulls (protocol 10), the cut is final.)
    welcome.version = version_;
    proto::encode_welcome(welcome, w);
    put(c, w);
    if (send >= 0) {
      // A ReadResult head announcing 4 MiB of f32 [1048576], then only `send` bytes of it.
      proto::OutFrame r;
      TensorData d;
      d.meta = {{1 << 20}, kF32};
      d.bytes = Buffer::zeros(size_t{4} << 20);
      proto::encode_read_result(1, d, r);
      std::vector<uint8_t> head(4);
      const uint64_t n = r.payload_size();
      for (int i = 0; i < 4; ++i) head[i] = static_cast<uint8_t>(n >> (8 * i));
      head.insert(head.end(), r.head.begin(), r.head.end());
      write_all(c, head.data(), head.size());
      std::vector<uint8_t> part(static_cast<size_t>(send), 0);
      write_all(c, part.data(), part.size());
      // End with a FIN, not a reset: closing with the Fetch (sent after the Welcome) still
      // unread would reset the connection and could drop the bytes written above. Read what
      // came until the destination closes (bounded by a timeout).
      ::shutdown(c, SHUT_WR);
      timeval tv{5, 0};
      ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      while (::read(c, buf, sizeof buf) > 0) {
      }
      ::close(c);
      return;
    }
    while (!stop_) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ::close(c);
  }
  uint16_t version_;
  int fd_ = -1;
  std::string url_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Imports tensor f32 [1048576] from `url` into `b` below the API; returns its read error and
// how long it took to come.
std::pair<std::string, double> import_from(const Device& b, const std::string& url) {
  const TensorMeta meta{{1 << 20}, kF32};
  const ir::TensorId id = b.sink()->new_id();
  proto::TensorSource s{1, 1, "capability", url, ""};
  const auto t0 = Clock::now();
  EXPECT_TRUE(conn(b).move_in(proto::TaskKind::kImport, id, meta, s).ok());
  std::string err = read_error(handle(b, id, meta));
  return {err, std::chrono::duration<double>(Clock::now() - t0).count()};
}

TEST(Moves, SourceDyingMidTransferFailsTheMoveNamingBothServers) {
  ServerProcess sb;
  Device b = Device::remote(sb.url(), 0);
  FakeSource source(1 << 20);  // dies after 1 of the 4 MiB
  auto [err, seconds] = import_from(b, source.url());
  EXPECT_NE(err.find("from server " + source.url()), std::string::npos) << err;
  EXPECT_NE(err.find("into server " + id_of(b) + " (" + sb.url() + ")"), std::string::npos) << err;
  EXPECT_NE(err.find("connection ended after 1048607 of the 4194335 bytes"), std::string::npos)
      << err;
  EXPECT_LT(seconds, 5.0);
  // The session goes on.
  EXPECT_EQ(full({2}, 1.0, kF32, b).to_vector<float>(), std::vector<float>(2, 1.0f));
}

// An older source (protocol 10: FetchBound, no FetchFrom) keeps working: a pull cut after 1 MiB
// is tried again and fetches the tensor whole, which the destination counts as refetched.
TEST(Moves, CutPullFromAProtocol10SourceFetchesTheWholeTensorAgain) {
  ServerProcess sb({"--metrics", "tcp://127.0.0.1:0"});
  Device b = Device::remote(sb.url(), 0);
  FakeSource source(1 << 20, 10);
  const TensorMeta meta{{1 << 20}, kF32};
  const ir::TensorId id = b.sink()->new_id();
  ASSERT_TRUE(conn(b)
                  .move_in(proto::TaskKind::kImport, id, meta,
                           proto::TensorSource{1, 1, "capability", source.url(), ""})
                  .ok());
  EXPECT_EQ(handle(b, id, meta).to_vector<float>(), std::vector<float>(1 << 20, 0.0f));
  EXPECT_EQ(testing::metric_value(sb, "tensorwire_pull_retries_total"), 1);
  EXPECT_EQ(testing::metric_value(sb, "tensorwire_pull_bytes_refetched_total"), 1 << 20);
  EXPECT_EQ(testing::metric_value(sb, "tensorwire_pull_bytes_kept_total"), 0);
}

TEST(Moves, StalledSourceTimesOut) {
  ServerProcess sb({"--transfer-timeout", "0.3"});
  Device b = Device::remote(sb.url(), 0);
  FakeSource source(-1);
  auto [err, seconds] = import_from(b, source.url());
  EXPECT_NE(err.find("from server " + source.url()), std::string::npos) << err;
  EXPECT_NE(err.find("timed out"), std::string::npos) << err;
  EXPECT_LT(seconds, 5.0);
}

TEST(Moves, KilledSourceFailsTheMovePromptly) {
  ServerProcess sb;
  Device b = Device::remote(sb.url(), 0);
  std::string url;
  {
    ServerProcess sa;
    url = sa.url();
    sa.kill_hard();
  }
  auto [err, seconds] = import_from(b, url);
  EXPECT_NE(err.find("from server " + url), std::string::npos) << err;
  EXPECT_NE(err.find("into server " + id_of(b)), std::string::npos) << err;
  EXPECT_LT(seconds, 5.0);
}

}  // namespace
}  // namespace tw
