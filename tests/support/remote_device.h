// Remote devices for tests that run a check on the local CPU device and on remote ones: devices
// of a real tensorwire-server process that listens on every transport at once, so that a test
// written once is instantiated per transport (as Arrow's transport tests are):
//   tcp    tcp://127.0.0.1 (port 0, read back from the server's output)
//   unix   a Unix socket in a fresh temporary directory, with the shared-memory path for large
//          payloads on (the client's default there: client/connection.h, kShmMinBytes)
//   tls    tls://127.0.0.1 (port 0) with the certificate the server generates, pinned by the
//          fingerprint it prints (tests/integration/tls_test.cc covers CA files and refusals)
// The server starts on first use and stops when the test binary exits; each transport's device
// is one session shared by the binary's tests.
#pragma once
#include <stdlib.h>
#include <unistd.h>

#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "support/local_backends.h"
#include "support/server_process.h"
#include "tensorwire/remote.h"
#include "tensorwire/tensorwire.h"

namespace tw::testing {

enum class Transport { kTcp, kUnix, kTls };
inline constexpr Transport kTransports[] = {Transport::kTcp, Transport::kUnix, Transport::kTls};

// The remote device's name in parameterised tests: "remote" over tcp (the name tests had before
// there were other transports), "remote_unix", "remote_tls".
inline std::string remote_name(Transport t) {
  switch (t) {
    case Transport::kUnix: return "remote_unix";
    case Transport::kTls: return "remote_tls";
    case Transport::kTcp: break;
  }
  return "remote";
}

// A tensorwire-server process listening on all three transports (see the top of this file).
class TransportServer {
 public:
  explicit TransportServer(std::vector<std::string> extra_args = {})
      : dir_(make_temp_dir()), server_(listen_args(dir_, std::move(extra_args))) {
    const std::string fp_prefix = "tls certificate sha256 ";
    for (const std::string& l : server_.lines()) {
      if (l.rfind(fp_prefix, 0) == 0) fingerprint_ = l.substr(fp_prefix.size(), 95);
    }
    for (Transport t : kTransports) (void)url(t);  // throws now if one is missing
  }
  ~TransportServer() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      devices_.clear();  // their sessions close while the server still runs
    }
    server_.stop();
    ::unlink((dir_ + "/server.sock").c_str());
    ::rmdir(dir_.c_str());
  }
  TransportServer(const TransportServer&) = delete;
  TransportServer& operator=(const TransportServer&) = delete;

  // The address the server printed for transport `t`.
  std::string url(Transport t) const {
    const std::string scheme = t == Transport::kTcp    ? "tcp://"
                               : t == Transport::kUnix ? "unix://"
                                                       : "tls://";
    for (const std::string& u : server_.urls()) {
      if (u.rfind(scheme, 0) == 0) return u;
    }
    throw std::runtime_error("the test server does not listen on " + scheme);
  }

  // Device `index` over transport `t`: one per (transport, index), made on first use.
  Device device(Transport t, int index = 0) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = devices_.find({t, index});
    if (it == devices_.end()) {
      RemoteOptions options;
      if (t == Transport::kTls) options.tls_fingerprint = fingerprint_;
      it = devices_.emplace(std::make_pair(t, index), remote_device(url(t), index, options)).first;
    }
    return it->second;
  }

  ServerProcess& process() { return server_; }

 private:
  static std::string make_temp_dir() {
    // In /tmp: a Unix socket's path must stay under 108 bytes, which TEST_TMPDIR may not.
    std::string tmpl = "/tmp/tw-test-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    return tmpl;
  }
  static std::vector<std::string> listen_args(const std::string& dir, std::vector<std::string> a) {
    a.insert(a.begin(),
             {"--listen", "unix://" + dir + "/server.sock", "--listen", "tls://127.0.0.1:0"});
    return a;
  }

  std::string dir_;  // holds the Unix socket; made before the server, removed after it
  ServerProcess server_;
  std::string fingerprint_;
  std::mutex mu_;
  std::map<std::pair<Transport, int>, Device> devices_;
};

// The binary's test server: cpu is its device 0, and device 0 of every other backend this machine
// has (local_backends.h: torch, vulkan, ...) its devices 1, 2, ... in registry order, so that a
// suite runs each backend behind a server too ("remote_<name>", remote_backend_index()).
inline TransportServer& test_server() {
  static TransportServer server([] {
    std::string list = "cpu";
    for (const LocalBackend* b : available_local_backends()) list += "," + b->spec;
    return std::vector<std::string>{"--backend", list};
  }());
  return server;
}

// The test server's device index of local backend `name` (1...), or 0 when this machine lacks it.
inline int remote_backend_index(const std::string& name) {
  int index = 1;
  for (const LocalBackend* b : available_local_backends()) {
    if (b->name == name) return index;
    ++index;
  }
  return 0;
}

inline const std::string& test_server_url() {
  static const std::string url = test_server().url(Transport::kTcp);
  return url;
}

// Device 0 of the test server over `t`.
inline Device remote_test_device(Transport t = Transport::kTcp) { return test_server().device(t); }

// "cpu", a remote_name(), a local backend's name ("torch", "vulkan": local_backends.h), or
// "remote_" and one (that backend's device behind the test server, over tcp): what parameterised
// tests are instantiated over.
inline Device test_device(const std::string& name) {
  for (Transport t : kTransports) {
    if (name == remote_name(t)) return remote_test_device(t);
  }
  if (name.rfind("remote_", 0) == 0) {
    if (const int index = remote_backend_index(name.substr(7)))
      return test_server().device(Transport::kTcp, index);
  }
  if (const LocalBackend* b = local_backend_named(name)) return Device::local(b->spec);
  return Device::cpu();
}

}  // namespace tw::testing
