// The safetensors file format (https://github.com/huggingface/safetensors): an 8-byte little-
// endian header length, a JSON header naming each tensor's dtype, shape and byte range, then the
// data. Parsing the header is a pure function over the file's bytes, so that it is fuzzed alone
// (tests/fuzz/fuzz_safetensors.cc); tensorwire/serialize.h builds tensors from what it finds.
#pragma once
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/shape.h"

namespace tw {

struct SafetensorsEntry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;  // the byte range within the data section
};

struct SafetensorsIndex {
  std::vector<SafetensorsEntry> entries;  // in header order
  std::map<std::string, std::string> metadata;
  uint64_t data_offset = 0;  // where the data section starts in the file
};

// The header of the file in `bytes`, checked: a well-formed JSON object of at most 100 MB whose
// entries have supported dtypes, valid shapes, byte ranges of exactly numel * dtype size bytes,
// and which together tile the data section with no gap, overlap or leftover. Throws tw::Error
// naming `what` and the problem otherwise.
SafetensorsIndex parse_safetensors_index(std::span<const uint8_t> bytes, const std::string& what);

// The format's name of a dtype ("F32", "BOOL", ...; "?" for one it has none for).
const char* safetensors_dtype_name(DType d);
// `s` as a JSON string literal, quotes included.
std::string json_string(const std::string& s);

}  // namespace tw
