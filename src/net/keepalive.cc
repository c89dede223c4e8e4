#include "net/keepalive.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdlib>

#include "core/env.h"

namespace tw::net {

std::chrono::milliseconds dead_peer_deadline() {
  const std::optional<uint64_t> v = env_number(Env::kDEAD_PEER_MS);
  if (!v) return kDefaultDeadPeer;
  return std::chrono::milliseconds(std::min<uint64_t>(*v, uint64_t{1} << 40));
}

void detect_dead_peer(int fd, std::chrono::milliseconds deadline) {
  if (deadline.count() <= 0) return;
  const int user_timeout = static_cast<int>(std::min<long long>(deadline.count(), 1LL << 30));
  const int idle = static_cast<int>(std::max<long long>(1, deadline.count() / 2000));
  const int one = 1, interval = 1, count = 127;  // TCP_USER_TIMEOUT decides, not the count
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof user_timeout);
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
}

}  // namespace tw::net
