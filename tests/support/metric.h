// One sample of a server process's Prometheus /metrics (its --metrics endpoint), for tests and
// benches that count what a server did. Header-only; the user links cpp-httplib.
#pragma once

#include <httplib.h>

#include <string>

#include "support/server_process.h"

namespace tw::testing {

// The value of the sample `key` (a metric name with its labels, e.g.
// `tensorwire_transfers_total{direction="in"}`), or -1 when the server does not answer or has no
// such sample.
inline double metric_value(const ServerProcess& s, const std::string& key) {
  httplib::Client client(s.metrics_url());
  client.set_read_timeout(10, 0);
  auto res = client.Get("/metrics");
  if (!res) return -1;
  // At a line's start: a metric without labels is named in its # HELP and # TYPE lines too.
  const std::string line = "\n" + key + " ";
  const size_t at = ("\n" + res->body).find(line);
  return at == std::string::npos ? -1 : std::stod(res->body.substr(at + line.size() - 1));
}

}  // namespace tw::testing
