// Transport addresses: tcp://host:port and unix:///path/to.sock.
#pragma once
#include <cstdint>
#include <string>

#include "core/status.h"

namespace tw::net {

struct Url {
  enum class Scheme { kTcp, kUnix } scheme = Scheme::kTcp;
  std::string host;  // tcp
  uint16_t port = 0; // tcp; 0 asks the OS for a free port when listening
  std::string path;  // unix
  std::string str() const;
  bool is_loopback() const;
};

Result<Url> parse_url(const std::string& text);

}  // namespace tw::net
