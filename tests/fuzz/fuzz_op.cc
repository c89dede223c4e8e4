// decode_op (src/ir/codec.h) over exactly the input, then what the server does with a decoded
// op before inference: print it (error messages), hash it, list its tensors, compare it with
// itself (regress/op/nan_double_attribute: NaN attributes once made an op unequal to itself).
#include "fuzz_util.h"
#include "ir/codec.h"
#include "ir/printer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tw::Result<tw::ir::Op> op = tw::ir::decode_op(data, size);
  if (!op.ok()) return 0;
  (void)tw::ir::to_string(*op);
  (void)tw::ir::op_name(*op);
  (void)tw::ir::op_hash(*op);
  (void)tw::ir::op_inputs(*op);
  (void)tw::ir::op_outputs(*op);
  tw::fuzz::check(*op == *op, "op is not equal to itself");
  const std::vector<uint8_t> again = tw::ir::encode_op(*op);
  tw::fuzz::check(again.size() == size && std::equal(again.begin(), again.end(), data),
                  "op re-encodes differently");
  return 0;
}
