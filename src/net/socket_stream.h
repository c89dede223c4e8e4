// The socket transports: TCP (tcp://) and Unix-domain sockets (unix://), one Stream over a
// connected stream socket of either family. stream.cc dispatches dial() and listen() here.
#pragma once
#include <asio/generic/stream_protocol.hpp>
#include <functional>
#include <memory>

#include "net/stream.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw::net {

using Socket = asio::generic::stream_protocol::socket;
// What a listener makes of each accepted socket (TCP_NODELAY already set on TCP): the stream
// its accept handler receives, or the error it gets instead. Unset: the plain socket stream.
using MakeStream = std::function<std::unique_ptr<Stream>(Socket, asio::error_code&)>;

Result<std::unique_ptr<Stream>> dial_socket(const Url& url, asio::io_context& io);
Result<std::unique_ptr<Listener>> listen_socket(const Url& url, asio::io_context& io,
                                                MakeStream make = {});
// The connected socket under dial_socket(), for a transport that runs over one (TLS). Any
// host:port scheme connects by TCP.
Result<Socket> connect_socket(const Url& url, asio::io_context& io);
// Blocks until `fd` has one of `events` (poll(2) flags), or an error or hang-up to report, or
// `timeout_ms` passes (-1: no limit; then it returns false).
bool wait_fd(int fd, short events, int timeout_ms = -1);
// A Stream over a connected socket descriptor, which it then owns (a socketpair end, say).
Result<std::unique_ptr<Stream>> adopt_socket(asio::io_context& io, int fd);

}  // namespace tw::net
TW_INTERNAL_END
