// TLS over TCP (tls://host:port): a Stream whose bytes pass through an OpenSSL record layer
// running over the non-blocking socket, and the certificate handling around it (verifying a
// server by CA file or pinned fingerprint, generating a self-signed pair). TLS 1.3 only, with
// the AEAD suites AES-GCM and ChaCha20-Poly1305. stream.cc dispatches dial() and listen() of
// tls:// here; nothing above net/ sees OpenSSL. tls_stream.cc is the stream, its listener and
// dialing; tls_identity.cc the certificates (loading, verifying, generating, fingerprints).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "net/stream.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw::net {

// Connects by TCP, shakes hands (within a deadline) and verifies the server as `tls` says.
Result<std::unique_ptr<Stream>> dial_tls(const Url& url, asio::io_context& io,
                                         const TlsOptions& tls);
// A TCP listener whose streams are TLS servers with the certificate `tls` names; each stream
// does its handshake within its first reads (OpenSSL's implicit handshake), so a slow peer
// holds only its own connection, never the accept loop.
Result<std::unique_ptr<Listener>> listen_tls(const Url& url, asio::io_context& io,
                                             const TlsOptions& tls);

struct TlsIdentity {
  std::string cert_pem, key_pem;
  std::string fingerprint;  // "AB:CD:...", as Listener::tls_fingerprint() reports it
};
// A fresh P-256 key and a self-signed certificate for it, named `common_name`, valid for a year.
Result<TlsIdentity> generate_self_signed(const std::string& common_name);

// The canonical form ("AB:CD:...", 32 bytes) of a SHA-256 fingerprint given as hex with or
// without colons, in either case, optionally prefixed "sha256:"; an error says what is wrong.
Result<std::string> normalize_fingerprint(const std::string& text);

// Whether the first bytes a peer sent are a TLS record header (handshake or alert, TLS 1.x):
// what a plain client reads when it reached a tls:// port.
bool looks_like_tls(const uint8_t* bytes, size_t n);

// The cipher suite a TLS stream negotiated ("TLS_AES_128_GCM_SHA256"); empty for the others.
std::string tls_cipher(const Stream& s);

}  // namespace tw::net
TW_INTERNAL_END
