// Binary codec for ops, generated from each op's TW_FIELDS list. Layout: u16 op code, then every
// field in declaration order (see docs/protocol.md for the encoding of each field type). Decoding
// is bounds-checked: malformed input yields kDataLoss/kInvalidArgument, never a crash, and no
// allocation larger than the input itself.
#pragma once
#include <vector>

#include "core/wire.h"
#include "ir/ops.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw::ir {

void encode_op(const Op& op, WireWriter& w);
std::vector<uint8_t> encode_op(const Op& op);
Result<Op> decode_op(WireReader& r);
// Decodes exactly one op spanning all of [data, data + size).
Result<Op> decode_op(const uint8_t* data, size_t size);

}  // namespace tw::ir
TW_INTERNAL_END
