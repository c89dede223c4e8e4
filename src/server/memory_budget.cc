#include "server/memory_budget.h"

#include <unistd.h>

namespace tw::server {

uint64_t default_max_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return UINT64_MAX;  // unknown: no server-wide limit
  return static_cast<uint64_t>(pages) / 10 * 8 * static_cast<uint64_t>(page);
}

}  // namespace tw::server
