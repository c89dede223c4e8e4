// tw::run_with_failover (tensorwire/failover.h).
#include "tensorwire/failover.h"

#include "tensorwire/error.h"
#include "tensorwire/remote.h"

namespace tw {

bool server_gone(const std::string& url, const std::string& error) {
  // The client's words for a connection that ended under it (client/reader.cc, connection.cc)
  // and the drain notice's (docs/protocol.md, kDraining).
  for (const char* words : {"closed the connection", "was closed", "server draining",
                            "Connection refused", "Connection reset", "reset by peer",
                            "Broken pipe", "End of file", "failed: handshake", "handshake with"}) {
    if (error.find(words) != std::string::npos) return true;
  }
  try {
    (void)remote_devices(url);  // a fresh connection: refused when the server is gone or draining
    return false;
  } catch (const Error&) {
    return true;
  }
}

size_t run_with_failover(const std::vector<std::string>& urls,
                         const std::function<void(const Device&)>& work,
                         const FailoverOptions& options) {
  if (urls.empty()) throw Error("run_with_failover: no server URLs");
  size_t at = 0;
  for (int moves = 0;; ++moves) {
    const std::string& url = urls[at];
    try {
      const Device device = Device::remote(url, options.device_index);
      work(device);
      return at;
    } catch (const Error& e) {
      if (moves >= options.max_failovers || !server_gone(url, e.what())) throw;
      const size_t next = (at + 1) % urls.size();
      if (options.on_failover) options.on_failover(url, urls[next], e.what());
      at = next;
    }
  }
}

}  // namespace tw
