// A client never hangs on a silent peer (issue 50): a socket that listens and never answers
// (the kernel accepts the connection into its backlog; nobody reads) fails the handshake on
// every transport within the deadline, and the error names the address and the variable that
// sets the deadline.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "client/connection.h"
#include "net/url.h"

namespace tw::client {
namespace {

// A listening socket nobody accepts on: tcp on 127.0.0.1 port 0 (the port read back), or unix
// at `path`. Its URL, in the scheme asked for.
class SilentPeer {
 public:
  SilentPeer(const std::string& scheme, const std::string& path = {}) {
    if (scheme == "unix") {
      fd_ = ::socket(AF_UNIX, SOCK_STREAM, 0);
      sockaddr_un a{};
      a.sun_family = AF_UNIX;
      path.copy(a.sun_path, sizeof a.sun_path - 1);
      ::unlink(path.c_str());
      ok_ = ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
      path_ = path;
      url_ = "unix://" + path;
    } else {
      fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      ok_ = ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
      socklen_t len = sizeof a;
      ok_ = ok_ && ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0;
      url_ = scheme + "://127.0.0.1:" + std::to_string(ntohs(a.sin_port));
    }
    ok_ = ok_ && ::listen(fd_, 8) == 0;
  }
  ~SilentPeer() {
    ::close(fd_);
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  bool ok() const { return ok_; }
  const std::string& url() const { return url_; }

 private:
  int fd_ = -1;
  bool ok_ = false;
  std::string url_, path_;
};

// Connects to `peer` with a 300 ms deadline: fails, within a few seconds, naming the address and
// TW_HANDSHAKE_TIMEOUT_MS.
void expect_gives_up(const SilentPeer& peer) {
  ASSERT_TRUE(peer.ok()) << "cannot listen for " << peer.url();
  auto url = net::parse_url(peer.url());
  ASSERT_TRUE(url.ok()) << url.status().message();
  Options options;
  options.handshake_timeout_ms = 300;
  options.tls.fingerprint = std::string(64, '0');  // (never reached: the peer is silent)
  const auto t0 = std::chrono::steady_clock::now();
  auto w = enumerate(*url, options);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(w.ok()) << peer.url() << " answered";
  const std::string m = w.status().message();
  EXPECT_EQ(w.status().code(), StatusCode::kUnavailable) << m;
  EXPECT_NE(m.find(peer.url()), std::string::npos) << m;
  EXPECT_NE(m.find("TW_HANDSHAKE_TIMEOUT_MS"), std::string::npos) << m;
  EXPECT_NE(m.find("300 ms"), std::string::npos) << m;
  EXPECT_GE(s, 0.25) << m;
  EXPECT_LT(s, 5.0) << "the 300 ms deadline held the caller for " << s << " s";
}

TEST(HandshakeDeadline, SilentTcpPeer) { expect_gives_up(SilentPeer("tcp")); }

TEST(HandshakeDeadline, SilentUnixPeer) {
  expect_gives_up(SilentPeer("unix", "/tmp/tw_silent_" + std::to_string(::getpid()) + ".sock"));
}

TEST(HandshakeDeadline, SilentTlsPeer) { expect_gives_up(SilentPeer("tls")); }

// The variable reaches Options::from_env, which every remote device reads.
TEST(HandshakeDeadline, EnvironmentSetsTheDeadline) {
  ::setenv("TW_HANDSHAKE_TIMEOUT_MS", "1234", 1);
  EXPECT_EQ(Options::from_env().handshake_timeout_ms, 1234);
  ::unsetenv("TW_HANDSHAKE_TIMEOUT_MS");
  EXPECT_EQ(Options::from_env().handshake_timeout_ms, net::kDefaultHandshakeTimeoutMs);
}

}  // namespace
}  // namespace tw::client
