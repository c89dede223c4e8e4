// tw::Server's start-up checks, in process: the listen addresses it accepts and the warning it
// prints for an address others can reach.
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
  EXPECT_EQ(server->url().rfind("tcp://0.0.0.0:", 0), 0u) << server->url();
  server->stop();
  return err;
}

TEST(Server, WarnsOfAReachableAddressOnlyWithoutACredential) {
  ServerOptions open;
  open.listen = {"tcp://0.0.0.0:0"};
  EXPECT_NE(start_and_capture_stderr(open).find("without authentication"), std::string::npos);
  ServerOptions guarded = open;
  guarded.credential = "s3cret";
  EXPECT_EQ(start_and_capture_stderr(guarded), "");
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
