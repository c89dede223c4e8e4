// parse_safetensors_index (src/core/safetensors_format.h): a safetensors file's header, as
// tw::load_safetensors reads it. An accepted file must describe entries that tile its data
// section exactly, each of numel * dtype size bytes, and must read back the same once written
// out again by the writer's layout (the header's spacing and order may differ; what it says may
// not).
#include <tuple>

#include "fuzz_util.h"
#include "tensorwire/error.h"

namespace {
auto fields(const tw::SafetensorsEntry& e) {
  return std::tie(e.name, e.dtype, e.shape, e.begin, e.end);
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tw;
  SafetensorsIndex index;
  try {
    index = parse_safetensors_index({data, size}, "fuzz");
  } catch (const Error& e) {
    fuzz::check(std::string(e.what()).size() > 6, "a refused file has no message");
    return 0;
  }
  fuzz::check(index.data_offset >= 8 && index.data_offset <= size, "data section outside the file");
  const uint64_t data_size = size - index.data_offset;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const SafetensorsEntry& e : index.entries) {
    fuzz::check(e.end - e.begin == static_cast<uint64_t>(numel(e.shape)) * dtype_size(e.dtype),
                "an entry's bytes are not numel * dtype size");
    ranges.push_back({e.begin, e.end});
  }
  std::sort(ranges.begin(), ranges.end());
  uint64_t at = 0;
  for (const auto& [b, e] : ranges) {
    fuzz::check(b == at, "entries leave a gap or overlap");
    at = e;
  }
  fuzz::check(at == data_size, "entries do not end at the end of the file");
  const std::vector<uint8_t> rest(data + index.data_offset, data + size);
  const std::vector<uint8_t> again = fuzz::safetensors_file(index, rest);
  SafetensorsIndex back;
  try {
    back = parse_safetensors_index(again, "fuzz (written again)");
  } catch (const Error&) {
    fuzz::fail("the file written again from what was read is refused");
  }
  fuzz::check(back.metadata == index.metadata, "metadata differ once written again");
  fuzz::check(back.entries.size() == index.entries.size(), "entries differ once written again");
  for (size_t i = 0; i < back.entries.size(); ++i)
    fuzz::check(fields(back.entries[i]) == fields(index.entries[i]),
                "an entry differs once written again");
  return 0;
}
