// Dead links (issue 34): a peer that falls silent without closing (its host gone, a middlebox
// dropping everything: no RST, no ICMP) is detected by TCP itself within a deadline. Every TCP
// socket net/ dials or accepts gets, from TW_DEAD_PEER_MS (default 30000; 0: the kernel's
// defaults, which take ~15 minutes with data in flight and forever without):
//  - TCP_USER_TIMEOUT = the deadline: data sent and not acknowledged for that long ends the
//    connection (ETIMEDOUT);
//  - keepalive probes once the connection was idle for half the deadline (at least 1 s), then
//    every second, so that an idle connection, or one waiting for a reply while the peer computes,
//    is checked too: a live peer's kernel answers them even while its program is busy, so a slow
//    server is never taken for a dead one.
// The failure surfaces as a read or write error: the client fails every waiter with it.
#pragma once
#include <chrono>

#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw::net {

inline constexpr std::chrono::milliseconds kDefaultDeadPeer{30000};
// TW_DEAD_PEER_MS as it is now (read per socket: a test may set it); 0 when off.
std::chrono::milliseconds dead_peer_deadline();
// Sets the options above on TCP socket `fd` (nothing when `deadline` is 0).
void detect_dead_peer(int fd, std::chrono::milliseconds deadline);

}  // namespace tw::net
TW_INTERNAL_END
