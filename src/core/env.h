// The environment variables the library reads, declared once (TW_ENV_LIST): each one's name,
// what kind of value it takes and what it does. Every read goes through here (scripts/
// check_layers.py refuses a getenv of a TW_ variable elsewhere in src/, but in a backend's own
// folder, whose variables its own docs list), `tensorwire env` prints the list, and
// docs/remote.md's table "Environment variables" is checked against it
// (tests/integration/declared_options_test.cc). A malformed number is reported once on stderr,
// naming the variable, the value and what it takes, and ignored (the default holds), instead of
// being read as 0.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw {

enum class EnvKind : uint8_t {
  kCount,  // a non-negative integer
  kBytes,  // a non-negative integer, optionally with K, M, G or T (binary: 4M = 4 << 20)
  kFlag,   // 0 (or empty): off; anything else: on
  kText,   // a string, taken as it is
};

// X(NAME, kind, what it does): TW_NAME. Grouped by who reads them: the intra-op threads and the
// buffer pool; the client; the transports; the server; diagnostics; test hooks.
#define TW_ENV_LIST(X)                                                                             \
  X(NUM_THREADS, kCount, "intra-op threads per kernel (default: the machine's hardware threads)")  \
  X(POOL_CACHE_BYTES, kBytes, "freed buffer bytes the process keeps for reuse (default 4G)")       \
  X(BATCH_OPS, kCount, "ops a client batches into one frame before sending (default 512)")         \
  X(BATCH_BYTES, kBytes,                                                                           \
    "payload bytes a client batches into one frame before sending (default 1M; at least 1K)")      \
  X(FLUSH_IDLE_US, kCount,                                                                         \
    "a client sends a partial batch after this long without a new op (microseconds; default 500)") \
  X(SPIN_US, kCount,                                                                               \
    "a client polls for a reply this long before it sleeps (microseconds, default 50, at most "    \
    "10000)")                                                                                      \
  X(SHM, kFlag, "0: no shared memory for large payloads over unix:// (default on)")                \
  X(COMPRESS, kText,                                                                               \
    "auto (default: zstd on links to other hosts when it pays), 0 (off) or 1 (always measure)")    \
  X(DEDUP, kFlag, "0: never offer an upload by its hash (default on)")                             \
  X(DEDUP_MIN_BYTES, kBytes, "smallest upload a client offers by its hash first (default 4M)")     \
  X(WINDOW_BYTES, kBytes,                                                                          \
    "bytes a client lets wait unsent or unanswered before it waits (flow control; 0: no limit; "   \
    "default 8M)")                                                                                 \
  X(CREDENTIAL, kText, "the credential a client presents (tensorwire-server --credential-file)")   \
  X(RESUME, kFlag, "0: a dropped connection fails the session instead of resuming it")             \
  X(RESUME_ATTEMPTS, kCount,                                                                       \
    "reconnection attempts before a session is given up (1-100; default 8)")                       \
  X(RESUME_WINDOW, kBytes, "sent bytes a client keeps to replay after a resume (default 64M)")     \
  X(TLS_CA, kText, "CA file (PEM) a client verifies a tls:// server's certificate with")           \
  X(TLS_FINGERPRINT, kText,                                                                        \
    "the SHA-256 fingerprint of the tls:// server's certificate to pin (AB:CD:...)")               \
  X(TLS_CIPHERS, kText, "TLS 1.3 cipher suites a client offers, in order (OpenSSL's names)")       \
  X(CONNECT_TIMEOUT_MS, kCount, "how long a TCP connect may take (default 10000)")                 \
  X(HANDSHAKE_TIMEOUT_MS, kCount,                                                                  \
    "how long a handshake may take, TLS included, on either side (default 10000)")                 \
  X(DEAD_PEER_MS, kCount,                                                                          \
    "a peer silent this long while data is unacknowledged is dead (0: off; default 30000)")        \
  X(DEDUP_CACHE_BYTES, kBytes, "a server's cache of uploads by their hash (default 2G)")           \
  X(PROFILE, kFlag, "print each remote device's time, bytes and round trips at exit")              \
  X(DEBUG_WAITS, kFlag, "print every client wait of 1 ms or more, and what it waited for")         \
  X(TEST_OP_DELAY_US, kCount, "test hook: a server makes every op take this much longer")          \
  X(TEST_PLANT_GRAD_BUG, kText,                                                                    \
    "test hook: sub_broadcast plants a wrong gradient rule (the differential fuzzer's test)")

enum class Env : uint8_t {
#define TW_ENV_ENUM(name, kind, what) k##name,
  TW_ENV_LIST(TW_ENV_ENUM)
#undef TW_ENV_ENUM
};

struct EnvVar {
  const char* name;  // "TW_NUM_THREADS"
  EnvKind kind;
  const char* what;
};

// Every variable, in declaration order.
std::span<const EnvVar> env_vars();
const EnvVar& env_var(Env v);
// "a count", "bytes (4M, 1G, ...)", "0 or 1", "text".
const char* env_kind_name(EnvKind kind);

// The variable's value; nullopt when unset or empty.
std::optional<std::string> env_text(Env v);
// A kCount or kBytes variable's value; nullopt when unset, empty or malformed (reported once).
std::optional<uint64_t> env_number(Env v);
// A kFlag variable: nullopt when unset or empty, else whether it is on (not "0").
std::optional<bool> env_flag(Env v);

// "4M" -> 4 << 20: digits, then optionally K, M, G or T (with or without "B" or "iB"; a
// fraction allowed with a unit, "1.5G"). Nullopt for anything else.
std::optional<uint64_t> parse_byte_count(const std::string& text);

}  // namespace tw
TW_INTERNAL_END
