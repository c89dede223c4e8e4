// Long work (issue 52): ops and graph runs estimated to take longer than a fairness slice run on
// these threads instead of the shards', so that a shard's thread goes on answering handshakes,
// reads and other sessions' small ops while one session's long op runs. First come, first
// served; the session whose work waits here runs nothing else meanwhile (Session::parked()).
#pragma once
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw::server {

class LongWork {
 public:
  explicit LongWork(int threads);
  // Runs what is queued, then joins the threads.
  ~LongWork();
  LongWork(const LongWork&) = delete;
  LongWork& operator=(const LongWork&) = delete;
  void post(std::function<void()> work);
  // Work queued or running, for the dashboard and tests.
  size_t pending() const;

 private:
  void loop();
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  size_t running_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace tw::server
TW_INTERNAL_END
