// Two servers on one unix:// path (issue 50): the second refuses to start while the first is
// listening (it would otherwise remove the first's socket file and leave it running unreachable),
// and a socket file nobody listens on any more (a server that crashed) is taken over.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <asio.hpp>
#include <string>

#include "net/stream.h"
#include "net/url.h"

namespace tw::net {
namespace {

std::string socket_path(const char* what) {
  return "/tmp/tw_unix_listen_" + std::string(what) + "_" + std::to_string(::getpid()) + ".sock";
}

TEST(UnixListen, ASecondServerOnALivePathRefuses) {
  const std::string path = socket_path("live");
  auto url = parse_url("unix://" + path);
  ASSERT_TRUE(url.ok()) << url.status().message();
  asio::io_context io;
  auto first = listen(*url, io);
  ASSERT_TRUE(first.ok()) << first.status().message();
  auto second = listen(*url, io);
  ASSERT_FALSE(second.ok()) << "a second listener took " << path << " from a live one";
  const std::string m = second.status().message();
  EXPECT_NE(m.find(path), std::string::npos) << m;
  EXPECT_NE(m.find("another server is listening"), std::string::npos) << m;
  // The first one's socket file is still there, and it still accepts.
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0) << "the refused listener removed the live one's file";
  auto dialed = dial(*url, io);
  EXPECT_TRUE(dialed.ok()) << dialed.status().message();
  (*first)->close();
}

TEST(UnixListen, AStaleSocketFileIsTakenOver) {
  const std::string path = socket_path("stale");
  ::unlink(path.c_str());
  // A socket file with nobody listening: bound, then closed (what a killed server leaves).
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  path.copy(a.sun_path, sizeof a.sun_path - 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ::close(fd);
  auto url = parse_url("unix://" + path);
  ASSERT_TRUE(url.ok());
  asio::io_context io;
  auto l = listen(*url, io);
  ASSERT_TRUE(l.ok()) << l.status().message();
  (*l)->close();
}

}  // namespace
}  // namespace tw::net
