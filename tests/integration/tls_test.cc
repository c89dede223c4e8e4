// tls:// against real server processes on 127.0.0.1 (port 0): a pinned fingerprint and a CA
// file (generated here with the openssl CLI), the refusals of a wrong pin and a wrong CA, a
// plain client at a TLS port and a TLS client at a plain one failing fast, results equal to
// plain TCP's, and the server's secure-by-default refusal and --insecure flag.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <future>
#include <string>

#include "support/server_process.h"
#include "tensorwire/remote.h"
#include "tensorwire/tensorwire.h"

namespace tw {
namespace {

using testing::ServerProcess;
using Clock = std::chrono::steady_clock;

// The server prints "tls certificate sha256 AB:CD:...[ (self-signed ...)]".
std::string printed_fingerprint(const ServerProcess& s) {
  const std::string prefix = "tls certificate sha256 ";
  for (const std::string& l : s.lines()) {
    if (l.rfind(prefix, 0) == 0) return l.substr(prefix.size(), 95);
  }
  return {};
}

// Runs a shell command; returns its exit status and (into `out`) what it printed.
int run(const std::string& cmd, std::string* out = nullptr) {
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return -1;
  std::string text;
  char buf[512];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) text.append(buf, n);
  int status = ::pclose(p);
  if (out) *out = text;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// A CA, and a certificate it signed for 127.0.0.1, in a fresh temporary directory.
class Pki : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "tw_tls_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    std::ofstream(dir_ + "/ext.cnf") << "subjectAltName=IP:127.0.0.1\n";
    const std::string ec = " -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes";
    for (std::string ca : {"ca", "other_ca"}) {
      ASSERT_EQ(run("openssl req -x509" + ec + " -days 2 -subj /CN=tw-" + ca + " -keyout " +
                    path(ca + ".key") + " -out " + path(ca + ".pem")),
                0);
    }
    ASSERT_EQ(run("openssl req" + ec + " -subj /CN=127.0.0.1 -keyout " + path("server.key") +
                  " -out " + path("server.csr")),
              0);
    std::string log;
    ASSERT_EQ(run("openssl x509 -req -days 2 -in " + path("server.csr") + " -CA " + path("ca.pem") +
                      " -CAkey " + path("ca.key") + " -CAcreateserial -extfile " + path("ext.cnf") +
                      " -out " + path("server.pem"),
                  &log),
              0)
        << log;
  }
  void TearDown() override { run("rm -rf " + dir_); }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }

 private:
  std::string dir_;
};

Tensor compute(const Device& d) {
  manual_seed(7);
  Tensor a = randn({96, 64}, kF32, d);
  Tensor b = randn({64, 48}, kF32, d);
  return (a.matmul(b).relu() * 0.5 + 1.0).softmax(-1).sum(0);
}

// Expects connecting to fail within `limit`, with a message containing each of `parts`.
void expect_refused(const Device& d, std::chrono::milliseconds limit,
                    std::initializer_list<std::string> parts) {
  auto start = Clock::now();
  try {
    d.connect();
    ADD_FAILURE() << "connected to " << d.str();
  } catch (const Error& e) {
    std::string m = e.what();
    for (const std::string& p : parts) EXPECT_NE(m.find(p), std::string::npos) << m;
  }
  EXPECT_LT(Clock::now() - start, limit);
}

TEST(Tls, PinnedSelfSignedServerComputesWhatPlainTcpDoes) {
  ServerProcess server({"--listen", "tls://127.0.0.1:0"});
  ASSERT_EQ(server.urls().size(), 2u);
  const std::string& tls_url = server.urls()[1];
  ASSERT_EQ(tls_url.rfind("tls://127.0.0.1:", 0), 0u) << tls_url;
  std::string fp = printed_fingerprint(server);
  ASSERT_EQ(fp.size(), 95u) << "no fingerprint printed";
  RemoteOptions pin;
  pin.tls_fingerprint = fp;
  Device tls = remote_device(tls_url, 0, pin);
  Device plain = Device::remote(server.urls()[0], 0);
  Tensor over_tls = compute(tls);
  EXPECT_EQ(over_tls.to_bytes(), compute(plain).to_bytes());
  EXPECT_EQ(over_tls.to_bytes(), compute(Device::cpu()).to_bytes());
  // A tensor larger than a TLS record and a socket buffer, both ways.
  Tensor big = arange(0, 1 << 21, 1, kF32, tls);
  EXPECT_EQ(big.to_bytes(), arange(0, 1 << 21, 1, kF32, Device::cpu()).to_bytes());
  EXPECT_EQ(remote_devices(tls_url, pin).size(), 1u);
  // The environment variable pins as the option does (colons and case are optional).
  std::string bare;
  for (char c : fp)
    if (c != ':') bare += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  ::setenv("TW_TLS_FINGERPRINT", bare.c_str(), 1);
  Device by_env = Device::remote(tls_url, 0);
  ::unsetenv("TW_TLS_FINGERPRINT");
  EXPECT_EQ(compute(by_env).to_bytes(), over_tls.to_bytes());
}

// Many reads of assorted sizes, small and larger than a record and a socket buffer, some in
// flight together: each arrives whole and right. (A plain to_bytes over tls:// once hung: the
// last records of a reply stayed in the server's TLS stream with its socket full.)
TEST(Tls, ManyReadsOfAssortedSizesAllArrive) {
  ServerProcess server({"--listen", "tls://127.0.0.1:0"});
  RemoteOptions pin;
  pin.tls_fingerprint = printed_fingerprint(server);
  Device tls = remote_device(server.urls().at(1), 0, pin);
  const int64_t sizes[] = {1, 3, 1000, 4096, 4097, 70'000, 300'000, 1 << 20, 3'000'001};
  auto reads = std::async(std::launch::async, [&] {
    int wrong = 0;
    for (int round = 0; round < 10; ++round) {
      // All of a round's reads in flight at once, so that the server's replies fill the
      // socket; the largest last in even rounds, first in odd ones.
      std::vector<int64_t> ns(std::begin(sizes), std::end(sizes));
      if (round % 2) std::reverse(ns.begin(), ns.end());
      // The tensors stay alive while their reads are waited for: the client sends nothing
      // meanwhile (no drops), which is when the bytes of a reply left behind were never sent.
      std::vector<Tensor> ts;
      std::vector<std::future<std::vector<float>>> got;
      for (int64_t n : ns) {
        ts.push_back(arange(round, static_cast<double>(n + round), 1, kF32, tls));
        got.push_back(ts.back().to_vector_async<float>());
      }
      for (size_t i = 0; i < got.size(); ++i) {
        std::vector<float> v = got[i].get();
        int64_t n = ns[i];
        if (static_cast<int64_t>(v.size()) != n || v.front() != static_cast<float>(round) ||
            v.back() != static_cast<float>(n - 1 + round)) {
          ++wrong;
        }
      }
    }
    return wrong;
  });
  if (reads.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    ADD_FAILURE() << "reads over tls:// hung";
    server.kill_hard();  // the client then fails every pending read
  }
  EXPECT_EQ(reads.get(), 0);
}

TEST(Tls, AWrongFingerprintIsRefusedNamingBoth) {
  ServerProcess server({"--listen", "tls://127.0.0.1:0"});
  std::string fp = printed_fingerprint(server);
  std::string wrong = fp;
  wrong[0] = wrong[0] == 'A' ? 'B' : 'A';
  RemoteOptions pin;
  pin.tls_fingerprint = wrong;
  expect_refused(remote_device(server.urls()[1], 0, pin), std::chrono::seconds(3),
                 {"refusing " + server.urls()[1], fp, wrong, "TW_TLS_FINGERPRINT"});
}

TEST_F(Pki, ACaFileVerifiesTheServerAndAnotherCaIsRefused) {
  ServerProcess server({"--listen", "tls://127.0.0.1:0", "--tls-cert", path("server.pem"),
                        "--tls-key", path("server.key")});
  const std::string& url = server.urls()[1];
  // The fingerprint printed is the certificate's own (not a generated one's), with no
  // self-signed note.
  std::string openssl_fp;
  ASSERT_EQ(run("openssl x509 -noout -fingerprint -sha256 -in " + path("server.pem"), &openssl_fp),
            0);
  EXPECT_NE(openssl_fp.find(printed_fingerprint(server)), std::string::npos) << openssl_fp;
  for (const std::string& l : server.lines())
    EXPECT_EQ(l.find("self-signed"), std::string::npos) << l;

  RemoteOptions ca;
  ca.tls_ca_file = path("ca.pem");
  Device d = remote_device(url, 0, ca);
  EXPECT_EQ(compute(d).to_bytes(), compute(Device::cpu()).to_bytes());
  // CA and pin together: both hold.
  ca.tls_fingerprint = printed_fingerprint(server);
  EXPECT_EQ(compute(remote_device(url, 0, ca)).to_bytes(), compute(Device::cpu()).to_bytes());

  RemoteOptions other;
  other.tls_ca_file = path("other_ca.pem");
  expect_refused(remote_device(url, 0, other), std::chrono::seconds(3),
                 {"refusing " + url, "does not verify", path("other_ca.pem")});
  RemoteOptions missing;
  missing.tls_ca_file = path("nonexistent.pem");
  expect_refused(remote_device(url, 0, missing), std::chrono::seconds(3),
                 {"cannot load the TLS CA file"});
}

TEST(Tls, PlainAndTlsClientsAtTheWrongKindOfPortFailFast) {
  ServerProcess server({"--listen", "tls://127.0.0.1:0"});
  std::string plain_url = server.urls()[0];
  std::string tls_url = server.urls()[1];
  std::string tls_port = tls_url.substr(tls_url.rfind(':'));
  std::string plain_port = plain_url.substr(plain_url.rfind(':'));
  // A plain client at the TLS port is told to use tls://.
  expect_refused(Device::remote("tcp://127.0.0.1" + tls_port, 0), std::chrono::seconds(3),
                 {"speaks TLS", tls_url});
  // A TLS client at the plain port: the plain server refuses the ClientHello as an oversized
  // first frame and closes; the client says the handshake failed and why it may have.
  RemoteOptions pin;
  pin.tls_fingerprint = printed_fingerprint(server);
  expect_refused(remote_device("tls://127.0.0.1" + plain_port, 0, pin), std::chrono::seconds(3),
                 {"TLS handshake with tls://127.0.0.1" + plain_port, "not tcp://"});
  // The server serves on after both.
  Device ok = remote_device(tls_url, 0, pin);
  EXPECT_EQ(compute(ok).to_bytes(), compute(Device::cpu()).to_bytes());
}

// Nothing is sent to a non-loopback address here: the refusal happens before binding, and the
// --insecure server is only started and stopped.
TEST(Tls, AReachablePlainAddressIsRefusedUnlessInsecure) {
  std::string out;
  int rc = run(std::string(TW_SERVER_BINARY) + " --listen tcp://0.0.0.0:0", &out);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("refusing to listen on tcp://0.0.0.0:0 without TLS and a credential"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("--insecure"), std::string::npos) << out;
  ServerProcess insecure({"--listen", "tcp://0.0.0.0:0", "--insecure"});
  ASSERT_EQ(insecure.urls().size(), 2u);
  EXPECT_EQ(insecure.urls()[1].rfind("tcp://0.0.0.0:", 0), 0u);
}

}  // namespace
}  // namespace tw
