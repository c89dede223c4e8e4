#include "backend/cpu/dnnl_util.h"

#include <vector>

#include "core/cancel.h"

#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP
#include <omp.h>
#endif

#include "core/buffer.h"
#include "core/thread_pool.h"
#include "core/tsan.h"

namespace tw::cpu {

dnnl::engine& dnnl_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& dnnl_stream() {
  // A CPU stream carries no per-call state (execution is synchronous), so one serves every
  // thread.
  static dnnl::stream stream(dnnl_engine());
  return stream;
}

int dnnl_sync_threads() {
  const int n = get_num_threads();
#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP
  if (omp_get_max_threads() != n) omp_set_num_threads(n);
#endif
  return n;
}

DnnlThreadsFor::DnnlThreadsFor(int64_t macs) {
  if (macs >= kDnnlSerialMacs) {
    threads_ = dnnl_sync_threads();
    return;
  }
#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP
  saved_ = omp_get_max_threads();
  if (saved_ != 1) omp_set_num_threads(1);
#endif
}

DnnlThreadsFor::~DnnlThreadsFor() {
#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP
  if (saved_ > 1) omp_set_num_threads(saved_);
#endif
}

dnnl::primitive_attr dnnl_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

Status dnnl_status(const char* op, const std::exception& e) {
  return internal_error(std::string(op) + ": oneDNN failed: " + e.what());
}

Status dnnl_run(const char* op, const dnnl::primitive& prim, const dnnl::memory::desc& scratchpad,
                std::unordered_map<int, dnnl::memory> args) {
  try {
    Buffer scratch;
    if (size_t bytes = scratchpad.get_size()) {
      scratch = Buffer::allocate(bytes);
      args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(scratchpad, dnnl_engine(), scratch.data()));
    }
    prim.execute(dnnl_stream(), args);
    dnnl_stream().wait();
  } catch (const std::exception& e) {
    return dnnl_status(op, e);
  }
  return Status::OK();
}

DnnlReorder dnnl_reorder(const dnnl::memory::desc& from, const dnnl::memory::desc& to) {
  dnnl::reorder::primitive_desc pd(dnnl_engine(), from, dnnl_engine(), to, dnnl_attr());
  return {dnnl::reorder(pd), pd.scratchpad_desc()};
}

Status dnnl_run_reorder(const char* op, const DnnlReorder& r, const dnnl::memory& from,
                        const dnnl::memory& to) {
  return dnnl_run(op, r.prim, r.scratchpad, {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
}

DnnlSingleThread::DnnlSingleThread() {
#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP
  saved_ = omp_get_max_threads();
  omp_set_num_threads(1);
#endif
}

DnnlSingleThread::~DnnlSingleThread() {
#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP
  omp_set_num_threads(saved_);
#endif
}

// A cancelled caller's remaining tasks are skipped (core/cancel.h), and each task runs with the
// caller's flag, so that a long one (attention's block of queries) can look at it too.
void dnnl_parallel_for(int64_t n, const std::function<void(int64_t)>& task) {
  const std::atomic<bool>* flag = cancel_flag();
  auto run = [&](int64_t i) {
    if (cancelled(flag)) return;
    const CancelScope scope(flag);
    task(i);
  };
#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP
  const int threads = omp_get_max_threads();
  if (threads > 1 && n > 1) {
    TsanParallelRegion region;  // (what TSan cannot see of libgomp: core/tsan.h)
#pragma omp parallel num_threads(threads)
    {
      region.thread_begins();
#pragma omp for schedule(static)
      for (int64_t i = 0; i < n; ++i) run(i);
      region.thread_ends();
    }
    return;
  }
#endif
  for (int64_t i = 0; i < n; ++i) run(i);
}

Status dnnl_parallel_chunks(const char* op, int64_t n,
                            const std::function<Status(int64_t)>& chunk) {
  std::vector<Status> status(static_cast<size_t>(n));
  dnnl_parallel_for(n, [&](int64_t i) {
    try {
      status[static_cast<size_t>(i)] = chunk(i);
    } catch (const std::exception& e) {
      status[static_cast<size_t>(i)] = dnnl_status(op, e);
    }
  });
  for (const Status& st : status) TW_RETURN_NOT_OK(st);
  return Status::OK();
}

bool bf16_native() {
  static const bool yes = __builtin_cpu_supports("avx512bf16") &&
                          __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  return yes;
}

bool int8_native() {
  static const bool yes = __builtin_cpu_supports("avx512vnni") || __builtin_cpu_supports("avxvnni");
  return yes;
}

}  // namespace tw::cpu
