#include "net/url.h"

#include <cstdlib>

namespace tw::net {

std::string Url::str() const {
  if (scheme == Scheme::kUnix) return "unix://" + path;
  bool v6 = host.find(':') != std::string::npos;
  return "tcp://" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

bool Url::is_loopback() const {
  if (scheme == Scheme::kUnix) return true;
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

Result<Url> parse_url(const std::string& text) {
  Url u;
  const std::string kTcp = "tcp://", kUnix = "unix://";
  if (text.rfind(kUnix, 0) == 0) {
    u.scheme = Url::Scheme::kUnix;
    u.path = text.substr(kUnix.size());
    if (u.path.empty()) return invalid_argument("unix URL needs a path: unix:///path/to.sock");
    if (u.path.size() >= 108) return invalid_argument("unix socket path too long (max 107): " + u.path);
    return u;
  }
  if (text.rfind(kTcp, 0) != 0) {
    return invalid_argument("unsupported address '" + text +
                            "': expected tcp://host:port or unix:///path");
  }
  std::string rest = text.substr(kTcp.size());
  size_t colon;
  if (!rest.empty() && rest[0] == '[') {
    size_t close = rest.find(']');
    if (close == std::string::npos) return invalid_argument("bad IPv6 address in '" + text + "'");
    u.host = rest.substr(1, close - 1);
    colon = close + 1;
    if (colon >= rest.size() || rest[colon] != ':') return invalid_argument("missing port in '" + text + "'");
  } else {
    colon = rest.rfind(':');
    if (colon == std::string::npos) return invalid_argument("missing port in '" + text + "' (tcp://host:port)");
    u.host = rest.substr(0, colon);
  }
  std::string port = rest.substr(colon + 1);
  char* end = nullptr;
  long p = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || p < 0 || p > 65535) {
    return invalid_argument("bad port '" + port + "' in '" + text + "'");
  }
  if (u.host.empty()) return invalid_argument("missing host in '" + text + "'");
  u.port = static_cast<uint16_t>(p);
  return u;
}

}  // namespace tw::net
