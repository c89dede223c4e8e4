// The tls:// transport on a real loopback port: the Stream contract over TLS (would-block before
// data, gather writes, async reads and writes of more than a socket buffer, end of stream),
// fingerprint pinning and its refusal, fingerprints' forms, and the secure-by-default rule.
#include <gtest/gtest.h>

#include <asio.hpp>
#include <chrono>
#include <future>
#include <numeric>
#include <thread>

#include "net/stream.h"
#include "net/tls_stream.h"
#include "net/url.h"

namespace tw::net {
namespace {

struct TlsPair {
  asio::io_context io;
  std::unique_ptr<Listener> listener;
  std::unique_ptr<Stream> server, client;
  std::string fingerprint;
};

// A listener with a generated identity, one accepted stream and one dialed (pinned) stream.
// The server side's handshake runs inside its first read, so a thread reads there while the
// client dials.
void connect_pair(TlsPair& p, const std::string& pin = "") {
  auto id = generate_self_signed("tw-test");
  ASSERT_TRUE(id.ok()) << id.status().message();
  TlsOptions server_tls;
  server_tls.cert_pem = id->cert_pem;
  server_tls.key_pem = id->key_pem;
  auto l = listen(parse_url("tls://127.0.0.1:0").value(), p.io, server_tls);
  ASSERT_TRUE(l.ok()) << l.status().message();
  p.listener = std::move(*l);
  p.fingerprint = p.listener->tls_fingerprint();
  EXPECT_EQ(p.fingerprint, id->fingerprint);
  std::promise<std::unique_ptr<Stream>> accepted;
  p.listener->async_accept(p.io, [&](const asio::error_code& ec, std::unique_ptr<Stream> s) {
    EXPECT_FALSE(ec) << ec.message();
    accepted.set_value(std::move(s));
  });
  std::thread loop([&] { p.io.run(); });
  auto fut = accepted.get_future();
  std::thread server_side([&] {
    p.server = fut.get();
    // Before the handshake is done there is nothing to read: would-block, never a wait.
    uint8_t b;
    EXPECT_EQ(p.server->try_read(asio::buffer(&b, 1)).kind, IoResult::kWouldBlock);
    EXPECT_FALSE(read_exact(*p.server, asio::buffer(&b, 1)));  // drives the handshake
    EXPECT_EQ(b, 'x');
  });
  TlsOptions client_tls;
  client_tls.fingerprint = pin.empty() ? p.fingerprint : pin;
  auto d = dial(p.listener->url(), p.io, client_tls);
  if (d.ok()) {
    p.client = std::move(*d);
    const char x = 'x';
    EXPECT_FALSE(write_all(*p.client, {asio::buffer(&x, 1)}));
  } else {
    p.listener->close();  // the server side's read then ends
    ADD_FAILURE() << d.status().message();
  }
  server_side.join();
  loop.join();
  p.io.restart();
}

TEST(Tls, KeepsTheStreamContract) {
  TlsPair p;
  connect_pair(p);
  ASSERT_TRUE(p.client && p.server);
  EXPECT_EQ(tls_cipher(*p.client), "TLS_AES_128_GCM_SHA256");
  EXPECT_EQ(tls_cipher(*p.server), "TLS_AES_128_GCM_SHA256");
  uint8_t buf[16];
  EXPECT_EQ(p.server->try_read(asio::buffer(buf)).kind, IoResult::kWouldBlock);
  // A gather write of small pieces arrives in order.
  const char a[] = "hel", b[] = "lo";
  EXPECT_FALSE(write_all(*p.client, {asio::buffer(a, 3), asio::buffer(b, 2)}));
  uint8_t got[5];
  EXPECT_FALSE(read_exact(*p.server, asio::buffer(got)));
  EXPECT_EQ(std::string(got, got + 5), "hello");

  // Async, both ways at once, more than the sockets buffer, from a gather list that mixes
  // small pieces (coalesced) and large ones (written in place).
  std::vector<uint8_t> big(24 << 20);
  std::iota(big.begin(), big.end(), uint8_t{7});
  std::vector<asio::const_buffer> out = {asio::buffer(big.data(), 3),
                                         asio::buffer(big.data() + 3, 20000),
                                         asio::buffer(big.data() + 20003, big.size() - 20003)};
  std::vector<uint8_t> at_server(big.size()), at_client(big.size());
  size_t wrote_c = 0, wrote_s = 0, read_s = 0, read_c = 0;
  auto record = [](size_t& into) {
    return [&into](const asio::error_code& ec, size_t n) {
      EXPECT_FALSE(ec) << ec.message();
      into = n;
    };
  };
  p.client->async_write(out, record(wrote_c));
  p.server->async_write(out, record(wrote_s));
  p.server->async_read(asio::buffer(at_server), record(read_s));
  p.client->async_read(asio::buffer(at_client), record(read_c));
  p.io.run();
  EXPECT_EQ(wrote_c, big.size());
  EXPECT_EQ(wrote_s, big.size());
  EXPECT_EQ(read_s, big.size());
  EXPECT_EQ(read_c, big.size());
  EXPECT_TRUE(at_server == big);
  EXPECT_TRUE(at_client == big);

  // async_read_some returns what has arrived, at least a byte.
  p.io.restart();
  EXPECT_FALSE(write_all(*p.client, {asio::buffer(b, 2)}));
  size_t some = 0;
  p.server->async_read_some(asio::buffer(buf), record(some));
  p.io.run();
  EXPECT_EQ(some, 2u);
  EXPECT_EQ(std::string(buf, buf + 2), "lo");

  // Records OpenSSL has already read ahead (past a read that filled its buffer) need no more
  // bytes from the socket, so wait_readable returns at once for them.
  const char two[] = "abcdef";
  EXPECT_FALSE(write_all(*p.client, {asio::buffer(two, 3)}));
  EXPECT_FALSE(write_all(*p.client, {asio::buffer(two + 3, 3)}));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // both in the server's socket
  auto one_by_one = std::async(std::launch::async, [&] {
    std::string got;
    for (int i = 0; i < 6; ++i) {
      p.server->wait_readable();
      uint8_t c = 0;
      if (p.server->try_read(asio::buffer(&c, 1)).kind == IoResult::kDone) got += char(c);
    }
    return got;
  });
  if (one_by_one.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    ADD_FAILURE() << "wait_readable waited for the socket with records already read";
    p.client->shutdown();  // lets the wait end
  }
  EXPECT_EQ(one_by_one.get(), "abcdef");

  // The end of the stream is reported as closed once the peer shuts down.
  p.server->shutdown();
  p.client->wait_readable();
  EXPECT_EQ(p.client->try_read(asio::buffer(buf)).kind, IoResult::kClosed);
  p.listener->close();
}

// A write counts bytes as written only once their records have gone to the socket: a writer
// that stops once try_write says would-block (an idle server after its reply) leaves nothing
// behind in the stream, so the peer receives every byte reported. (Encrypted records left in
// the stream's buffer with the socket full once hung a client reading a large result.)
TEST(Tls, EveryByteAWriteReportsReachesThePeerWithoutAnotherCall) {
  TlsPair p;
  connect_pair(p);
  ASSERT_TRUE(p.client && p.server);
  std::vector<uint8_t> big(64 << 20);
  std::iota(big.begin(), big.end(), uint8_t{3});
  std::vector<asio::const_buffer> rest = {asio::buffer(big)};
  size_t reported = 0;
  for (;;) {  // until the sockets are full (the client reads nothing yet)
    IoResult r = p.server->try_write(rest.data(), rest.size());
    if (r.kind != IoResult::kDone) {
      ASSERT_EQ(r.kind, IoResult::kWouldBlock);
      break;
    }
    reported += r.bytes;
    consume(rest, r.bytes);
    ASSERT_LT(reported, big.size()) << "the sockets took 64 MiB without blocking";
  }
  std::vector<uint8_t> got(big.size());
  auto read = std::async(std::launch::async,
                         [&] { return read_exact(*p.client, asio::buffer(got.data(), reported)); });
  if (read.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    ADD_FAILURE() << "bytes a write reported as written never arrived";
    p.server->shutdown();  // lets the read end
  }
  EXPECT_FALSE(read.get());
  // The rest, written and read at once, arrives in order after it.
  auto rest_read = std::async(std::launch::async, [&] {
    return read_exact(*p.client, asio::buffer(got.data() + reported, big.size() - reported));
  });
  EXPECT_FALSE(write_all(*p.server, rest));
  EXPECT_FALSE(rest_read.get());
  EXPECT_TRUE(got == big);
  p.listener->close();
}

// Dials a tls:// listener with a generated identity (its fingerprint in `fingerprint`) as
// `client_tls` says, the listener's side driving its handshake as a session's first read would:
// the dial's error, or OK when it connected.
Status dial_self_signed(const TlsOptions& client_tls, std::string& fingerprint) {
  auto id = generate_self_signed("tw-test");
  if (!id.ok()) return id.status();
  fingerprint = id->fingerprint;
  asio::io_context io;
  TlsOptions server_tls;
  server_tls.cert_pem = id->cert_pem;
  server_tls.key_pem = id->key_pem;
  auto l = listen(parse_url("tls://127.0.0.1:0").value(), io, server_tls);
  if (!l.ok()) return l.status();
  std::unique_ptr<Stream> accepted;
  (*l)->async_accept(io, [&](const asio::error_code&, std::unique_ptr<Stream> s) {
    accepted = std::move(s);
    static uint8_t b;
    accepted->async_read_some(asio::buffer(&b, 1), [](const asio::error_code&, size_t) {});
  });
  std::thread loop([&] { io.run(); });
  auto d = dial((*l)->url(), io, client_tls);
  asio::post(io, [&] {
    if (accepted) accepted->close();
    (*l)->close();
  });
  loop.join();
  return d.status();
}

TEST(Tls, AWrongPinIsRefusedNamingBothFingerprints) {
  TlsOptions client_tls;
  for (int i = 0; i < 32; ++i) client_tls.fingerprint += i ? ":AB" : "AB";
  std::string fingerprint;
  const Status st = dial_self_signed(client_tls, fingerprint);
  ASSERT_FALSE(st.ok());
  const std::string& m = st.message();
  EXPECT_NE(m.find(client_tls.fingerprint), std::string::npos) << m;
  EXPECT_NE(m.find(fingerprint), std::string::npos) << m;
}

// First contact (issue 50): nothing pinned, a self-signed server fails verification against the
// system's CAs, and the refusal names the certificate's fingerprint (read while it was verified:
// the session keeps no peer certificate after a failed verification) and the variable that pins
// it.
TEST(Tls, AnUnverifiedCertificateIsRefusedNamingItsFingerprintAndHowToPinIt) {
  std::string fingerprint;
  const Status st = dial_self_signed(TlsOptions{}, fingerprint);
  ASSERT_FALSE(st.ok());
  const std::string& m = st.message();
  EXPECT_NE(m.find("does not verify"), std::string::npos) << m;
  EXPECT_NE(m.find("(SHA-256 " + fingerprint + ")"), std::string::npos) << m;
  EXPECT_NE(m.find("TW_TLS_FINGERPRINT=" + fingerprint), std::string::npos) << m;
}

TEST(Tls, FingerprintsAreNormalisedAndBadOnesNamed) {
  std::string canonical;
  for (int i = 0; i < 32; ++i) canonical += i ? ":0A" : "0A";
  EXPECT_EQ(normalize_fingerprint(canonical).value(), canonical);
  std::string bare;
  for (int i = 0; i < 32; ++i) bare += "0a";
  EXPECT_EQ(normalize_fingerprint(bare).value(), canonical);
  EXPECT_EQ(normalize_fingerprint("SHA256:" + bare).value(), canonical);
  for (const std::string& bad : {std::string("00:11"), bare + "00", std::string(64, 'g')}) {
    auto r = normalize_fingerprint(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("64 hex digits"), std::string::npos);
  }
}

TEST(Tls, AListenerNeedsACertificateAndItsOwnKey) {
  asio::io_context io;
  Url url = parse_url("tls://127.0.0.1:0").value();
  EXPECT_FALSE(listen(url, io).ok());
  auto a = generate_self_signed("a"), b = generate_self_signed("b");
  ASSERT_TRUE(a.ok() && b.ok());
  TlsOptions mixed;
  mixed.cert_pem = a->cert_pem;
  mixed.key_pem = b->key_pem;
  auto r = listen(url, io, mixed);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("mismatch"), std::string::npos) << r.status().message();
  EXPECT_NE(a->fingerprint, b->fingerprint);
}

TEST(Tls, ATlsRecordIsRecognised) {
  const uint8_t alert[] = {21, 3, 3, 0, 2}, hello[] = {22, 3, 1, 1, 0}, frame[] = {40, 0, 0, 0};
  EXPECT_TRUE(looks_like_tls(alert, sizeof alert));
  EXPECT_TRUE(looks_like_tls(hello, sizeof hello));
  EXPECT_FALSE(looks_like_tls(frame, sizeof frame));
}

TEST(Exposure, AReachableAddressNeedsTlsAndACredentialUnlessInsecure) {
  auto check = [](const char* url, bool credential, bool insecure) {
    return check_exposure(parse_url(url).value(), credential, insecure);
  };
  // Loopback and Unix sockets: always fine.
  for (const char* local : {"tcp://127.0.0.1:1", "tcp://127.0.0.2:1", "tcp://localhost:1",
                            "tcp://[::1]:1", "unix:///tmp/x.sock", "tls://127.0.0.1:1"}) {
    EXPECT_TRUE(check(local, false, false).ok()) << local;
  }
  EXPECT_TRUE(check("tls://0.0.0.0:1", true, false).ok());
  Status plain = check("tcp://0.0.0.0:7070", true, false);
  ASSERT_FALSE(plain.ok());
  EXPECT_NE(plain.message().find("without TLS:"), std::string::npos) << plain.message();
  EXPECT_NE(plain.message().find("tls://0.0.0.0:7070"), std::string::npos) << plain.message();
  EXPECT_NE(plain.message().find("--insecure"), std::string::npos) << plain.message();
  Status open = check("tls://10.1.2.3:1", false, false);
  ASSERT_FALSE(open.ok());
  EXPECT_NE(open.message().find("without a credential"), std::string::npos) << open.message();
  Status neither = check("tcp://[::]:1", false, false);
  EXPECT_NE(neither.message().find("without TLS and a credential"), std::string::npos);
  // --insecure waives both.
  EXPECT_TRUE(check("tcp://0.0.0.0:1", false, true).ok());
  EXPECT_TRUE(check("tcp://192.168.1.5:1", true, true).ok());
}

}  // namespace
}  // namespace tw::net
