// The socket transports: TCP (tcp://) and Unix-domain sockets (unix://), one Stream over a
// connected stream socket of either family. stream.cc dispatches dial() and listen() here.
#pragma once
#include <memory>

#include "net/stream.h"

namespace tw::net {

Result<std::unique_ptr<Stream>> dial_socket(const Url& url, asio::io_context& io);
Result<std::unique_ptr<Listener>> listen_socket(const Url& url, asio::io_context& io);
// A Stream over a connected socket descriptor, which it then owns (a socketpair end, say).
Result<std::unique_ptr<Stream>> adopt_socket(asio::io_context& io, int fd);

}  // namespace tw::net
