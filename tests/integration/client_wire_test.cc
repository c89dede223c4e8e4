// What the client puts on the wire, seen by a stand-in server: a listening socket on 127.0.0.1
// (port 0) in this process that completes the handshake, decodes every batch and answers syncs
// (framing by integration/raw_client.h).
// It checks the order of tasks, which a real server cannot show.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "api/sink.h"
#include "integration/raw_client.h"
#include "protocol/messages.h"
#include "tensorwire/remote.h"
#include "tensorwire/tensorwire.h"

namespace tw {
namespace {

namespace proto = protocol;

class StandInServer {
 public:
  // Welcomes with protocol `version`; answers syncs, and graph registrations with id 7.
  // `unix_path` non-empty: listens on that Unix socket instead of TCP.
  explicit StandInServer(uint16_t version = proto::kProtocolVersion, std::string unix_path = {})
      : version_(version), unix_path_(std::move(unix_path)) {
    if (!unix_path_.empty()) {
      listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM, 0);
      sockaddr_un u{};
      u.sun_family = AF_UNIX;
      std::memcpy(u.sun_path, unix_path_.c_str(),
                  std::min(unix_path_.size() + 1, sizeof u.sun_path - 1));
      ::unlink(unix_path_.c_str());
      if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&u), sizeof u) != 0 ||
          ::listen(listen_fd_, 1) != 0) {
        throw std::runtime_error("stand-in server: cannot listen on " + unix_path_);
      }
      thread_ = std::thread([this] { serve(); });
      return;
    }
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = 0;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(listen_fd_, 1) != 0 ||
        ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      throw std::runtime_error("stand-in server: cannot listen on 127.0.0.1");
    }
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~StandInServer() {
    ::shutdown(listen_fd_, SHUT_RDWR);
    thread_.join();
    ::close(listen_fd_);
    if (!unix_path_.empty()) ::unlink(unix_path_.c_str());
  }
  std::string url() const {
    if (!unix_path_.empty()) return "unix://" + unix_path_;
    return "tcp://127.0.0.1:" + std::to_string(port_);
  }
  std::vector<proto::Task> tasks() {
    std::lock_guard<std::mutex> lock(mu_);
    return tasks_;
  }
  std::string error() {
    std::lock_guard<std::mutex> lock(mu_);
    return error_;
  }

 private:
  void fail(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_.empty()) error_ = why;
  }
  void serve() {
    pollfd pf{listen_fd_, POLLIN, 0};
    if (::poll(&pf, 1, 20000) <= 0) return;
    const int fd = ::accept(listen_fd_, nullptr, nullptr);
    if (fd < 0) return;
    testing::RawClient conn(fd, 20000);  // the framing of the raw client, from the other end
    auto next = [&]() -> std::optional<Buffer> {
      auto f = conn.read_frame();
      if (!f) return std::nullopt;
      return Buffer::copy_of(f->data(), f->size());
    };
    std::optional<Buffer> frame = next();
    if (!frame || !proto::decode_hello(*frame).ok()) {
      fail("no Hello");
      return;
    }
    proto::Welcome w;
    w.version = version_;
    w.session_id = 1;
    w.server_id = "stand-in";
    w.devices = {{"cpu:0", "cpu", 1ull << 30, 0xFF}};
    if (w.version >= proto::kDeviceDescriptionVersion) {
      w.descriptions = {{"stand-in", 1ull << 30, 1ull << 30, true, {}}};
    }
    w.limits = {64ull << 20, 1ull << 30, 4, 64};
    proto::OutFrame welcome;
    proto::encode_welcome(w, welcome);
    if (!conn.send_frame(welcome)) fail("send failed");
    while ((frame = next())) {
      std::vector<proto::Task> batch;
      const Status st = proto::decode_batch(*frame, batch);
      if (!st.ok()) fail(st.message());
      {
        // Recorded before any reply: a client that saw its sync answered finds its tasks here.
        std::lock_guard<std::mutex> lock(mu_);
        tasks_.insert(tasks_.end(), batch.begin(), batch.end());
      }
      for (const proto::Task& t : batch) {
        proto::OutFrame reply;
        if (const auto* sync = std::get_if<proto::SyncTask>(&t)) {
          proto::encode_sync_result(sync->request_id, Status::OK(), reply);
        } else if (const auto* reg = std::get_if<proto::RegisterGraphTask>(&t)) {
          proto::encode_graph_result(reg->request_id, ir::GraphId{7}, reply);
        } else {
          continue;
        }
        if (!conn.send_frame(reply)) fail("send failed");
      }
    }
  }

  const uint16_t version_;
  const std::string unix_path_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::vector<proto::Task> tasks_;
  std::string error_;
};

// One letter per task: o(p), d(rop), s(ync), r(ead), t (stats), g (register graph), x (run one),
// e(xport), i(mport), m (same-server move), c(ollective), u (upload from a segment), R (read
// into a segment), E (export under a ticket, protocol 17).
std::string kinds(const std::vector<proto::Task>& tasks) {
  std::string s;
  for (const proto::Task& t : tasks) {
    switch (proto::task_kind(t)) {
      case proto::TaskKind::kOp: s += 'o'; break;
      case proto::TaskKind::kDrop:
      case proto::TaskKind::kDropPacked: s += 'd'; break;  // (decoded as kDrop)
      case proto::TaskKind::kSync: s += 's'; break;
      case proto::TaskKind::kRead: s += 'r'; break;
      case proto::TaskKind::kStats: s += 't'; break;
      case proto::TaskKind::kRegisterGraph: s += 'g'; break;
      case proto::TaskKind::kRunGraph:
      case proto::TaskKind::kRunGraphPacked: s += 'x'; break;  // (decoded as kRunGraph)
      case proto::TaskKind::kExport: s += 'e'; break;
      case proto::TaskKind::kImport: s += 'i'; break;
      case proto::TaskKind::kMoveLocal: s += 'm'; break;
      case proto::TaskKind::kCollective: s += 'c'; break;
      case proto::TaskKind::kFromSegment: s += 'u'; break;
      case proto::TaskKind::kReadToSegment: s += 'R'; break;
      case proto::TaskKind::kUploadByHash: s += 'h'; break;
      case proto::TaskKind::kCompressReplies: s += 'z'; break;
      case proto::TaskKind::kRegisterGraphAs: s += 'G'; break;
      case proto::TaskKind::kExportAs: s += 'E'; break;
    }
  }
  return s;
}

// A tensor released between two ops is dropped there on the wire (docs/remote.md, Batching), not
// at the end of the batch: the server frees its memory before running the next op. Releases with
// no op between them share one drop task; a drop never overtakes the op that made the tensor.
TEST(ClientWire, DropsTravelWhereTheProgramReleasedTheTensors) {
  StandInServer server;
  ::setenv("TW_FLUSH_IDLE_US", "30000000", 1);  // only the sync sends the batch
  Device d = Device::remote(server.url());
  ::unsetenv("TW_FLUSH_IDLE_US");
  Tensor a = full({4}, 1.0, kF32, d);  // o
  ir::TensorId b_id = 0, c_id = 0;
  {
    Tensor b = a * 2.0;  // o
    Tensor c = a + 1.0;  // o
    b_id = b.id();
    c_id = c.id();
  }                    // b and c released: one drop task
  Tensor e = a - 1.0;  // o
  d.sync();            // s
  ASSERT_EQ(server.error(), "");
  const std::vector<proto::Task> tasks = server.tasks();
  ASSERT_EQ(kinds(tasks), "ooodos");
  std::vector<ir::TensorId> dropped = std::get<proto::DropTask>(tasks[3]).ids;
  std::sort(dropped.begin(), dropped.end());
  std::vector<ir::TensorId> want = {b_id, c_id};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(dropped, want);
}

// A device on `server` whose batches go out only when something flushes them (a registration, a
// sync), not when the client falls idle.
Device flushed_only(const StandInServer& server) {
  ::setenv("TW_FLUSH_IDLE_US", "30000000", 1);
  Device d = Device::remote(server.url());
  ::unsetenv("TW_FLUSH_IDLE_US");
  return d;
}

// A graph of `n` adds over one [4] f32 input: x + x, then + x each time (ids 1..n + 1).
ir::Graph adds(ir::TensorId n) {
  ir::Graph g;
  g.input_ids = {1};
  g.inputs = {{{4}, kF32}};
  for (ir::TensorId i = 1; i <= n; ++i)
    g.ops.push_back(ir::Binary{ir::BinaryKind::kAdd, {i}, {1}, {i + 1}});
  g.output_ids = {n + 1};
  return g;
}

// A graph registration waits for its id alone in its frame (what was queued goes first); runs
// are then batched like ops, one small task each whatever the graph's op count.
// Protocol 3 runs take 33 bytes each (kind, graph id, two u32 counts, two u64 ids); protocol 4's
// packed runs 14 (kind, graph id, and per list a count byte and the id's varint: x's id in one
// byte, 1000..1002 in two).
TEST(ClientWire, GraphRunsAreBatchedLikeOps) {
  for (const auto& [version, run_bytes] : {std::pair<uint16_t, uint64_t>{3, 33}, {4, 14}}) {
    SCOPED_TRACE("protocol " + std::to_string(version));
    StandInServer server(version);
    Device d = flushed_only(server);  // only the registration and the sync send
    auto& sink = *d.sink();
    const ir::Graph g = adds(100);
    Tensor x = full({4}, 1.0, kF32, d);  // o, sent before the registration
    auto id = sink.register_graph(g);    // g
    ASSERT_TRUE(id.ok()) << id.status().message();
    EXPECT_EQ(*id, 7u);
    const tw::WireCounters before = wire_counters(d);
    for (ir::TensorId out = 1000; out < 1003; ++out) {  // x x x
      const std::vector<ir::TensorId> ins = {x.id()}, outs = {out};
      ASSERT_TRUE(sink.run_graph(*id, ins, outs).ok());
    }
    d.sync();  // s
    const tw::WireCounters after = wire_counters(d);
    ASSERT_EQ(server.error(), "");
    const std::vector<proto::Task> tasks = server.tasks();
    ASSERT_EQ(kinds(tasks), "ogxxxs");
    EXPECT_EQ(std::get<proto::RegisterGraphTask>(tasks[1]).graph.ops.size(), 100u);
    const auto& run = std::get<proto::RunGraphTask>(tasks[2]);
    EXPECT_EQ(run.graph_id, 7u);
    EXPECT_EQ(run.inputs, std::vector<ir::TensorId>{x.id()});
    EXPECT_EQ(std::get<proto::RunGraphTask>(tasks[4]).outputs, std::vector<ir::TensorId>{1002});
    // The three runs and the sync went in one frame of 5 + 3 * run_bytes + 9 bytes (and its
    // header).
    EXPECT_EQ(after.frames_out - before.frames_out, 1u);
    EXPECT_EQ(after.bytes_out - before.bytes_out, 4u + 5 + 3 * run_bytes + 9);
    EXPECT_EQ(run.packed_ids, version >= 4);
  }
}

// Protocol 11: the client names the graph (RegisterGraphAs) and waits for nothing; the
// registration leads the frame the runs after it share (what was queued before goes first).
TEST(ClientWire, AVersion11RegistrationWaitsForNothing) {
  StandInServer server(11);
  Device d = flushed_only(server);  // only the registration's flush and the sync send
  auto& sink = *d.sink();
  const ir::Graph g = adds(1);
  Tensor x = full({4}, 1.0, kF32, d);  // o
  const tw::WireCounters before = wire_counters(d);
  auto id = sink.register_graph(g);  // G
  ASSERT_TRUE(id.ok()) << id.status().message();
  auto second = sink.register_graph(g);  // G
  ASSERT_TRUE(second.ok()) << second.status().message();
  EXPECT_NE(*id, *second);
  for (ir::TensorId out = 1000; out < 1002; ++out) {  // x x
    const std::vector<ir::TensorId> ins = {x.id()}, outs = {out};
    ASSERT_TRUE(sink.run_graph(out == 1000 ? *id : *second, ins, outs).ok());
  }
  EXPECT_EQ(wire_counters(d).round_trips, before.round_trips);
  d.sync();  // s
  EXPECT_EQ(wire_counters(d).round_trips, before.round_trips + 1);
  ASSERT_EQ(server.error(), "");
  const std::vector<proto::Task> tasks = server.tasks();
  ASSERT_EQ(kinds(tasks), "oGGxxs");
  EXPECT_EQ(std::get<proto::RegisterGraphAsTask>(tasks[1]).graph_id, *id);
  EXPECT_EQ(std::get<proto::RegisterGraphAsTask>(tasks[2]).graph_id, *second);
  EXPECT_EQ(std::get<proto::RunGraphTask>(tasks[4]).graph_id, *second);
  // A bad graph is refused at the call, naming the op, and nothing goes out for it.
  ir::Graph bad = g;
  bad.inputs[0] = {{4}, kI64};
  bad.ops.push_back(ir::MatMul{{2}, {2}, {3}});
  bad.output_ids = {3};
  auto refused = sink.register_graph(bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("graph op 1"), std::string::npos)
      << refused.status().message();
  d.sync();
  EXPECT_EQ(kinds(server.tasks()), "oGGxxss");
}

TEST(ClientWire, AVersion1ServerIsNotSentGraphs) {
  StandInServer server(1);
  Device d = Device::remote(server.url());
  auto id = d.sink()->register_graph(ir::Graph{});
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(id.status().message().find("speaks protocol 1"), std::string::npos)
      << id.status().message();
  d.sync();
  EXPECT_EQ(kinds(server.tasks()), "s");  // no graph task went out
}

// A version-5 client meeting a version-4 server on a Unix socket sends its large tensors through
// the socket: a FromHost op with the bytes, no AttachSegment (which the stand-in, decoding every
// frame as a batch, would report) and no segment task; a read is a plain Read.
TEST(ClientWire, AVersion4ServerGetsLargeTensorsThroughTheSocket) {
  StandInServer server(4, "/tmp/tw-standin-" + std::to_string(getpid()) + ".sock");
  Device d = Device::remote(server.url());
  std::vector<uint8_t> big(3 << 20, 7);
  Tensor t = from_bytes(big, {static_cast<int64_t>(big.size())}, kU8, d);
  d.sync();
  EXPECT_EQ(server.error(), "");
  const std::vector<proto::Task> tasks = server.tasks();  // held: fh points into it
  EXPECT_EQ(kinds(tasks), "os");
  auto* fh = std::get_if<ir::FromHost>(&std::get<proto::OpTask>(tasks.at(0)).op);
  ASSERT_NE(fh, nullptr);
  EXPECT_EQ(fh->data.data.size(), big.size());
}

}  // namespace
}  // namespace tw
