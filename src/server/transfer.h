// Tensor moves that bypass the client (protocol 3; docs/protocol.md §8.9): capabilities, which a
// server signs for one tensor of one of its sessions, and the pull by which another server
// fetches the bytes a capability grants. Kept apart from the sessions and the sockets: a
// session exports and redeems through a CapabilityTable, a peer connection answers a Fetch with
// serve_fetch() (handshake.cc) and a session's connection hands an import to a Puller
// (connection.cc), which does the network side on threads of its own so that no session worker
// ever waits for another server. Tickets (protocol 17): a tensor exported under a ticket its
// client drew, whose fetches wait in the table (park) until the export has run.
#pragma once
#include <array>
#include <asio/error_code.hpp>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/status.h"
#include "core/tensor_data.h"
#include "ir/ops.h"
#include "protocol/messages.h"
#include "server/metrics.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace asio {
class io_context;
}
namespace tw::net {
class Stream;
}

namespace tw::server {

// The public fields of a capability: what it grants, to be redeemed where, until when. The
// token is these fields, a random single-use nonce and an HMAC-SHA256 over all of them under
// the issuing server's secret; anyone can read the fields (parse()), only the issuer can make or
// check the signature.
struct Capability {
  std::string server_id;  // the issuing server's instance id (Welcome's server_id)
  uint64_t session_id = 0;
  ir::TensorId tensor = 0;
  TensorMeta meta;
  uint64_t expires_ms = 0;  // on the issuer's clock
  std::array<uint8_t, 16> nonce{};
};

// The capabilities a server has issued and not yet seen redeemed or expire, each holding the
// tensor's data as it was at export (tensors are immutable, so this shares the storage rather
// than copying it; the bytes stay alive until the capability is redeemed or expires, even if
// the session drops the tensor meanwhile). Thread-safe.
class CapabilityTable {
 public:
  using Clock = std::function<uint64_t()>;  // milliseconds, monotonic
  static uint64_t steady_ms();
  // A per-process random secret (OpenSSL's RAND_bytes) signs every capability of `server_id`;
  // each is valid for `ttl` after it is issued.
  explicit CapabilityTable(std::string server_id = "",
                           std::chrono::milliseconds ttl = std::chrono::seconds(60),
                           Clock clock = steady_ms);
  // Set before the server starts serving (the id is chosen at start).
  void configure(std::string server_id, std::chrono::milliseconds ttl);
  const std::string& server_id() const { return server_id_; }

  // A capability for tensor `tensor` of session `session`, whose bytes are `data`.
  Result<std::string> issue(uint64_t session, ir::TensorId tensor, TensorData data);
  // The tensor `token` grants, if it is this server's, unaltered, names tensor `tensor` of
  // session `session`, has not expired and was not redeemed before; the capability is used up.
  // Every refusal is an invalid-argument error saying which check failed and nothing about any
  // other tensor.
  // With `pull` (protocol 10's FetchBound): the first redeem binds the capability to that pull
  // instead of using it up, and hands out the bytes; later redeems by the same pull (a retry
  // after a cut) get them again, any other pull or unbound redeem is refused as if it were used;
  // done() uses it up. Single use holds: the bytes land once, on the one importer that chose
  // `pull`, which retries only a transfer it did not receive whole.
  Result<TensorData> redeem(const std::string& token, uint64_t session, ir::TensorId tensor,
                            const std::string& pull = "");
  // The pull `pull` received the tensor `token` grants: the capability is used up (nothing
  // happens when it is not this server's, not bound to that pull, or gone already). An importer
  // that never says so (its link cut after the last byte) leaves it to expire.
  void done(const std::string& token, const std::string& pull);
  // Tickets (protocol 17, ExportAs): tensor `tensor` of session `session` exported under a
  // ticket its client drew, as `data` or the error that kept it from being exported. The
  // capability granting it is the client's ticket capability (protocol/messages.h), redeemed as a
  // signed one is (single use, bound to a pull, expiring), and refused with that error. Wakes the
  // fetches park() holds for it.
  void issue_ticket(uint64_t session, ir::TensorId tensor, const std::string& ticket,
                    Result<TensorData> data);
  // A fetch that came before its ticket was issued (the client sends the ExportAs and the import
  // without waiting, and the source may still be computing the tensor): keeps `wake` until
  // issue_ticket() for it, or until its session has made no progress for the capability ttl,
  // then calls it once; true when kept. False (serve the fetch now) when `token` is not a ticket
  // capability of this server, or its ticket was issued, or kMaxOutstanding fetches wait already.
  // `wake` runs under the table's lock: it must only post the fetch back to its connection.
  using Wake = std::function<void()>;
  bool park(const std::string& token, Wake wake);
  // Session `session` is running tasks: the fetches parked for its tickets wait another ttl (a
  // long queue ahead of the export is not a reason to refuse it; a session gone idle is).
  void progress(uint64_t session);
  // The fields of a token, unverified (the importing server reads what it is about to receive);
  // a ticket capability's too.
  static Result<Capability> parse(const std::string& token);
  // The bytes capabilities alone keep alive: exported tensors their sessions have dropped since
  // (while a session holds the tensor, its bytes count there). The server-wide memory budget
  // counts them as held (MemoryBudget::set_pinned).
  uint64_t pinned_bytes() const;
  // Those of them session `session` exported: its memory quota counts them as held.
  uint64_t pinned_bytes(uint64_t session) const;
  // outstanding() without the lock: 0 when no capability is outstanding (then nothing is
  // pinned; the quota checks ask it for every op).
  size_t outstanding_hint() const { return outstanding_.load(std::memory_order_relaxed); }
  // Forgets the expired capabilities (issue() does too); true if it forgot any.
  bool sweep();
  // Capabilities outstanding; at most kMaxOutstanding, since each keeps its tensor alive.
  size_t outstanding() const;
  static constexpr size_t kMaxOutstanding = 4096;

 private:
  std::string sign(const std::vector<uint8_t>& fields) const;
  Result<Capability> verify(const std::string& token, const uint64_t* session,
                            ir::TensorId tensor) const;
  void sweep_locked(uint64_t now);
  void count_locked() { outstanding_.store(by_nonce_.size(), std::memory_order_relaxed); }

  std::string server_id_;
  std::chrono::milliseconds ttl_;
  Clock clock_;
  std::array<uint8_t, 32> secret_{};
  mutable std::mutex mu_;
  struct Entry {
    uint64_t expires_ms = 0;
    TensorData data;
    uint64_t session = 0;  // the exporting session
    std::string pull;      // bound to this pull (FetchBound); empty: not yet fetched
    // A ticket's: the tensor it names, and why it holds no data when it could not be exported.
    ir::TensorId tensor = 0;
    Status error;
  };
  // A ticket's key in by_nonce_ and waiting_: "T", the session's 8 bytes, the ticket (never the
  // 16 bytes of a signed capability's nonce).
  static std::string ticket_key(uint64_t session, const std::string& ticket);
  // The key of `token` when it is a ticket capability of this server ("" otherwise).
  std::string ticket_key_of(const std::string& token, protocol::TicketCapability* c) const;
  Result<TensorData> take_locked(std::unordered_map<std::string, Entry>::iterator it,
                                 const std::string& pull);
  std::unordered_map<std::string, Entry> by_nonce_;  // nonce bytes -> what it grants
  struct Parked {
    uint64_t expires_ms = 0;
    uint64_t session = 0;
    Wake wake;
  };
  std::unordered_multimap<std::string, Parked> waiting_;  // ticket key -> fetches waiting
  std::atomic<size_t> waiting_count_{0};                  // waiting_.size(), read without the lock
  // by_nonce_.size(), stored under mu_ as it changes: pinned_bytes() with none outstanding (every
  // reservation asks) takes no lock.
  std::atomic<size_t> outstanding_{0};
};

// Answers a peer's Fetch or FetchBound frame: the ReadResult (same request id) carrying the
// granted tensor, or the refusal. A tensor over what one frame can carry (4 GiB) is refused as a
// read is. A tensor sent counts as an outgoing transfer in `metrics`. A FetchDone uses up its
// capability and leaves `reply` empty (it has none).
// `park` (when given): a fetch whose ticket is not issued yet is parked with it
// (CapabilityTable::park) and `reply` left empty; the connection serves it again, without `park`,
// when it is woken.
void serve_fetch(CapabilityTable& table, ServerMetrics& metrics, const Buffer& frame,
                 protocol::OutFrame& reply, CapabilityTable::Wake park = {});

// Blocking I/O on a server's own connection to a peer (pulls here, a collective's rendezvous in
// collective.cc), driven on `io` by the calling thread.
// Runs one asynchronous step of `s` for at most `stall`; a step that does not complete by then
// is ended by shutting the stream down, and reports timed_out. `*moved` (when given): the bytes
// the step moved, all of them or those before it failed.
asio::error_code step(
    asio::io_context& io, net::Stream& s, std::chrono::milliseconds stall,
    const std::function<void(std::function<void(const asio::error_code&, size_t)>)>& start,
    size_t* moved = nullptr);
// A frame's payload cut short: what arrived of it.
struct PartialFrame {
  Buffer payload;  // the whole payload's room, its first `received` bytes filled
  size_t received = 0;
};
// Reads one frame's payload; `max` bounds its length before anything is allocated. The byte at
// offset `aligned` of the payload lands 64-byte aligned. `partial` (when given) gets what arrived
// when the connection ends within the payload. `first` (when nonzero) bounds the wait for the
// frame's first bytes instead of `stall`.
Result<Buffer> read_frame(asio::io_context& io, net::Stream& s, std::chrono::milliseconds stall,
                          uint64_t max, const char* what, size_t aligned = 0,
                          PartialFrame* partial = nullptr,
                          std::chrono::milliseconds first = std::chrono::milliseconds(0));

// What an importing server needs to pull one tensor.
struct PullRequest {
  protocol::TensorSource source;
  TensorMeta meta;         // what the client said the tensor is; the bytes must match it
  std::string credential;  // presented in the Hello to the source (the importer's own)
  std::string importer;    // names this server in errors ("server 9f3a (tcp://...)")
};

// Pulls tensors from other servers on a fixed number of threads of its own (blocking I/O there,
// so no session worker waits), each step bounded by a stall timeout, so that a source that dies
// or stops sending fails the pull promptly. Pulls beyond the thread count wait in a queue.
// A pull whose connection is cut (it ends or resets before the tensor is whole) is tried again,
// up to kPullAttempts times with a backoff from 5 ms doubling, when the source speaks protocol
// 10 (FetchBound keeps the capability for this pull until FetchDone); a source that refuses the
// connection (it is gone), stalls past the timeout or refuses the capability is not retried.
// Against a source that speaks protocol 11 every try is a FetchFrom, and a retry asks only for
// the bytes after those received before the cut (they are kept); an older source sends the
// whole tensor again. `metrics` (when given) counts the retries and the bytes kept or refetched.
class Puller {
 public:
  using Done = std::function<void(Result<TensorData>)>;
  explicit Puller(int threads = kThreads,
                  std::chrono::milliseconds stall = std::chrono::seconds(30),
                  ServerMetrics* metrics = nullptr);
  // Aborts the pulls under way (their callbacks get the error) and those queued; later
  // start()s fail at once. The destructor aborts, then joins the threads.
  void abort();
  ~Puller();
  Puller(const Puller&) = delete;
  Puller& operator=(const Puller&) = delete;
  // Runs `done` on a pull thread with the bytes or with an error naming both servers.
  void start(PullRequest request, Done done);
  // Concurrent pulls: each holds one socket and one tensor being received.
  static constexpr int kThreads = 4;
  // Tries of one pull (the first included); the backoff between them sums to about 0.6 s.
  static constexpr int kPullAttempts = 8;
  // How long the pull of a ticket capability (protocol 17) waits for the reply to start: the
  // source holds the fetch until its session has run the export, which may be queued behind
  // long work, and refuses it itself when that session stops making progress (the capability
  // ttl); the stall timeout applies from the reply's first bytes on.
  static constexpr std::chrono::hours kTicketReplyWait{1};

 private:
  // What the tries of one pull received so far (kept across cuts, protocol 11): the first
  // reply's frame, its tensor bytes from `data_at`, the first `have` of them received.
  // `fresh` of them came in the last try; `lost` bytes it received are fetched again (a source
  // before protocol 11 sends the tensor whole).
  struct Received {
    Buffer frame;
    size_t data_at = 0;
    uint64_t have = 0;
    uint64_t fresh = 0, lost = 0;
  };
  // One try; *retry says whether a failure may be tried again.
  Result<TensorData> pull(const PullRequest& r, const std::string& pull_id, Received& kept,
                          bool* retry);
  // Keeps `n` tensor bytes a FetchFrom reply for the `rest` bytes from `kept.have` on carries at
  // `data_at` of `frame` (a frame of another size than such a reply's is not kept).
  static void keep(Received& kept, const Buffer& frame, size_t data_at, uint64_t rest, uint64_t n);
  void run();

  std::chrono::milliseconds stall_;
  ServerMetrics* metrics_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::deque<std::pair<PullRequest, Done>> queue_;
  std::unordered_set<net::Stream*> active_;  // shut down by the destructor
  std::vector<std::thread> threads_;
};

}  // namespace tw::server
TW_INTERNAL_END
