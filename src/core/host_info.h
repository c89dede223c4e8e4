// What the host machine is, for a device's description (Backend::describe, the server's
// Welcome): the CPU's model name and thread count, and the host memory's total and available
// bytes as Linux reports them (/proc/cpuinfo, /proc/meminfo; sysconf where those are missing).
#pragma once
#include <cstdint>
#include <string>

#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw {

struct HostInfo {
  std::string cpu_model;          // "AMD EPYC 7B13 64-Core Processor"; "unknown CPU" if unread
  unsigned threads = 0;           // hardware threads this process may run on
  uint64_t memory_total = 0;      // MemTotal
  uint64_t memory_available = 0;  // MemAvailable: what can be allocated without swapping
};

// Reads the figures now (a few file reads: tens of microseconds); the model name once.
HostInfo host_info();

}  // namespace tw
TW_INTERNAL_END
