#include "core/host_info.h"

#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <thread>

namespace tw {

namespace {

std::string read_cpu_model() {
  std::FILE* f = std::fopen("/proc/cpuinfo", "r");
  std::string model;
  if (f != nullptr) {
    char line[512];
    while (std::fgets(line, sizeof line, f) != nullptr) {
      if (std::strncmp(line, "model name", 10) != 0) continue;
      const char* colon = std::strchr(line, ':');
      if (colon == nullptr) continue;
      model = colon + 1;
      break;
    }
    std::fclose(f);
  }
  while (!model.empty() && (model.front() == ' ' || model.front() == '\t')) model.erase(0, 1);
  while (!model.empty() && (model.back() == '\n' || model.back() == ' ')) model.pop_back();
  return model.empty() ? "unknown CPU" : model;
}

// A "Name:   123 kB" line's value in bytes, or 0.
uint64_t meminfo_kb(const char* text, const char* name) {
  const char* at = std::strstr(text, name);
  if (at == nullptr) return 0;
  unsigned long long kb = 0;
  if (std::sscanf(at + std::strlen(name), " %llu", &kb) != 1) return 0;
  return static_cast<uint64_t>(kb) * 1024;
}

}  // namespace

HostInfo host_info() {
  static const std::string model = read_cpu_model();
  HostInfo h;
  h.cpu_model = model;
  cpu_set_t set;
  CPU_ZERO(&set);
  h.threads = sched_getaffinity(0, sizeof set, &set) == 0 ? static_cast<unsigned>(CPU_COUNT(&set))
                                                          : std::thread::hardware_concurrency();
  char text[4096] = {};
  if (std::FILE* f = std::fopen("/proc/meminfo", "r")) {
    const size_t n = std::fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    std::fclose(f);
  }
  h.memory_total = meminfo_kb(text, "MemTotal:");
  h.memory_available = meminfo_kb(text, "MemAvailable:");
  if (h.memory_total == 0) {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    if (pages > 0 && page > 0) h.memory_total = static_cast<uint64_t>(pages) * page;
  }
  if (h.memory_available == 0) {
    const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    if (pages > 0 && page > 0) h.memory_available = static_cast<uint64_t>(pages) * page;
  }
  return h;
}

}  // namespace tw
