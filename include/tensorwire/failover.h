// Failover between servers: run a piece of work on a remote device of the first server and, when
// that server goes away (killed, unreachable, or draining: tensorwire-server on SIGTERM), run it
// again on the next one. The work resumes itself, typically from a tw::Checkpoint:
//
//   tw::run_with_failover({"tcp://a:7000", "tcp://b:7000"}, [&](const tw::Device& d) {
//     tw::Checkpoint ckpt("runs/a");
//     ... make the model on d; ckpt.restore(model, &opt); train, ckpt.save(...) every N steps
//   });
//
// A tw::Error thrown by the work counts as the server going away when the server no longer takes
// a new connection (a probe: tw::remote_devices) or the error says the server is draining or
// the connection was lost; any other error is the work's own and is rethrown.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "tensorwire/device.h"
#include "tensorwire/export.h"

TW_API_BEGIN

namespace tw {

struct FailoverOptions {
  int device_index = 0;
  // How many times the work may move to another server before the last error is rethrown.
  int max_failovers = 8;
  // Told each move: the server left, the one taken next, and why (the error's message).
  std::function<void(const std::string& from, const std::string& to, const std::string& why)>
      on_failover;
};

// Runs work(device) on urls[0], moving on (round robin) as above. Returns the index into urls of
// the server the work completed on.
size_t run_with_failover(const std::vector<std::string>& urls,
                         const std::function<void(const Device&)>& work,
                         const FailoverOptions& options = {});

// Whether `e` (a tw::Error's message from work on `url`) means the server went away rather than
// the work failing: the text names a lost connection or a draining server, or a fresh connection
// to the server is refused.
bool server_gone(const std::string& url, const std::string& error);

}  // namespace tw
TW_API_END
