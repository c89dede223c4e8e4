// tw::from_blob: a tensor over memory the caller owns (what the Python module's from_numpy uses).
#include <limits>
#include <string>

#include "api/emit.h"
#include "core/shape.h"
#include "tensorwire/tensor.h"

namespace tw {

Tensor from_blob(void* data, const Shape& shape, DType dtype,
                 std::shared_ptr<const void> keep_alive, const Device& device) {
  // The byte count is computed here, before inference sees the shape, so bound it first.
  uint64_t count = 1;
  for (int64_t d : shape) {
    if (d < 0 || (d != 0 && count > (uint64_t{1} << 48) / static_cast<uint64_t>(d))) {
      throw Error("from_blob: invalid shape " + shape_str(shape));
    }
    count *= static_cast<uint64_t>(d);
  }
  const size_t nbytes = static_cast<size_t>(count) * dtype_size(dtype);
  if (nbytes != 0 && data == nullptr) throw Error("from_blob: null data for " + shape_str(shape));
  // Only the CPU device adopts the memory (upload.h's from_host_storage): any other sink may hold
  // the bytes for a while (a remote queue) or convert them, so it gets a copy taken now.
  Buffer bytes = device.kind() == Device::Kind::kCpu
                     ? Buffer::wrap(data, nbytes, std::move(keep_alive))
                     : device.sink()->host_copy(data, nbytes);
  return detail::emit(device.sink(), ir::FromHost{{}, shape, dtype, ir::Bytes{std::move(bytes)}},
                      {});
}

}  // namespace tw
