// Layout changes between oneDNN's channel-blocked layouts and plain NCHW, written for the
// machines tensorwire runs on: a 16x16 in-register transpose with AVX-512 where the CPU has it
// (checked at run time; the build targets x86-64-v3), plain loops over 16x16 tiles elsewhere.
// Pure data movement: results never depend on which path ran. Also the rule for when kernels
// write their output with streaming stores (conv.cc, binary.cc).
#pragma once
#include <cstdint>

#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw::cpu {

// One image's channel block: src holds `hw` pixels of 16 channels each ([hw][16], oneDNN's
// nChw16c for one block); dst receives the 16 channel planes, plane c at dst + c * dst_plane
// (dst_plane >= hw). With `streaming`, full 64-byte rows go out with non-temporal stores (they
// bypass the caches: for outputs far larger than the caches, which the next op will not find
// there anyway, this spares the read-for-ownership of every destination line).
void untile16(const float* src, float* dst, int64_t hw, int64_t dst_plane, bool streaming);

// The portable loops alone, whatever the CPU (for tests).
void untile16_portable(const float* src, float* dst, int64_t hw, int64_t dst_plane);

// Whether the CPU runs AVX-512 (F, DQ, BW, VL: what GCC's x86-64-v4 needs), checked once.
bool cpu_has_avx512();

// Outputs at least this large are written with streaming stores.
constexpr int64_t kStreamingStoreBytes = int64_t{4} << 20;
inline bool streams_output(int64_t bytes) { return bytes >= kStreamingStoreBytes; }

}  // namespace tw::cpu
TW_INTERNAL_END
