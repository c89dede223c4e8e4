// What the client puts on the wire, seen by a stand-in server: a listening socket on 127.0.0.1
// (port 0) in this process that completes the handshake, decodes every batch and answers syncs.
// It checks the order of tasks, which a real server cannot show.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "protocol/messages.h"
#include "support/frames.h"
#include "tensorwire/remote.h"
#include "tensorwire/tensorwire.h"

namespace tw {
namespace {

namespace proto = protocol;

class StandInServer {
 public:
  StandInServer() {
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
  }
  std::string url() const { return "tcp://127.0.0.1:" + std::to_string(port_); }
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
  bool read_exact(int fd, uint8_t* p, size_t n) {
    while (n > 0) {
      pollfd pf{fd, POLLIN, 0};
      if (::poll(&pf, 1, 20000) <= 0) return false;
      ssize_t k = ::recv(fd, p, n, 0);
      if (k <= 0) return false;
      p += k;
      n -= static_cast<size_t>(k);
    }
    return true;
  }
  bool read_frame(int fd, Buffer& out) {
    uint8_t h[4];
    if (!read_exact(fd, h, 4)) return false;
    const uint32_t len = uint32_t{h[0]} | uint32_t{h[1]} << 8 | uint32_t{h[2]} << 16 | uint32_t{h[3]} << 24;
    if (len > (64u << 20)) return false;
    out = Buffer::allocate(len);
    return read_exact(fd, out.as<uint8_t>(), len);
  }
  void send_frame(int fd, const proto::OutFrame& f) {
    std::vector<uint8_t> payload = testing::flatten(f);
    std::vector<uint8_t> b(4);
    for (int i = 0; i < 4; ++i) b[static_cast<size_t>(i)] = static_cast<uint8_t>(payload.size() >> (8 * i));
    b.insert(b.end(), payload.begin(), payload.end());
    if (::send(fd, b.data(), b.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(b.size())) {
      fail("send failed");
    }
  }
  void serve() {
    pollfd pf{listen_fd_, POLLIN, 0};
    if (::poll(&pf, 1, 20000) <= 0) return;
    const int fd = ::accept(listen_fd_, nullptr, nullptr);
    if (fd < 0) return;
    Buffer frame;
    if (!read_frame(fd, frame) || !proto::decode_hello(frame).ok()) {
      fail("no Hello");
      ::close(fd);
      return;
    }
    proto::Welcome w;
    w.session_id = 1;
    w.server_id = "stand-in";
    w.devices = {{"cpu:0", "cpu", 1ull << 30, 0xFF}};
    w.limits = {64ull << 20, 1ull << 30, 4, 64};
    proto::OutFrame welcome;
    proto::encode_welcome(w, welcome);
    send_frame(fd, welcome);
    while (read_frame(fd, frame)) {
      std::vector<proto::Task> batch;
      const Status st = proto::decode_batch(frame, batch);
      if (!st.ok()) fail(st.message());
      for (const proto::Task& t : batch) {
        if (t.kind == proto::TaskKind::kSync) {
          proto::OutFrame reply;
          proto::encode_sync_result(t.request_id, Status::OK(), reply);
          send_frame(fd, reply);
        }
      }
      std::lock_guard<std::mutex> lock(mu_);
      tasks_.insert(tasks_.end(), batch.begin(), batch.end());
    }
    ::close(fd);
  }

  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::vector<proto::Task> tasks_;
  std::string error_;
};

// One letter per task: o(p), d(rop), s(ync), r(ead), t (stats).
std::string kinds(const std::vector<proto::Task>& tasks) {
  std::string s;
  for (const proto::Task& t : tasks) {
    switch (t.kind) {
      case proto::TaskKind::kOp: s += 'o'; break;
      case proto::TaskKind::kDrop: s += 'd'; break;
      case proto::TaskKind::kSync: s += 's'; break;
      case proto::TaskKind::kRead: s += 'r'; break;
      case proto::TaskKind::kStats: s += 't'; break;
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
  Tensor a = full({4}, 1.0, kF32, d);         // o
  ir::TensorId b_id = 0, c_id = 0;
  {
    Tensor b = a * 2.0;                       // o
    Tensor c = a + 1.0;                       // o
    b_id = b.id();
    c_id = c.id();
  }                                           // b and c released: one drop task
  Tensor e = a - 1.0;                         // o
  d.sync();                                   // s
  ASSERT_EQ(server.error(), "");
  const std::vector<proto::Task> tasks = server.tasks();
  ASSERT_EQ(kinds(tasks), "ooodos");
  std::vector<ir::TensorId> dropped = tasks[3].ids;
  std::sort(dropped.begin(), dropped.end());
  std::vector<ir::TensorId> want = {b_id, c_id};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(dropped, want);
}

}  // namespace
}  // namespace tw
