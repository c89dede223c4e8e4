// Compressed replies (protocol 10, docs/protocol.md §1.1): a client that compresses its own frames
// (TW_COMPRESS=1 here, since loopback is not compressed under the auto rule) asks the server for
// compressed replies in its first batch; one that does not gets them raw; the server's own
// TW_COMPRESS overrides either way. Checked by the bytes a compressible read puts on the wire.
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "support/server_process.h"
#include "tensorwire/remote.h"
#include "tensorwire/tensorwire.h"

namespace tw {
namespace {

using testing::ServerProcess;

struct EnvVar {
  EnvVar(const char* name, const char* value) : name(name) { ::setenv(name, value, 1); }
  ~EnvVar() { ::unsetenv(name); }
  const char* name;
};

constexpr int64_t kLabels = int64_t{1} << 20;  // 8 MiB of int64 labels

// The bytes a read of 8 MiB of labels took on the wire, on a device made with the client's
// TW_COMPRESS set to `client_mode` ("" unset).
uint64_t read_bytes_in(const ServerProcess& server, const char* client_mode) {
  if (*client_mode) ::setenv("TW_COMPRESS", client_mode, 1);
  Device d = Device::remote(server.url());
  ::unsetenv("TW_COMPRESS");
  Tensor labels = arange(0, kLabels, 1, kI64, d).remainder(10);
  d.sync();
  const uint64_t before = wire_counters(d).bytes_in;
  const std::vector<int64_t> got = labels.to_vector<int64_t>();
  EXPECT_EQ(got.size(), static_cast<size_t>(kLabels));
  for (int64_t i : {int64_t{0}, int64_t{7}, kLabels - 1})
    EXPECT_EQ(got[static_cast<size_t>(i)], i % 10);
  return wire_counters(d).bytes_in - before;
}

constexpr uint64_t kRaw = uint64_t{kLabels} * 8;

TEST(CompressReplies, AClientThatCompressesGetsCompressedReplies) {
  ServerProcess server;
  EXPECT_LT(read_bytes_in(server, "1"), kRaw / 4);
  EXPECT_GE(read_bytes_in(server, ""), kRaw);  // loopback: auto does not compress
  EXPECT_GE(read_bytes_in(server, "0"), kRaw);
}

TEST(CompressReplies, TheServersSettingOverrides) {
  {
    EnvVar off("TW_COMPRESS", "0");
    ServerProcess server;
    ::unsetenv("TW_COMPRESS");
    EXPECT_GE(read_bytes_in(server, "1"), kRaw);
  }
  EnvVar on("TW_COMPRESS", "1");
  ServerProcess server;
  ::unsetenv("TW_COMPRESS");
  EXPECT_LT(read_bytes_in(server, "0"), kRaw / 4);
}

}  // namespace
}  // namespace tw
