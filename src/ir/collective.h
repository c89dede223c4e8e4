// A collective across devices of several servers (tw::dist): which one, over which tensor, with
// whom. The API builds it, a remote backend ships it (protocol kCollective), and the server
// runs its part on Gloo (server/collective.h). Every participant gets the same group, size,
// store and timeout and its own rank. Enum values are wire values: append only.
#pragma once
#include <cstdint>
#include <string>

#include "core/tensor_data.h"
#include "ir/ops.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw::ir {

enum class CollectiveKind : uint8_t {
  kAllReduce = 1,
  kBroadcast = 2,
  kAllGather = 3,
  kReduceScatter = 4
};
// How all_reduce and reduce_scatter combine (not ir::ReduceKind, the Reduce op's).
enum class CollectiveReduce : uint8_t { kSum = 1, kMean = 2, kMax = 3 };
const char* collective_name(CollectiveKind k);  // all_reduce, broadcast, ...

struct CollectiveSpec {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  CollectiveReduce reduce = CollectiveReduce::kSum;
  uint32_t rank = 0, size = 0;
  uint32_t root = 0;  // kBroadcast: the rank whose tensor every participant gets
  std::string group;  // names the participants' set: the Gloo context is made once per group
  // The server that hosts the rendezvous (rank 0's, as the client reached it), and its TLS
  // fingerprint to pin when store_url is tls:// ("": CAs).
  std::string store_url;
  std::string fingerprint;
  uint32_t timeout_ms = 0;  // how long a participant waits for the others
  TensorId input = 0, output = 0;
  TensorMeta out_meta;  // what the output is (validated by the server against the input)
};

}  // namespace tw::ir
TW_INTERNAL_END
