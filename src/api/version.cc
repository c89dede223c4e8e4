#include "tensorwire/version.h"

#include "protocol/messages.h"

namespace tw {

// TW_VERSION comes from CMake's project(VERSION) (the root CMakeLists.txt).
const char* version() { return TW_VERSION; }

int protocol_version() { return protocol::kProtocolVersion; }

}  // namespace tw
