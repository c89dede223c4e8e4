// The meta of the tensor a Backend::copy_to on this thread is copying, when its caller knows it
// (Tensor::to does: the program's tensor holds it). A remote backend reads it to issue a move
// between servers without asking the source first (RemoteBackend::copy_to, protocol 17); without
// it, the move waits for the source's export, which answers with the meta.
// (Carried beside the call rather than in Backend::copy_to's signature, which every backend and
// decorator would repeat for the one backend that uses it.)
#pragma once
#include "core/tensor_data.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw {

class CopyMetaScope {
 public:
  explicit CopyMetaScope(const TensorMeta& meta) : outer_(current_) { current_ = &meta; }
  ~CopyMetaScope() { current_ = outer_; }
  CopyMetaScope(const CopyMetaScope&) = delete;
  CopyMetaScope& operator=(const CopyMetaScope&) = delete;
  // The meta of the copy under way on this thread (nullptr: not known).
  static const TensorMeta* current() { return current_; }

 private:
  const TensorMeta* outer_;
  static inline thread_local const TensorMeta* current_ = nullptr;
};

}  // namespace tw
TW_INTERNAL_END
