#include "net/tls_identity.h"

#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509_vfy.h>
#include <strings.h>

#include <cctype>
#include <memory>
#include <string>

#include "net/tls_stream.h"

namespace tw::net {

namespace {

template <typename T, void (*Free)(T*)>
struct Deleter {
  void operator()(T* p) const { Free(p); }
};
using X509Ptr = std::unique_ptr<X509, Deleter<X509, X509_free>>;
using KeyPtr = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using BioPtr = std::unique_ptr<BIO, Deleter<BIO, BIO_free_all>>;
using BnPtr = std::unique_ptr<BIGNUM, Deleter<BIGNUM, BN_free>>;

}  // namespace

std::string openssl_error(const char* fallback) {
  unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return fallback;
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

std::string fingerprint_of(const X509* cert) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  if (!cert || X509_digest(cert, EVP_sha256(), md, &len) != 1) return {};
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned i = 0; i < len; ++i) {
    if (i) out += ':';
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 15];
  }
  return out;
}

namespace {

// The fingerprint of the certificate the server presented, recorded while OpenSSL verifies it:
// when verification fails the handshake stops before the session keeps the peer's certificate
// (SSL_get1_peer_certificate answers null then), and that fingerprint is what a user needs to
// pin a server met for the first time. Kept in the SSL object's ex_data (freed with it).
int presented_index() {
  static const int index = SSL_get_ex_new_index(
      0, nullptr, nullptr, nullptr, [](void*, void* p, CRYPTO_EX_DATA*, int, long, void*) {
        delete static_cast<std::string*>(p);
      });
  return index;
}

int remember_presented(int preverify_ok, X509_STORE_CTX* store) {
  auto* ssl =
      static_cast<SSL*>(X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx()));
  // Called once per certificate of the chain; the leaf (depth 0) is the server's own.
  if (ssl != nullptr && X509_STORE_CTX_get_error_depth(store) == 0 &&
      SSL_get_ex_data(ssl, presented_index()) == nullptr) {
    SSL_set_ex_data(ssl, presented_index(),
                    new std::string(fingerprint_of(X509_STORE_CTX_get0_cert(store))));
  }
  return preverify_ok;
}

}  // namespace

std::string peer_fingerprint(const SSL* ssl) {
  X509Ptr cert(SSL_get1_peer_certificate(ssl));
  if (cert) return fingerprint_of(cert.get());
  const auto* presented = static_cast<const std::string*>(SSL_get_ex_data(ssl, presented_index()));
  return presented ? *presented : std::string();
}

Status load_identity(asio::ssl::context& ctx, const TlsOptions& tls) {
  asio::error_code ec;
  std::string what;
  if (!tls.cert_pem.empty() || !tls.key_pem.empty()) {
    what = "the TLS certificate and key given";
    ctx.use_certificate_chain(asio::buffer(tls.cert_pem), ec);
    if (!ec) ctx.use_private_key(asio::buffer(tls.key_pem), asio::ssl::context::pem, ec);
  } else if (!tls.cert_file.empty() && !tls.key_file.empty()) {
    what = "TLS certificate " + tls.cert_file + " and key " + tls.key_file;
    ctx.use_certificate_chain_file(tls.cert_file, ec);
    if (!ec) ctx.use_private_key_file(tls.key_file, asio::ssl::context::pem, ec);
  } else {
    return invalid_argument("a tls:// listener needs a certificate and its key (both)");
  }
  if (ec) return invalid_argument("cannot load " + what + ": " + ec.message());
  if (SSL_CTX_check_private_key(ctx.native_handle()) != 1) {
    return invalid_argument(what + ": the key does not match the certificate (" +
                            openssl_error("mismatch") + ")");
  }
  return Status::OK();
}

Result<bool> set_up_verification(asio::ssl::context& ctx, const TlsOptions& tls,
                                 const std::string& pinned) {
  SSL_CTX* c = ctx.native_handle();
  bool verify_chain = !tls.ca_file.empty() || pinned.empty();
  if (!tls.ca_file.empty()) {
    asio::error_code ec;
    ctx.load_verify_file(tls.ca_file, ec);
    if (ec) {
      return invalid_argument("cannot load the TLS CA file " + tls.ca_file +
                              " (TW_TLS_CA): " + ec.message());
    }
  } else if (verify_chain) {
    SSL_CTX_set_default_verify_paths(c);
  }
  // Pinned without a CA: the chain is not checked, the fingerprint is, once the handshake is
  // done and before a byte of the session is sent.
  SSL_CTX_set_verify(c, verify_chain ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, remember_presented);
  return verify_chain;
}

void expect_host(SSL* ssl, const std::string& host) {
  // The certificate must name the host dialed: an address as an IP entry, a name as DNS.
  if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host.c_str()) != 1) {
    ERR_clear_error();
    SSL_set1_host(ssl, host.c_str());
    SSL_set_tlsext_host_name(ssl, host.c_str());
  }
}

Status check_pinned(const Url& url, const SSL* ssl, const std::string& pinned) {
  if (pinned.empty()) return Status::OK();
  std::string got = peer_fingerprint(ssl);
  if (got != pinned) {
    return unavailable("TLS: refusing " + url.str() +
                       ": its certificate's SHA-256 fingerprint is " + got +
                       ", but the pinned one (TW_TLS_FINGERPRINT) is " + pinned);
  }
  return Status::OK();
}

Status handshake_failure(SSL* ssl, const Url& url, const TlsOptions& tls, int err) {
  // (Pinned alone, the chain is not verified: its result, recorded anyway, is no reason.)
  long verify = SSL_get_verify_result(ssl);
  if (verify != X509_V_OK && (SSL_get_verify_mode(ssl) & SSL_VERIFY_PEER)) {
    ERR_clear_error();
    std::string trust = tls.ca_file.empty() ? "the system's trusted CAs"
                                            : "the CA file " + tls.ca_file + " (TW_TLS_CA)";
    const std::string fp = peer_fingerprint(ssl);
    return unavailable(
        "TLS: refusing " + url.str() + ": its certificate (SHA-256 " + fp +
        ") does not verify against " + trust + ": " + X509_verify_cert_error_string(verify) +
        ". If that is your server's certificate (tensorwire-server prints its fingerprint when "
        "it starts), pin it: TW_TLS_FINGERPRINT=" +
        fp + " (C++: RemoteOptions::tls_fingerprint; tensorwire info --tls-fingerprint " + fp +
        ")");
  }
  std::string why = err == SSL_ERROR_SYSCALL || err == SSL_ERROR_ZERO_RETURN
                        ? openssl_error("the server closed the connection")
                        : openssl_error("protocol error");
  return unavailable("TLS handshake with " + url.str() + " failed (" + why +
                     "): is the server listening with tls:// there, not tcp://?");
}

Result<TlsIdentity> generate_self_signed(const std::string& common_name) {
  KeyPtr key(EVP_EC_gen("P-256"));
  X509Ptr cert(X509_new());
  BnPtr serial(BN_new());
  if (!key || !cert || !serial)
    return internal_error("cannot generate a TLS key: " + openssl_error("EVP_EC_gen"));
  bool ok = X509_set_version(cert.get(), X509_VERSION_3) == 1 &&
            BN_rand(serial.get(), 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) == 1 &&
            BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(cert.get())) != nullptr &&
            X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600) != nullptr &&
            X509_gmtime_adj(X509_getm_notAfter(cert.get()), 365L * 24 * 3600) != nullptr &&
            X509_set_pubkey(cert.get(), key.get()) == 1;
  X509_NAME* name = X509_get_subject_name(cert.get());
  ok = ok &&
       X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                                  reinterpret_cast<const unsigned char*>(common_name.c_str()), -1,
                                  -1, 0) == 1 &&
       X509_set_issuer_name(cert.get(), name) == 1 &&
       X509_sign(cert.get(), key.get(), EVP_sha256()) > 0;
  BioPtr cert_bio(BIO_new(BIO_s_mem())), key_bio(BIO_new(BIO_s_mem()));
  ok = ok && cert_bio && key_bio && PEM_write_bio_X509(cert_bio.get(), cert.get()) == 1 &&
       PEM_write_bio_PrivateKey(key_bio.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr) ==
           1;
  if (!ok)
    return internal_error("cannot make a self-signed TLS certificate: " + openssl_error("X509"));
  auto text = [](BIO* b) {
    char* p = nullptr;
    long n = BIO_get_mem_data(b, &p);
    return std::string(p, static_cast<size_t>(n));
  };
  return TlsIdentity{text(cert_bio.get()), text(key_bio.get()), fingerprint_of(cert.get())};
}

Result<std::string> normalize_fingerprint(const std::string& text) {
  std::string rest = text;
  if (rest.size() > 7 && strncasecmp(rest.c_str(), "sha256:", 7) == 0) rest = rest.substr(7);
  std::string hex;
  bool digits_only = true;
  for (char ch : rest) {
    auto u = static_cast<unsigned char>(ch);
    if (ch == ':' || std::isspace(u)) continue;
    digits_only = digits_only && std::isxdigit(u);
    hex += static_cast<char>(std::toupper(u));
  }
  if (!digits_only || hex.size() != 64) {
    return invalid_argument(
        "a TLS fingerprint is a SHA-256 of 64 hex digits (as tensorwire-server prints it, "
        "AB:CD:...), got '" +
        text + "'");
  }
  std::string out;
  for (size_t i = 0; i < 64; i += 2) out += (i ? ":" : "") + hex.substr(i, 2);
  return out;
}

}  // namespace tw::net
