// Human-readable form of an op, generated from its TW_FIELDS list:
//   matmul(a=%3, b=%4, out=%5)
#pragma once
#include <ostream>
#include <string>

#include "ir/ops.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw::ir {

std::string to_string(const Op& op);
std::ostream& operator<<(std::ostream& os, const Op& op);

}  // namespace tw::ir
TW_INTERNAL_END
