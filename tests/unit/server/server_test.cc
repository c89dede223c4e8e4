// tw::Server's start-up checks, in process: the listen addresses it accepts, the refusal of an
// address others can reach without TLS and a credential, and the warning --insecure prints.
#include "tensorwire/server.h"

#include <gtest/gtest.h>

#include "tensorwire/error.h"

namespace tw {
namespace {

std::string start_and_capture_stderr(ServerOptions opts) {
  opts.worker_threads = 1;
  ::testing::internal::CaptureStderr();
  auto server = serve(std::move(opts));
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(server->url().find("://0.0.0.0:"), 3u) << server->url();
  server->stop();
  return err;
}

// Binding 0.0.0.0 only: no traffic goes to a non-loopback address.
TEST(Server, RefusesAReachableAddressWithoutTlsAndACredentialUnlessInsecure) {
  ServerOptions open;
  open.listen = {"tcp://0.0.0.0:0"};
  open.credential = "s3cret";
  try {
    serve(open);
    FAIL() << "served tcp://0.0.0.0 without TLS";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("refusing to listen on tcp://0.0.0.0:0 without TLS"),
              std::string::npos)
        << e.what();
  }
  open.insecure = true;
  std::string err = start_and_capture_stderr(open);
  EXPECT_NE(err.find("INSECURE (--insecure): listening on tcp://0.0.0.0:"), std::string::npos)
      << err;
  EXPECT_NE(err.find("without TLS"), std::string::npos) << err;
}

TEST(Server, TlsWithACredentialOnAReachableAddressNeedsNoWarning) {
  ServerOptions guarded;
  guarded.listen = {"tls://0.0.0.0:0"};
  guarded.credential = "s3cret";
  EXPECT_EQ(start_and_capture_stderr(guarded), "");
}

TEST(Server, ACertificateNeedsItsKeyAndATlsAddress) {
  ServerOptions half;
  half.tls_cert_file = "/nonexistent/cert.pem";
  half.listen = {"tls://127.0.0.1:0"};
  EXPECT_THROW(serve(half), Error);
  ServerOptions no_tls;
  no_tls.tls_cert_file = "/nonexistent/cert.pem";
  no_tls.tls_key_file = "/nonexistent/key.pem";
  try {
    serve(no_tls);
    FAIL() << "took a certificate with no tls:// address";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no address is tls://"), std::string::npos) << e.what();
  }
}

TEST(Server, AnUnknownSchemeNamesTheOnesThisBuildHas) {
  ServerOptions opts;
  opts.listen = {"quic://127.0.0.1:0"};
  try {
    serve(opts);
    FAIL() << "served an unknown scheme";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tcp://host:port or unix:///path"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tw
