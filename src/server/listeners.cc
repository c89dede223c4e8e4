// What the server listens on: the tls:// identity, a listener on each address (the
// secure-by-default exposure check, and the warning --insecure prints), and accepting
// connections onto the shards.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>

#include "net/tls_stream.h"
#include "net/url.h"
#include "server/connection.h"
#include "server/server_impl.h"

namespace tw::server {

namespace {

// The identity of the tls:// listeners: the PEM files given, else a self-signed pair made now
// (`generated` says so) when some address is tls://.
Result<net::TlsOptions> server_tls(const ServerOptions& opts, bool& generated) {
  net::TlsOptions tls;
  tls.cert_file = opts.tls_cert_file;
  tls.key_file = opts.tls_key_file;
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return invalid_argument("a TLS certificate and its key go together (--tls-cert and --tls-key)");
  }
  bool any_tls = std::any_of(opts.listen.begin(), opts.listen.end(),
                             [](const std::string& u) { return u.rfind("tls://", 0) == 0; });
  if (!tls.cert_file.empty() && !any_tls) {
    return invalid_argument("a TLS certificate was given, but no address is tls://");
  }
  if (any_tls && tls.cert_file.empty()) {
    TW_ASSIGN_OR_RETURN(net::TlsIdentity id, net::generate_self_signed("tensorwire-server"));
    tls.cert_pem = std::move(id.cert_pem);
    tls.key_pem = std::move(id.key_pem);
    generated = true;
  }
  return tls;
}

}  // namespace

Status open_listeners(Server::Impl& srv) {
  TW_ASSIGN_OR_RETURN(net::TlsOptions tls, server_tls(srv.opts, srv.tls_self_signed));
  for (const std::string& text : srv.opts.listen) {
    TW_ASSIGN_OR_RETURN(net::Url url, net::parse_url(text));
    bool has_credential = !srv.opts.credential.empty();
    TW_RETURN_NOT_OK(net::check_exposure(url, has_credential, srv.opts.insecure));
    TW_ASSIGN_OR_RETURN(std::unique_ptr<net::Listener> l, net::listen(url, srv.io(), tls));
    if (!net::check_exposure(url, has_credential, false).ok()) {
      std::fprintf(
          stderr,
          "\n*** INSECURE (--insecure): listening on %s, which other hosts can reach, "
          "without %s. Anyone on the network can %s. ***\n\n",
          l->url().str().c_str(), url.scheme == net::Url::Scheme::kTls ? "a credential" : "TLS",
          has_credential ? "read the traffic, the credential included, and then run ops here"
                         : "run ops on this machine and read what it computes");
    }
    srv.listeners.push_back(std::move(l));
  }
  return Status::OK();
}

std::string collective_host(const ServerOptions& opts,
                            const std::vector<std::unique_ptr<net::Listener>>& listeners) {
  if (!opts.collective_host.empty()) return opts.collective_host;
  for (const auto& l : listeners) {
    const net::Url& u = l->url();
    if (u.scheme == net::Url::Scheme::kUnix) continue;
    if (u.host == "0.0.0.0" || u.host == "::" || u.host == "[::]" || u.host.empty()) break;
    return u.host;
  }
  return "127.0.0.1";
}

}  // namespace tw::server

namespace tw {

void Server::Impl::accept(net::Listener& l) {
  Shard& shard = least_loaded();
  l.async_accept(shard.io, [this, &l, &shard](const asio::error_code& ec,
                                              std::unique_ptr<net::Stream> stream) {
    if (ec) {
      if (ec == asio::error::operation_aborted || stopping) return;
      // Out of descriptors and similar: keep serving existing sessions, retry shortly.
      auto t = std::make_shared<asio::steady_timer>(io(), std::chrono::milliseconds(50));
      t->async_wait([this, &l, t](asio::error_code) { accept(l); });
      return;
    }
    std::make_shared<server::Connection>(*this, shard, std::move(stream))->start();
    accept(l);
  });
}

}  // namespace tw
