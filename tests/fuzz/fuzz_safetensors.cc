// safetensors::parse_layout (src/api/safetensors_layout.h) over exactly the input: a safetensors
// file as load_safetensors reads it, header JSON, dtypes, shapes and offsets included. An accepted
// file must describe entries that tile its data section exactly, and writing them again with the
// real writer (write_file) must give a file that parses to the same layout.
#include <span>

#include "api/safetensors_layout.h"
#include "fuzz_util.h"
#include "tensorwire/error.h"

namespace {

using tw::safetensors::Entry;
using tw::safetensors::Layout;

bool same_entries(const std::vector<Entry>& a, const std::vector<Entry>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].name != b[i].name || a[i].dtype != b[i].dtype || a[i].shape != b[i].shape ||
        a[i].end - a[i].begin != b[i].end - b[i].begin)
      return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  Layout layout;
  try {
    layout = tw::safetensors::parse_layout(bytes, "fuzz");
  } catch (const tw::Error& e) {
    // Refusals are the expected outcome; any other exception escapes and is a finding.
    tw::fuzz::check(std::string_view(e.what()).starts_with("fuzz: "),
                    "a refusal does not name the file");
    return 0;
  }
  tw::fuzz::check(layout.data_offset >= 8 && layout.data_offset <= size,
                  "the data section starts outside the file");
  const uint64_t data_size = size - layout.data_offset;
  uint64_t total = 0;
  std::vector<tw::safetensors::Named> named;
  for (const Entry& e : layout.entries) {
    tw::fuzz::check(e.name != "__metadata__", "a tensor named __metadata__ was accepted");
    tw::fuzz::check(e.begin <= e.end && e.end <= data_size, "an entry lies outside the data");
    tw::fuzz::check(tw::validate_shape(e.shape).ok(), "an entry has an invalid shape");
    tw::fuzz::check(
        e.end - e.begin == static_cast<uint64_t>(tw::numel(e.shape)) * tw::dtype_size(e.dtype),
        "an entry's size disagrees with its dtype and shape");
    total += e.end - e.begin;
    named.push_back({e.name, e.dtype, e.shape,
                     bytes.subspan(static_cast<size_t>(layout.data_offset + e.begin),
                                   static_cast<size_t>(e.end - e.begin))});
  }
  tw::fuzz::check(total == data_size, "the entries do not tile the data section");

  std::vector<uint8_t> again;
  try {
    again = tw::safetensors::write_file(named, layout.metadata);
  } catch (const tw::Error&) {
    tw::fuzz::fail("the writer refuses what the parser accepted");
  }
  const Layout reparsed = tw::safetensors::parse_layout(again, "rewritten");
  tw::fuzz::check(reparsed.metadata == layout.metadata, "the metadata does not survive a rewrite");
  tw::fuzz::check(same_entries(reparsed.entries, layout.entries),
                  "the entries do not survive a rewrite");
  for (size_t i = 0; i < named.size(); ++i) {
    const Entry& e = reparsed.entries[i];
    const auto* at = again.data() + reparsed.data_offset + e.begin;
    tw::fuzz::check(std::equal(named[i].bytes.begin(), named[i].bytes.end(), at),
                    "a tensor's bytes do not survive a rewrite");
  }
  return 0;
}
