// Transport addresses: tcp://host:port, tls://host:port (TCP under TLS 1.3) and
// unix:///path/to.sock. The schemes this build has are
// one table in url.cc; a new transport adds its row there and its dial/listen in stream.cc.
#pragma once
#include <cstdint>
#include <string>

#include "core/status.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw::net {

struct Url {
  enum class Scheme { kTcp, kUnix, kTls } scheme = Scheme::kTcp;
  std::string host;   // host:port schemes (tcp, tls)
  uint16_t port = 0;  // host:port schemes; 0 asks the OS for a free port when listening
  std::string path;   // path schemes (unix)
  std::string str() const;
  bool is_loopback() const;
};

Result<Url> parse_url(const std::string& text);

// Secure by default: a server listening where other hosts can reach it must speak tls:// and
// require a credential, unless `insecure` (tensorwire-server --insecure) waives both. OK for
// loopback addresses and Unix sockets; otherwise an error naming what is missing and the ways
// out.
Status check_exposure(const Url& url, bool has_credential, bool insecure);
// "tcp://host:port or unix:///path or tls://host:port": the address forms this build accepts, for
// messages.
std::string supported_schemes();

}  // namespace tw::net
TW_INTERNAL_END
