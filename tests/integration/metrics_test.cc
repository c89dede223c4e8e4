// tensorwire-server --metrics: the Prometheus text at /metrics moves with a client's work, and
// the dashboard at /, loaded in a real (headless) Chromium, shows the client's session.
#include <gtest/gtest.h>
#include <httplib.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>

#include "support/server_process.h"
#include "tensorwire/graph.h"
#include "tensorwire/remote.h"
#include "tensorwire/tensorwire.h"

namespace tw {
namespace {

using testing::ServerProcess;

std::string get(const std::string& base, const std::string& path) {
  httplib::Client client(base);
  client.set_read_timeout(10, 0);
  auto res = client.Get(path.c_str());
  if (!res) return "GET " + base + path + " failed: " + httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200) << base << path;
  return res->body;
}

// The value of one series (`name{labels}` exactly as exposed), or -1 when absent.
double series(const std::string& text, const std::string& name) {
  size_t at = 0;
  while ((at = text.find(name + " ", at)) != std::string::npos) {
    if (at == 0 || text[at - 1] == '\n') return std::stod(text.substr(at + name.size() + 1));
    at += name.size();
  }
  return -1;
}

TEST(Metrics, CountersMoveWithAClientsWork) {
  ServerProcess server({"--metrics", "tcp://127.0.0.1:0", "--session-memory", "1048576"});
  ASSERT_FALSE(server.metrics_url().empty()) << "the server printed no 'metrics on' line";
  std::string before = get(server.metrics_url(), "/metrics");
  EXPECT_EQ(series(before, "tensorwire_ops_total"), 0) << before;
  EXPECT_EQ(series(before, "tensorwire_sessions"), 0);
  EXPECT_EQ(series(before, "tensorwire_graphs_registered_total"), 0) << before;
  EXPECT_EQ(series(before, "tensorwire_graph_runs_total"), 0);
  EXPECT_EQ(series(before, "tensorwire_transfers_total{direction=\"in\"}"), 0);

  Device d = Device::remote(server.url());
  const uint64_t session = remote_handshake(d).session_id;
  constexpr int kAdds = 200;
  Tensor x = full({256}, 0.0, kF32, d);
  Tensor one = full({256}, 1.0, kF32, d);
  for (int i = 0; i < kAdds; ++i) x = x + one;
  ASSERT_EQ(x.to_vector<float>()[0], static_cast<float>(kAdds));
  // A graph registered once (the first replay) and run twice.
  graph::Capture cap(Device::cpu());
  Tensor in = cap.input(full({256}, 0.0, kF32, Device::cpu()));
  graph::Trace twice_plus_one = cap.finish({in * 2.0 + 1.0});
  for (int run = 0; run < 2; ++run) {
    ASSERT_EQ(twice_plus_one.replay(d, {one})[0].to_vector<float>()[0], 3.0f);
  }
  ASSERT_TRUE(twice_plus_one.runs_as_graph(d));
  // Over the 1 MiB quota: the server refuses it, and the read that depends on it fails.
  Tensor big = full({1 << 19}, 1.0, kF32, d);
  EXPECT_THROW(big.to_vector<float>(), Error);

  std::string after = get(server.metrics_url(), "/metrics");
  const std::string s = "{device=\"0\",session=\"" + std::to_string(session) + "\"}";
  EXPECT_GE(series(after, "tensorwire_ops_total"), kAdds + 2) << after;
  EXPECT_GE(series(after, "tensorwire_session_ops_total" + s), kAdds + 2) << after;
  EXPECT_EQ(series(after, "tensorwire_sessions"), 1);
  EXPECT_EQ(series(after, "tensorwire_sessions_opened_total"), 1);
  EXPECT_GT(series(after, "tensorwire_bytes_total{direction=\"in\"}"), 0);
  EXPECT_GT(series(after, "tensorwire_bytes_total{direction=\"out\"}"), 0);
  EXPECT_GT(series(after, "tensorwire_frames_total{direction=\"in\"}"), 1);
  EXPECT_GE(series(after, "tensorwire_session_memory_bytes" + s), 2 * 256 * 4)
      << "x and one are held";
  EXPECT_GE(series(after, "tensorwire_memory_bytes"), 2 * 256 * 4);
  // The batch that answered the last read may still be finishing (it counts until it ends).
  EXPECT_GE(series(after, "tensorwire_session_queued_batches" + s), 0) << after;
  EXPECT_LE(series(after, "tensorwire_session_queued_batches" + s), 1);
  EXPECT_GE(series(after, "tensorwire_op_latency_seconds_count{op=\"Binary\"}"), kAdds) << after;
  EXPECT_GE(series(after, "tensorwire_op_latency_seconds_bucket{op=\"Binary\",le=\"+Inf\"}"),
            kAdds);
  EXPECT_GT(series(after, "tensorwire_op_latency_seconds_sum{op=\"Binary\"}"), 0);
  EXPECT_EQ(series(after, "tensorwire_op_latency_seconds_count{op=\"MatMul\"}"), -1)
      << "no matmul ran";
  EXPECT_EQ(series(after, "tensorwire_errors_total{kind=\"over_quota\"}"), 1) << after;
  EXPECT_EQ(series(after, "tensorwire_errors_total{kind=\"read_failed\"}"), 1);
  EXPECT_EQ(series(after, "tensorwire_graphs_registered_total"), 1) << after;
  EXPECT_EQ(series(after, "tensorwire_graph_runs_total"), 2);

  // A refused handshake counts by its reason.
  EXPECT_THROW(Device::remote(server.url(), 7).connect(), Error);
  EXPECT_EQ(series(get(server.metrics_url(), "/metrics"),
                   "tensorwire_errors_total{kind=\"refused_bad_device_index\"}"),
            1);

  EXPECT_NE(get(server.metrics_url(), "/").find("<title>tensorwire server</title>"),
            std::string::npos);
}

// Debian's chromium, or the one TW_CHROMIUM names.
std::string find_chromium() {
  if (const char* c = std::getenv("TW_CHROMIUM")) return c;
  for (const char* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser"}) {
    if (::access(p, X_OK) == 0) return p;
  }
  return "";
}

// What headless Chromium prints after the page's script ran for `virtual_ms` of virtual time,
// doing `what` (--dump-dom: the DOM; --screenshot=PATH: a PNG).
std::string run_chromium(const std::string& chromium, const std::string& url, int virtual_ms,
                         const std::string& what) {
  std::string profile =
      (std::filesystem::temp_directory_path() / ("tw-chromium-" + std::to_string(::getpid())))
          .string();
  std::string cmd = "timeout 120 " + chromium +
                    " --headless --no-sandbox --disable-gpu --user-data-dir=" + profile +
                    " --window-size=1280,1500 --virtual-time-budget=" + std::to_string(virtual_ms) +
                    " " + what + " " + url + " 2>/dev/null";
  std::string out;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    ::pclose(p);
  }
  std::filesystem::remove_all(profile);
  return out;
}

// The part of `dom` inside the element with id `id` (to its first closing `end`).
std::string element(const std::string& dom, const std::string& id, const std::string& end) {
  size_t at = dom.find("id=\"" + id + "\"");
  if (at == std::string::npos) return "";
  return dom.substr(at, dom.find(end, at) - at);
}

TEST(Dashboard, ShowsTheClientsSessionInAHeadlessBrowser) {
  std::string chromium = find_chromium();
  if (chromium.empty()) {
    GTEST_SKIP()
        << "Chromium not found (/usr/bin/chromium; apt-get install chromium, which "
           "scripts/bootstrap.sh does, or set TW_CHROMIUM): the dashboard's browser test needs it";
  }
  ServerProcess server({"--metrics", "tcp://127.0.0.1:0"});
  Device d = Device::remote(server.url());
  const std::string session = std::to_string(remote_handshake(d).session_id);
  // A client doing work the whole time the page watches: a held tensor and a stream of adds.
  std::atomic<bool> done{false};
  std::thread client([&] {
    Tensor held = full({64, 1024}, 1.0, kF32, d);
    Tensor x = full({1024}, 0.0, kF32, d);
    while (!done) {
      for (int i = 0; i < 100; ++i) x = x + 1.0;
      d.sync();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  std::string dom = run_chromium(chromium, server.metrics_url() + "/", 5000, "--dump-dom");
  // To look at the page: TW_DASHBOARD_SCREENSHOT=/tmp/dashboard.png.
  if (const char* png = std::getenv("TW_DASHBOARD_SCREENSHOT")) {
    run_chromium(chromium, server.metrics_url() + "/", 5000, std::string("--screenshot=") + png);
  }
  done = true;
  client.join();
  ASSERT_NE(dom.find("<h1>tensorwire server</h1>"), std::string::npos) << "no page came back:\n"
                                                                       << dom;
  std::string sessions = element(dom, "sessions", "</table>");
  EXPECT_NE(sessions.find("<tr data-session=\"" + session + "\">"), std::string::npos)
      << "the session table lacks session " << session << ":\n"
      << sessions;
  std::string memory = element(dom, "memory-chart", "</svg>");
  EXPECT_NE(memory.find("data-series=\"" + session + "\""), std::string::npos)
      << "the memory chart has no line for session " << session << ":\n"
      << memory;
  EXPECT_NE(element(dom, "memory-legend", "</div>").find("session " + session), std::string::npos);
  std::string ops = element(dom, "ops-chart", "</svg>");
  EXPECT_NE(ops.find("data-series=\"" + session + "\""), std::string::npos) << ops;
  std::string devices = element(dom, "devices", "</table>");
  EXPECT_NE(devices.find("cpu:0"), std::string::npos) << devices;
  EXPECT_NE(element(dom, "latency-chart", "</svg>").find("data-op=\"BinaryScalar\""),
            std::string::npos)
      << "the latency chart has no bar for the client's adds";
}

}  // namespace
}  // namespace tw
