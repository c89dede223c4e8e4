// FromHost's storage, shared by every backend: the op's bytes, checked against the inferred meta
// and adopted as the tensor's storage without a copy when they are aligned for the element type
// (they already sit in a pooled buffer, received or copied once by the client); a copy otherwise.
#pragma once
#include <cstdint>
#include <string>

#include "core/buffer.h"
#include "core/shape.h"
#include "core/tensor_data.h"
#include "ir/ops.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw {

inline Result<Buffer> from_host_storage(const ir::FromHost& op, const TensorMeta& meta) {
  const size_t elem = dtype_size(op.dtype);
  const size_t nbytes = static_cast<size_t>(numel(meta.shape)) * elem;
  const Buffer& data = op.data.data;
  if (data.size() != nbytes) {
    return invalid_argument("from_host: " + std::to_string(data.size()) + " bytes given for " +
                            meta_str(meta) + ", which needs " + std::to_string(nbytes));
  }
  if (nbytes == 0 || reinterpret_cast<uintptr_t>(data.data()) % elem == 0) return data;
  return Buffer::copy_of(data.data(), nbytes);
}

// The op that recreates a tensor read from somewhere under `id` elsewhere: what copy_to does by
// default (Backend and Sink). The bytes are shared, not copied (from_host_storage adopts them).
inline ir::Op from_host_of(TensorData data, ir::TensorId id) {
  return ir::FromHost{ir::Out{id}, data.meta.shape, data.meta.dtype,
                      ir::Bytes{std::move(data.bytes)}};
}

}  // namespace tw
TW_INTERNAL_END
