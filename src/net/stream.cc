#include "net/stream.h"

#include <algorithm>
#include <asio/error.hpp>
#include <cstdlib>

#include "core/env.h"
#include "net/socket_stream.h"
#include "net/tls_stream.h"

namespace tw::net {

// One case per scheme of url.h: a new transport adds its own here.
Result<std::unique_ptr<Stream>> dial(const Url& url, asio::io_context& io, const TlsOptions& tls) {
  switch (url.scheme) {
    case Url::Scheme::kTcp:
    case Url::Scheme::kUnix: return dial_socket(url, io);
    case Url::Scheme::kTls: return dial_tls(url, io, tls);
  }
  return invalid_argument("cannot dial " + url.str() + ": this build speaks " +
                          supported_schemes());
}

Result<std::unique_ptr<Listener>> listen(const Url& url, asio::io_context& io,
                                         const TlsOptions& tls) {
  switch (url.scheme) {
    case Url::Scheme::kTcp:
    case Url::Scheme::kUnix: return listen_socket(url, io);
    case Url::Scheme::kTls: return listen_tls(url, io, tls);
  }
  return invalid_argument("cannot listen on " + url.str() + ": this build speaks " +
                          supported_schemes());
}

void consume(std::vector<asio::const_buffer>& bufs, size_t n) {
  size_t i = 0;
  while (i < bufs.size() && n >= bufs[i].size()) n -= bufs[i++].size();
  bufs.erase(bufs.begin(), bufs.begin() + static_cast<ptrdiff_t>(i));
  if (n && !bufs.empty()) bufs.front() += n;
}

int handshake_timeout_ms() {
  const uint64_t v = env_number(Env::kHANDSHAKE_TIMEOUT_MS).value_or(0);
  return v > 0 ? static_cast<int>(std::min<uint64_t>(v, 3'600'000)) : kDefaultHandshakeTimeoutMs;
}

namespace {

// Milliseconds left before `deadline` for a poll (-1: none), at least 0.
int ms_left(Deadline deadline) {
  if (deadline == Deadline::max()) return -1;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                        deadline - std::chrono::steady_clock::now())
                        .count();
  return static_cast<int>(std::clamp<int64_t>(left + 1, 0, 3'600'000));
}

}  // namespace

asio::error_code write_all(Stream& s, std::vector<asio::const_buffer> bufs, Deadline deadline) {
  while (!bufs.empty()) {
    IoResult r = s.try_write(bufs.data(), bufs.size());
    switch (r.kind) {
      case IoResult::kDone: consume(bufs, r.bytes); break;
      case IoResult::kWouldBlock:
        if (!s.wait_writable(ms_left(deadline))) return asio::error::timed_out;
        break;
      case IoResult::kClosed: return asio::error::eof;
      case IoResult::kError: return r.error;
    }
  }
  return {};
}

asio::error_code read_exact(Stream& s, asio::mutable_buffer into, Deadline deadline) {
  while (into.size()) {
    IoResult r = s.try_read(into);
    switch (r.kind) {
      case IoResult::kDone: into += r.bytes; break;
      case IoResult::kWouldBlock:
        if (!s.wait_readable(ms_left(deadline))) return asio::error::timed_out;
        break;
      case IoResult::kClosed: return asio::error::eof;
      case IoResult::kError: return r.error;
    }
  }
  return {};
}

}  // namespace tw::net
