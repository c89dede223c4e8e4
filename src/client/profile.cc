#include "client/profile.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>

#include "core/env.h"
#include "tensorwire/profile.h"

namespace tw::client::profile {

namespace {

std::string device_name(const Connection& c) {
  return "remote(" + c.url().str() + ", " + std::to_string(c.device_index()) + ")";
}

void add(tw::profile::DeviceProfile& p, const Counters& c) {
  p.sessions += c.frames_out > 0 ? 1 : 0;  // a connection never used did not open a session
  p.ops += c.ops;
  p.round_trips += c.round_trips;
  p.frames_out += c.frames_out;
  p.bytes_out += c.bytes_out;
  p.frames_in += c.frames_in;
  p.bytes_in += c.bytes_in;
  p.wait_seconds += static_cast<double>(c.wait_ns) * 1e-9;
  p.resumes += c.resumes;
  p.resume_seconds.insert(p.resume_seconds.end(), c.resume_seconds.begin(), c.resume_seconds.end());
}

struct Registry {
  std::mutex mu;
  std::vector<tw::profile::DeviceProfile> closed;  // folded counters of closed connections
  // -> index in `closed` (its device's row). A connection enrols when constructed (it holds no
  // lock then), so devices() may take a connection's lock under this one, and never the reverse.
  std::map<const Connection*, size_t> live;
  std::chrono::steady_clock::time_point first;
  bool printing_at_exit = false;

  size_t row_locked(const std::string& device) {
    for (size_t i = 0; i < closed.size(); ++i)
      if (closed[i].device == device) return i;
    closed.push_back({});
    closed.back().device = device;
    return closed.size() - 1;
  }
};

// Never destroyed: connections held by static objects leave after exit handlers have run.
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

void print_at_exit() { std::fputs(tw::profile::report().c_str(), stderr); }

}  // namespace

void enrol(const Connection* c) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.closed.empty()) r.first = std::chrono::steady_clock::now();  // ~ the first connection
  r.live[c] = r.row_locked(device_name(*c));
  if (!r.printing_at_exit) {
    if (env_flag(Env::kPROFILE).value_or(false)) {
      r.printing_at_exit = true;
      std::atexit(print_at_exit);
    }
  }
}

void leave(const Connection* c, const Counters& final_counters) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.live.find(c);
  if (it == r.live.end()) return;
  add(r.closed[it->second], final_counters);
  r.live.erase(it);
}

}  // namespace tw::client::profile

namespace tw::profile {

namespace {
std::atomic<uint64_t> steps_marked{0};
std::mutex steps_mu;
std::map<std::string, uint64_t>& device_steps() {  // steps_mu
  static std::map<std::string, uint64_t> m;
  return m;
}
}  // namespace

void step() { steps_marked.fetch_add(1, std::memory_order_relaxed); }
void step(const std::string& device) {
  step();
  std::lock_guard<std::mutex> lock(steps_mu);
  ++device_steps()[device];
}
uint64_t steps() { return steps_marked.load(std::memory_order_relaxed); }

std::vector<DeviceProfile> devices() {
  client::profile::Registry& r = client::profile::registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<DeviceProfile> out = r.closed;
  // A live connection's counters take its own lock, never the registry's: no lock order issue.
  for (auto& [conn, row] : r.live) client::profile::add(out[row], conn->counters());
  std::erase_if(out, [](const DeviceProfile& d) { return d.sessions == 0; });
  std::lock_guard<std::mutex> steps_lock(steps_mu);
  for (DeviceProfile& d : out) {
    auto it = device_steps().find(d.device);
    if (it != device_steps().end()) d.steps = it->second;
  }
  return out;
}

namespace {
std::string human(double v, const char* unit) {
  const char* prefixes[] = {"", "Ki", "Mi", "Gi", "Ti"};
  int p = 0;
  while (v >= 1024 && p < 4) v /= 1024, ++p;
  char buf[64];
  std::snprintf(buf, sizeof buf, p ? "%.1f %s%s" : "%.0f %s%s", v, prefixes[p], unit);
  return buf;
}
}  // namespace

std::string report() {
  std::vector<DeviceProfile> ds = devices();
  if (ds.empty()) return "";
  double wall;
  {
    client::profile::Registry& r = client::profile::registry();
    std::lock_guard<std::mutex> lock(r.mu);
    wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - r.first).count();
  }
  std::ostringstream os;
  char line[512];
  std::snprintf(line, sizeof line, "tensorwire profile: %.3f s since the first remote connection\n",
                wall);
  os << line;
  std::snprintf(line, sizeof line, "%-40s %8s %10s %8s %10s %10s %10s %10s %14s\n", "device",
                "sessions", "ops", "ops/frame", "frames out", "bytes out", "frames in", "bytes in",
                "round trips");
  os << line;
  for (const DeviceProfile& d : ds) {
    double per_frame =
        d.frames_out ? static_cast<double>(d.ops) / static_cast<double>(d.frames_out) : 0;
    std::snprintf(line, sizeof line, "%-40s %8u %10llu %8.1f %10llu %10s %10llu %10s %14llu\n",
                  d.device.c_str(), d.sessions, static_cast<unsigned long long>(d.ops), per_frame,
                  static_cast<unsigned long long>(d.frames_out),
                  human(static_cast<double>(d.bytes_out), "B").c_str(),
                  static_cast<unsigned long long>(d.frames_in),
                  human(static_cast<double>(d.bytes_in), "B").c_str(),
                  static_cast<unsigned long long>(d.round_trips));
    os << line;
    double share = wall > 0 ? d.wait_seconds / wall : 0;
    std::snprintf(
        line, sizeof line, "  waited for replies %.3f s (%.0f%% of the time)%s\n", d.wait_seconds,
        100 * share,
        share > 0.5 ? ": each read (to_vector, item) or sync waits for every op queued before it; "
                      "read less often, or batch the reads"
                    : "");
    os << line;
    if (const uint64_t n = d.steps > 0 ? d.steps : steps(); n > 0) {
      const double per = 1.0 / static_cast<double>(n);
      std::snprintf(line, sizeof line,
                    "  per step (%llu steps): %.2f round trips, waited %.3f ms, %s out, %s in\n",
                    static_cast<unsigned long long>(n), static_cast<double>(d.round_trips) * per,
                    d.wait_seconds * per * 1e3,
                    human(static_cast<double>(d.bytes_out) * per, "B").c_str(),
                    human(static_cast<double>(d.bytes_in) * per, "B").c_str());
      os << line;
    }
  }
  return os.str();
}

}  // namespace tw::profile
