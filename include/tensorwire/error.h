// The exception type the user-facing API throws. Library layers below the API return Status.
#pragma once
#include <stdexcept>
#include <string>

#include "tensorwire/export.h"

TW_API_BEGIN

namespace tw {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace tw
TW_API_END
