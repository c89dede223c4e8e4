// The library's version: CMake's project version (the one place it is declared), which the
// programs' --version, the installed packages and the SONAME carry too.
#pragma once
#include "tensorwire/export.h"

TW_API_BEGIN
namespace tw {
// "MAJOR.MINOR.PATCH" of the libtensorwire.so this process loaded.
const char* version();
// The newest wire protocol version it speaks (docs/protocol.md).
int protocol_version();
}  // namespace tw
TW_API_END
