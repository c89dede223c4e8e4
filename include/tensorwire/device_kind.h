// What kind of device a tw::Device is (Device::Kind), and of executor behind it (Backend::kind):
// one plain enum that the API and the backend layer share.
#pragma once
#include <cstdint>

#include "tensorwire/export.h"

TW_API_BEGIN

namespace tw {

// kLocal: another backend of this process, named by its device spec (Device::local("vulkan", 0),
// str() "vulkan:0").
enum class DeviceKind : uint8_t { kCpu = 0, kRemote = 1, kCapture = 2, kTorch = 3, kLocal = 4 };

}  // namespace tw
TW_API_END
