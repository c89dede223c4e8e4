// net::dial and net::listen over the socket transports (a real loopback port and a real Unix
// socket), the Stream calls framing uses, and the address forms this build parses.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <asio.hpp>
#include <future>

#include "net/stream.h"
#include "net/url.h"

namespace tw::net {
namespace {

TEST(Url, ParsesTcpAndUnixAndNamesTheSchemesItHasOtherwise) {
  Url u = parse_url("tcp://127.0.0.1:5000").value();
  EXPECT_EQ(u.scheme, Url::Scheme::kTcp);
  EXPECT_EQ(u.host, "127.0.0.1");
  EXPECT_EQ(u.port, 5000);
  EXPECT_EQ(u.str(), "tcp://127.0.0.1:5000");
  EXPECT_TRUE(u.is_loopback());
  Url v6 = parse_url("tcp://[::1]:0").value();
  EXPECT_EQ(v6.host, "::1");
  EXPECT_EQ(v6.str(), "tcp://[::1]:0");
  Url x = parse_url("unix:///tmp/x.sock").value();
  EXPECT_EQ(x.scheme, Url::Scheme::kUnix);
  EXPECT_EQ(x.path, "/tmp/x.sock");
  EXPECT_EQ(x.str(), "unix:///tmp/x.sock");
  EXPECT_FALSE(parse_url("tcp://host").ok());
  EXPECT_FALSE(parse_url("tcp://:1").ok());
  EXPECT_FALSE(parse_url("tcp://h:70000").ok());
  EXPECT_FALSE(parse_url("unix://").ok());
  EXPECT_FALSE(parse_url("unix://" + std::string(108, 'a')).ok());
  for (const char* bad : {"quic://h:1", "127.0.0.1:1", ""}) {
    auto r = parse_url(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("tcp://host:port or unix:///path"), std::string::npos)
        << r.status().message();
  }
}

// Accepts one connection on `l`, exchanges a few bytes both ways with the dialed end.
void round_trip(Listener& l, asio::io_context& io) {
  std::promise<std::unique_ptr<Stream>> accepted;
  l.async_accept(io, [&](const asio::error_code& ec, std::unique_ptr<Stream> s) {
    EXPECT_FALSE(ec) << ec.message();
    accepted.set_value(std::move(s));
  });
  std::thread loop([&] { io.run(); });
  auto dialed = dial(l.url(), io);
  ASSERT_TRUE(dialed.ok()) << dialed.status().message();
  std::unique_ptr<Stream> server = accepted.get_future().get();
  loop.join();
  ASSERT_TRUE(server);
  Stream& client = **dialed;

  // Nothing sent yet: a try says would-block rather than waiting.
  uint8_t buf[16];
  EXPECT_EQ(server->try_read(asio::buffer(buf)).kind, IoResult::kWouldBlock);
  // A gather write arrives in order.
  const char a[] = "hel", b[] = "lo";
  std::vector<asio::const_buffer> out = {asio::buffer(a, 3), asio::buffer(b, 2)};
  EXPECT_FALSE(write_all(client, out));
  uint8_t got[5];
  EXPECT_FALSE(read_exact(*server, asio::buffer(got)));
  EXPECT_EQ(std::string(got, got + 5), "hello");
  // And back, through the async calls.
  io.restart();
  std::vector<asio::const_buffer> back = {asio::buffer(b, 2)};
  size_t wrote = 0, read = 0;
  uint8_t in[2];
  server->async_write(back, [&](const asio::error_code& ec, size_t n) {
    EXPECT_FALSE(ec);
    wrote = n;
  });
  client.async_read(asio::buffer(in), [&](const asio::error_code& ec, size_t n) {
    EXPECT_FALSE(ec);
    read = n;
  });
  io.run();
  EXPECT_EQ(wrote, 2u);
  EXPECT_EQ(read, 2u);
  EXPECT_EQ(std::string(in, in + 2), "lo");
  // The end of the stream is reported as closed once the peer shuts down.
  server->shutdown();
  client.wait_readable();
  EXPECT_EQ(client.try_read(asio::buffer(buf)).kind, IoResult::kClosed);
}

TEST(Transport, TcpListensOnAFreePortAndDials) {
  asio::io_context io;
  auto l = listen(parse_url("tcp://127.0.0.1:0").value(), io);
  ASSERT_TRUE(l.ok()) << l.status().message();
  EXPECT_NE((*l)->url().port, 0);  // resolved to the port the OS chose
  EXPECT_EQ((*l)->url().str(), "tcp://127.0.0.1:" + std::to_string((*l)->url().port));
  round_trip(**l, io);
  (*l)->close();
  EXPECT_FALSE(dial((*l)->url(), io).ok());
}

TEST(Transport, UnixSocketReplacesAStaleFileAndRemovesItsOwnOnClose) {
  std::string path = ::testing::TempDir() + "tw_transport_" + std::to_string(::getpid()) + ".sock";
  Url url = parse_url("unix://" + path).value();
  asio::io_context io;
  {
    auto stale = listen(url, io);  // leaves its file behind, as a killed server would
    ASSERT_TRUE(stale.ok()) << stale.status().message();
  }
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  auto l = listen(url, io);
  ASSERT_TRUE(l.ok()) << l.status().message();
  round_trip(**l, io);
  (*l)->close();
  EXPECT_NE(::stat(path.c_str(), &st), 0);
}

TEST(Transport, DialingNothingIsAClearError) {
  asio::io_context io;
  auto r = dial(parse_url("unix:///nonexistent/tw.sock").value(), io);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("cannot connect to unix:///nonexistent/tw.sock"),
            std::string::npos)
      << r.status().message();
}

// A host that never answers the SYN (here: a listener whose accept queue is full, so the kernel
// drops further SYNs) fails the dial after TW_CONNECT_TIMEOUT_MS with a clear error, rather than
// holding the caller through the kernel's two minutes of retries.
TEST(Transport, ADialNobodyAnswersTimesOut) {
  int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(lfd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(lfd, 0), 0);
  socklen_t len = sizeof a;
  ASSERT_EQ(::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const std::string url = "tcp://127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  ::setenv("TW_CONNECT_TIMEOUT_MS", "300", 1);
  // Fill the accept queue (never accepted) until a dial is not answered.
  asio::io_context io;
  std::vector<std::unique_ptr<Stream>> held;
  Status last;
  for (int i = 0; i < 8 && last.ok(); ++i) {
    auto r = dial(parse_url(url).value(), io);
    if (r.ok()) {
      held.push_back(std::move(r).value());
    } else {
      last = r.status();
    }
  }
  ::unsetenv("TW_CONNECT_TIMEOUT_MS");
  ::close(lfd);
  ASSERT_FALSE(last.ok()) << "every dial was answered: the accept queue never filled";
  EXPECT_NE(last.message().find("no answer within 300 ms (TW_CONNECT_TIMEOUT_MS)"),
            std::string::npos)
      << last.message();
}

}  // namespace
}  // namespace tw::net
