#include "protocol/compress.h"

#include <zstd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "core/env.h"
#include "protocol/messages.h"

namespace tw::protocol {

static_assert(kCompressedClientType == static_cast<uint8_t>(ClientMsg::kCompressed));
static_assert(kCompressedServerType == static_cast<uint8_t>(ServerMsg::kCompressed));

namespace {

// zstd's fastest level that still finds runs and small alphabets: ~0.5-2 GB/s on one core.
constexpr int kLevel = 1;
// Frames at least this large are compressed on several threads.
constexpr uint64_t kParallelBytes = uint64_t{8} << 20;

// The payload's bytes as runs (head pieces and segments, in order), without copying.
template <class F>
void for_each_run(const OutFrame& f, F&& fn) {
  size_t pos = 0;
  for (const auto& seg : f.segments) {
    if (seg.offset > pos) fn(f.head.data() + pos, seg.offset - pos);
    if (seg.data.size()) fn(reinterpret_cast<const uint8_t*>(seg.data.data()), seg.data.size());
    pos = seg.offset;
  }
  if (f.head.size() > pos) fn(f.head.data() + pos, f.head.size() - pos);
}

// A sample of the payload: kSampleBytes / 4 from each of four places of its largest run.
bool sample_pays(const OutFrame& f) {
  const uint8_t* big = nullptr;
  size_t big_n = 0;
  for_each_run(f, [&](const uint8_t* p, size_t n) {
    if (n > big_n) big = p, big_n = n;
  });
  std::vector<uint8_t> sample;
  sample.reserve(kSampleBytes);
  const size_t piece = std::min(kSampleBytes / 4, big_n);
  for (int i = 0; i < 4 && piece > 0; ++i) {
    const size_t at = (big_n - piece) * static_cast<size_t>(i) / 3;
    sample.insert(sample.end(), big + at, big + at + piece);
  }
  if (sample.empty()) return false;
  std::vector<uint8_t> out(ZSTD_compressBound(sample.size()));
  size_t n = ZSTD_compress(out.data(), out.size(), sample.data(), sample.size(), kLevel);
  if (ZSTD_isError(n)) return false;
  return static_cast<double>(n) <= kWorthRatio * static_cast<double>(sample.size());
}

}  // namespace

CompressMode compress_mode_from_env() {
  const std::optional<std::string> e = env_text(Env::kCOMPRESS);
  if (!e || *e == "auto") return CompressMode::kAuto;
  return *e == "0" ? CompressMode::kOff : CompressMode::kMeasure;
}

bool compress_link(CompressMode mode, const std::string& host) {
  if (mode == CompressMode::kOff) return false;
  if (mode == CompressMode::kMeasure) return true;
  if (host.empty() || host == "localhost" || host == "::1" || host == "[::1]") return false;
  return host.rfind("127.", 0) != 0;
}

OutFrame maybe_compress(OutFrame f, uint8_t type) {
  const uint64_t raw = f.payload_size();
  if (raw < kCompressMinBytes || !sample_pays(f)) return f;
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  if (cctx == nullptr) return f;
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, kLevel);
  ZSTD_CCtx_setPledgedSrcSize(cctx, raw);
  // A large frame is compressed by zstd's worker threads, in parallel (ignored by a libzstd
  // built without them).
  if (raw >= kParallelBytes) {
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_nbWorkers, static_cast<int>(std::min(cores, 4u)));
  }
  // The compressed bytes go in a Buffer of their own (not zero-filled, unlike a vector's),
  // spliced in as the frame's one segment.
  Buffer body = Buffer::allocate(ZSTD_compressBound(raw));
  ZSTD_outBuffer ob{body.data(), body.size(), 0};
  bool ok = true;
  for_each_run(f, [&](const uint8_t* p, size_t n) {
    ZSTD_inBuffer ib{p, n, 0};
    while (ok && ib.pos < ib.size)
      ok = !ZSTD_isError(ZSTD_compressStream2(cctx, &ob, &ib, ZSTD_e_continue));
  });
  for (;;) {
    if (!ok) break;
    ZSTD_inBuffer none{nullptr, 0, 0};
    size_t left = ZSTD_compressStream2(cctx, &ob, &none, ZSTD_e_end);
    if (ZSTD_isError(left)) ok = false;
    if (left == 0) break;
  }
  ZSTD_freeCCtx(cctx);
  // Kept raw when the whole did worse than the sample promised.
  if (!ok || 9 + ob.pos >= raw) return f;
  OutFrame out;
  out.head.resize(9);
  out.head[0] = type;
  for (int i = 0; i < 8; ++i) out.head[1 + i] = static_cast<uint8_t>(raw >> (8 * i));
  out.segments.push_back({9, body.slice(0, ob.pos)});
  return out;
}

Result<Buffer> decompress(const Buffer& payload, uint64_t limit, PayloadAligner aligner) {
  if (payload.size() < 9)
    return data_loss("compressed frame of " + std::to_string(payload.size()) +
                     " bytes: too short for its header");
  const uint8_t* p = payload.as<const uint8_t>();
  uint64_t raw = 0;
  for (int i = 0; i < 8; ++i) raw |= uint64_t{p[1 + i]} << (8 * i);
  if (raw == 0) {  // as an empty frame (§1): malformed, not over a limit
    return data_loss(
        "compressed frame announces 0 bytes: the message it holds has at least its "
        "type byte");
  }
  if (raw > limit) {
    return resource_exhausted("compressed frame announces " + std::to_string(raw) +
                              " bytes, over the limit of " + std::to_string(limit) +
                              " bytes per frame");
  }
  const size_t n = static_cast<size_t>(raw);
  // The decompressed payload's first bytes tell where its tensor bytes start (a ReadResult):
  // decompress them first, then allocate with the shift that lands those bytes aligned.
  ZSTD_DCtx* dctx = ZSTD_createDCtx();
  if (dctx == nullptr) return resource_exhausted("cannot allocate a zstd context");
  ZSTD_inBuffer ib{p + 9, payload.size() - 9, 0};
  // Decompresses into `ob` until it is full, the input is spent or no progress is made.
  size_t r = 0;
  auto pump = [&](ZSTD_outBuffer& ob) {
    while (ob.pos < ob.size) {
      const size_t in0 = ib.pos, out0 = ob.pos;
      r = ZSTD_decompressStream(dctx, &ob, &ib);
      if (ZSTD_isError(r) || (ib.pos == in0 && ob.pos == out0)) return;
    }
  };
  uint8_t first[256];
  const size_t want_first = std::min(n, sizeof first);
  ZSTD_outBuffer fb{first, want_first, 0};
  pump(fb);
  if (ZSTD_isError(r) || fb.pos < want_first) {
    ZSTD_freeDCtx(dctx);
    return data_loss("compressed frame does not decompress" +
                     (ZSTD_isError(r) ? std::string(": ") + ZSTD_getErrorName(r) : std::string()));
  }
  size_t shift = 0;
  if (aligner != nullptr) {
    size_t at = aligner(first, want_first);
    if (at == ~size_t{0}) at = 0;
    shift = (64 - at % 64) % 64;
  }
  Buffer out = shift == 0 ? Buffer::allocate(n) : Buffer::allocate(shift + n).slice(shift, n);
  std::memcpy(out.data(), first, want_first);
  ZSTD_outBuffer ob{out.data(), n, want_first};
  if (!ZSTD_isError(r)) pump(ob);
  // Nothing may follow the original payload: neither more output nor unread input.
  uint8_t extra = 0;
  ZSTD_outBuffer xb{&extra, 1, 0};
  // (r is 0 once the frame has ended; until then its epilogue may still be unread.)
  if (!ZSTD_isError(r) && r != 0 && ob.pos == n) r = ZSTD_decompressStream(dctx, &xb, &ib);
  ZSTD_freeDCtx(dctx);
  if (ZSTD_isError(r) || ob.pos != n || xb.pos != 0 || r != 0 || ib.pos != ib.size) {
    return data_loss("compressed frame does not decompress to the " + std::to_string(n) +
                     " bytes it announces" +
                     (ZSTD_isError(r) ? std::string(": ") + ZSTD_getErrorName(r) : std::string()));
  }
  // One level only: a Compressed message inside one is malformed (docs/protocol.md §1.1).
  if (out.as<const uint8_t>()[0] == p[0]) {
    return data_loss("compressed frame holds another compressed frame (message type " +
                     std::to_string(p[0]) + "); compress a message once");
  }
  return out;
}

}  // namespace tw::protocol
