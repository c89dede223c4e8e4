#include "net/url.h"

#include <cstdlib>
#include <iterator>

namespace tw::net {

namespace {

// The schemes this build speaks. A host:port scheme parses as tcp does (IPv6 in brackets); a
// path scheme takes the rest of the address as a socket path.
struct SchemeInfo {
  Url::Scheme scheme;
  const char* name;  // before "://"
  bool has_path;
  const char* form;  // for messages
};
constexpr SchemeInfo kSchemes[] = {
    {Url::Scheme::kTcp, "tcp", false, "tcp://host:port"},
    {Url::Scheme::kUnix, "unix", true, "unix:///path"},
    {Url::Scheme::kTls, "tls", false, "tls://host:port"},
};

const SchemeInfo& info(Url::Scheme s) {
  for (const SchemeInfo& i : kSchemes)
    if (i.scheme == s) return i;
  return kSchemes[0];  // every enumerator has a row
}

// The longest sun_path a Unix socket address holds, less its terminating NUL.
constexpr size_t kMaxSocketPath = 107;

Status parse_path(const std::string& rest, Url& u) {
  u.path = rest;
  if (u.path.empty()) return invalid_argument("unix URL needs a path: unix:///path/to.sock");
  if (u.path.size() > kMaxSocketPath) {
    return invalid_argument("unix socket path too long (max " + std::to_string(kMaxSocketPath) +
                            "): " + u.path);
  }
  return Status::OK();
}

Status parse_host_port(const std::string& text, const std::string& rest, Url& u) {
  size_t colon;
  if (!rest.empty() && rest[0] == '[') {
    size_t close = rest.find(']');
    if (close == std::string::npos) return invalid_argument("bad IPv6 address in '" + text + "'");
    u.host = rest.substr(1, close - 1);
    colon = close + 1;
    if (colon >= rest.size() || rest[colon] != ':')
      return invalid_argument("missing port in '" + text + "'");
  } else {
    colon = rest.rfind(':');
    if (colon == std::string::npos) {
      return invalid_argument("missing port in '" + text + "' (" + info(u.scheme).form + ")");
    }
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
  return Status::OK();
}

}  // namespace

std::string supported_schemes() {
  std::string s;
  for (const SchemeInfo& i : kSchemes) s += std::string(s.empty() ? "" : " or ") + i.form;
  return s;
}

std::string Url::str() const {
  const SchemeInfo& i = info(scheme);
  std::string prefix = std::string(i.name) + "://";
  if (i.has_path) return prefix + path;
  bool v6 = host.find(':') != std::string::npos;
  return prefix + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

bool Url::is_loopback() const {
  if (info(scheme).has_path) return true;  // a socket file on this host
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

Result<Url> parse_url(const std::string& text) {
  size_t sep = text.find("://");
  std::string name = sep == std::string::npos ? "" : text.substr(0, sep);
  for (const SchemeInfo& i : kSchemes) {
    if (name != i.name) continue;
    Url u;
    u.scheme = i.scheme;
    std::string rest = text.substr(sep + 3);
    TW_RETURN_NOT_OK(i.has_path ? parse_path(rest, u) : parse_host_port(text, rest, u));
    return u;
  }
  return invalid_argument("unsupported address '" + text + "': this build speaks " +
                          supported_schemes());
}

Status check_exposure(const Url& url, bool has_credential, bool insecure) {
  bool tls = url.scheme == Url::Scheme::kTls;
  if (url.is_loopback() || insecure || (tls && has_credential)) return Status::OK();
  std::string missing = !tls && !has_credential ? "TLS and a credential"
                        : !tls                  ? "TLS"
                                                : "a credential";
  Url secure = url;
  secure.scheme = Url::Scheme::kTls;
  return invalid_argument("refusing to listen on " + url.str() + " without " + missing +
                          ": other hosts can reach it. Listen on " + secure.str() +
                          " with --credential-file, or pass --insecure to serve it anyway "
                          "on a network you trust");
}

}  // namespace tw::net
