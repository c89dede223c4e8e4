// The Backend interface: an executor of the op IR over its own tensor table. Implementations:
// cpu/ (now), torch/ and cuda/ later. A backend never trusts its caller: execute() validates
// every op with ir::infer before running it, and no input can make it abort.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/status.h"
#include "core/tensor_data.h"
#include "ir/ops.h"

namespace tw {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Whether this backend has a kernel for the op (every op of the IR for the CPU backend).
  virtual bool supports(ir::OpCode code) const = 0;

  // Validates and runs one op. On failure the op's outputs are recorded as poisoned with the
  // error (a later read of them, or of anything computed from them, returns that error) and the
  // error is returned. Output ids must not exist yet.
  virtual Status execute(const ir::Op& op) = 0;
  // Caps the tensor bytes this backend holds: execute() refuses an op whose outputs would take
  // it past `bytes`, poisoning them with refuse(op, bytes held, bytes needed), checked on the
  // inference execute() does anyway (the server's per-session quota).
  using RefuseFn = std::function<Status(const ir::Op& op, uint64_t have, uint64_t need)>;
  virtual void set_memory_limit(uint64_t bytes, RefuseFn refuse) = 0;
  // Records `op` as failed with `error` without running it (its outputs become poisoned), as
  // when the server refuses an op over a session's memory quota.
  virtual void fail(const ir::Op& op, const Status& error) = 0;
  // A contiguous host copy of a tensor, or the error it was poisoned with.
  virtual Result<TensorData> read(ir::TensorId id) = 0;
  virtual Result<TensorMeta> meta(ir::TensorId id) const = 0;
  // Forgets a tensor; its memory is freed once no view refers to it. Unknown ids: kNotFound.
  virtual Status drop(ir::TensorId id) = 0;
  // Bytes of tensor storage held by this backend's table (views counted once per buffer).
  virtual size_t bytes_held() const = 0;
  virtual size_t tensor_count() const = 0;
};

std::unique_ptr<Backend> make_cpu_backend();

}  // namespace tw
