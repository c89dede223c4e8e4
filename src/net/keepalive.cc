#include "net/keepalive.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdlib>

namespace tw::net {

std::chrono::milliseconds dead_peer_deadline() {
  const char* e = std::getenv("TW_DEAD_PEER_MS");
  if (e == nullptr || *e == '\0') return kDefaultDeadPeer;
  return std::chrono::milliseconds(std::max(0L, std::atol(e)));
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
