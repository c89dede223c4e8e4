// tensorwire: command-line client.
//   tensorwire info tcp://host:port    devices, limits, sessions, memory
//   tensorwire ping tcp://host:port    round-trip times (min/median/p99)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "tensorwire/remote.h"
#include "tensorwire/tensorwire.h"

namespace {

std::string human(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  char buf[64];
  std::snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", v, units[u]);
  return buf;
}

int info(const std::string& url) {
  tw::Device dev = tw::Device::remote(url, 0);
  tw::RemoteHandshake h = tw::remote_handshake(dev);
  tw::RemoteStats s = tw::remote_stats(dev);
  std::printf("server %s at %s (protocol %d)\n", h.server_id.c_str(), url.c_str(), h.protocol_version);
  std::printf("devices (%d):\n", h.device_count);
  for (const tw::RemoteDeviceInfo& d : tw::remote_devices(url)) {
    std::printf("  %d  %-8s backend=%s memory/session=%s\n", d.index, d.name.c_str(), d.backend.c_str(),
                human(d.memory_bytes).c_str());
  }
  std::printf("limits: max-sessions=%u max-frame=%s session-memory=%s queue-depth=%u\n", h.max_sessions,
              human(h.max_frame_bytes).c_str(), human(h.session_memory_bytes).c_str(), h.session_queue_depth);
  std::printf("sessions: %u open (including this one), %llu opened since start\n", s.sessions,
              static_cast<unsigned long long>(s.sessions_opened));
  std::printf("memory held: %s in total\n", human(s.bytes_held).c_str());
  for (auto& [id, bytes] : s.per_session_bytes) {
    std::printf("  session %llu: %s\n", static_cast<unsigned long long>(id), human(bytes).c_str());
  }
  std::printf("traffic: %llu ops executed, %llu frames in (%s), %llu frames out (%s)\n",
              static_cast<unsigned long long>(s.ops_executed), static_cast<unsigned long long>(s.frames_in),
              human(s.bytes_in).c_str(), static_cast<unsigned long long>(s.frames_out), human(s.bytes_out).c_str());
  return 0;
}

int ping(const std::string& url, int count) {
  tw::Device dev = tw::Device::remote(url, 0);
  dev.connect();
  std::vector<double> us;
  for (int i = 0; i < count; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    dev.sync();
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  auto pct = [&](double p) { return us[std::min(us.size() - 1, static_cast<size_t>(p * us.size()))]; };
  std::printf("%d round trips to %s: min %.1f us, median %.1f us, p99 %.1f us\n", count, url.c_str(), us.front(),
              pct(0.5), pct(0.99));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: tensorwire info URL | tensorwire ping URL [COUNT]\n");
    return 2;
  }
  std::string cmd = argv[1], url = argv[2];
  try {
    if (cmd == "info") return info(url);
    if (cmd == "ping") return ping(url, argc > 3 ? std::max(1, std::atoi(argv[3])) : 1000);
    std::fprintf(stderr, "tensorwire: unknown command '%s' (info, ping)\n", cmd.c_str());
    return 2;
  } catch (const tw::Error& e) {
    std::fprintf(stderr, "tensorwire: %s\n", e.what());
    return 1;
  }
}
