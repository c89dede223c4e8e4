// Collectives across servers (protocol 3's kCollective task; docs/protocol.md §8.10): each
// participating session runs its part on Gloo (TCP transport), which connects the participants
// to each other directly; the rendezvous that tells them where the others listen is a key-value
// store one of the servers hosts (rank 0's), reached over a tensorwire peer connection (kStore
// frames, with the server's credential and TLS), never a shared file system. Kept apart from
// the sessions and the sockets: a session parks while its part runs here, on threads of this
// engine's own, and the outcome comes back to its shard, as an import's does (transfer.h).
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "core/tensor_data.h"
#include "protocol/messages.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace gloo {
class Context;
namespace transport {
class Device;
}
}  // namespace gloo

namespace tw::server {

// The rendezvous keys a server hosts (a peer's kStore set/get). Bounded: each key and value
// within protocol::kMaxStringBytes, at most kMaxKeys keys and kMaxBytes in all; a key lives
// kTtl after it is set (the participants read a group's keys only while they connect).
// Thread-safe.
class StoreTable {
 public:
  Status set(const std::string& key, std::string value);
  std::optional<std::string> get(const std::string& key);
  static constexpr size_t kMaxKeys = 65536;
  static constexpr size_t kMaxBytes = size_t{64} << 20;
  static constexpr std::chrono::minutes kTtl{10};

 private:
  void sweep_locked(std::chrono::steady_clock::time_point now);
  struct Entry {
    std::string value;
    std::chrono::steady_clock::time_point set_at;
  };
  std::mutex mu_;
  std::unordered_map<std::string, Entry> keys_;
  size_t bytes_ = 0;
};

// Answers a peer's Store frame with a StoreResult (a malformed one too: the reply says why).
void serve_store(StoreTable& table, const Buffer& frame, protocol::OutFrame& reply);

// The shape a collective's output has, given its input's, or why the task is malformed (a
// rank out of range, a reduction Gloo cannot do on the dtype, a wrong output meta): checked by
// the session before it parks, so that a bad task never reaches Gloo.
Status check_collective(const protocol::CollectiveSpec& c, const TensorMeta& input);

// Runs collectives' parts on Gloo. A session's first collective in a group makes that group's
// Gloo context (the rendezvous, then a connection to each other participant); later ones
// reuse it, so a training step's all-reduce costs the transfer alone.
class Collectives {
 public:
  using Done = std::function<void(Result<TensorData>)>;
  // `credential` is what this server presents to the store's server (its own, as for pulls);
  // `host` is the address Gloo listens on for the other participants.
  Collectives(std::string credential, std::string host, std::string self_name);
  ~Collectives();
  Collectives(const Collectives&) = delete;
  Collectives& operator=(const Collectives&) = delete;
  // Session `session`'s part of collective `c` on `input`; `done` runs on an engine thread with
  // the output, or with an error naming the collective, this server and what failed.
  void start(uint64_t session, protocol::CollectiveSpec c, TensorData input, Done done);
  // The contexts of a session that has ended.
  void forget(uint64_t session);
  // Later start()s fail at once; the parts under way end at their timeouts.
  void stop();
  // stop(), then waits for the engine threads to end; forget() stays usable after it.
  void join();
  // Parts that may run at once (each blocks its thread inside Gloo).
  static constexpr int kMaxThreads = 64;

 private:
  struct Job {
    uint64_t session;
    protocol::CollectiveSpec spec;
    TensorData input;
    Done done;
  };
  Result<TensorData> run(Job& job);
  Result<std::shared_ptr<gloo::Context>> context(const Job& job);
  void loop();

  const std::string credential_, host_, self_name_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  int idle_ = 0;
  std::deque<Job> queue_;
  std::vector<std::thread> threads_;
  std::shared_ptr<gloo::transport::Device> device_;  // made at the first collective
  std::map<std::pair<uint64_t, std::string>, std::shared_ptr<gloo::Context>> contexts_;
};

}  // namespace tw::server
TW_INTERNAL_END
