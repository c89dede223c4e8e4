// Certificate identity and verification for tls_stream.cc (the TLS stream itself): the
// server's certificate and key, how a dialing client trusts the server (CA file, the system's
// CAs, a pinned fingerprint) and the messages a refusal gives, and fingerprints. Internal to
// net/: it includes OpenSSL, which nothing above net/ sees. What net/ offers callers of these
// (generate_self_signed, normalize_fingerprint) is declared in tls_stream.h and defined in
// tls_identity.cc.
#pragma once
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <asio/ssl/context.hpp>
#include <string>

#include "net/stream.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw::net {

// The first error OpenSSL queued on this thread (and the queue cleared), for messages.
std::string openssl_error(const char* fallback);
// A certificate's SHA-256 fingerprint, "AB:CD:..." (empty for none).
std::string fingerprint_of(const X509* cert);
// The fingerprint of the certificate the peer of `ssl` presented.
std::string peer_fingerprint(const SSL* ssl);

// Listening: loads the certificate chain and key `tls` names (PEM text or files) into `ctx` and
// checks that they match.
Status load_identity(asio::ssl::context& ctx, const TlsOptions& tls);

// Dialing: how the server is trusted, from tls.ca_file and the pinned fingerprint (canonical,
// normalize_fingerprint(); empty when none is pinned). Returns whether the chain is verified.
Result<bool> set_up_verification(asio::ssl::context& ctx, const TlsOptions& tls,
                                 const std::string& pinned);
// Has the handshake check that the certificate names `host` (when the chain is verified).
void expect_host(SSL* ssl, const std::string& host);
// After the handshake: the server's certificate is the pinned one (or nothing is pinned).
Status check_pinned(const Url& url, const SSL* ssl, const std::string& pinned);
// The error for a handshake that failed with SSL error `err`: a certificate that did not
// verify, else what went wrong on the wire.
Status handshake_failure(SSL* ssl, const Url& url, const TlsOptions& tls, int err);

}  // namespace tw::net
TW_INTERNAL_END
