// The safetensors file layout (tensorwire/serialize.h) over bytes alone, no tensor made: the
// writer, and the parser that checks the header JSON and its entries as the reference
// implementation does. safetensors.cc builds the tensor API on them; the fuzz target
// tests/fuzz/fuzz_safetensors.cc runs them without it.
#pragma once
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/shape.h"
#include "tensorwire/dtype.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw::safetensors {

// The format's dtype names.
inline constexpr std::pair<const char*, DType> kDTypes[] = {
    {"F32", kF32}, {"F64", kF64},   {"I32", kI32}, {"I64", kI64},   {"U8", kU8},
    {"I8", kI8},   {"BOOL", kBool}, {"F16", kF16}, {"BF16", kBF16},
};

// One tensor of the file; [begin, end) are offsets into the data section and hold exactly
// numel(shape) * dtype_size(dtype) bytes.
struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

struct Layout {
  std::map<std::string, std::string> metadata;
  std::vector<Entry> entries;  // in header order; sorted by offset they tile the data section
  uint64_t data_offset = 0;    // where the data section starts in the file (8 + header length)
};

// A tensor to write: its bytes are numel(shape) * dtype_size(dtype), row-major, little-endian.
struct Named {
  std::string name;
  DType dtype;
  Shape shape;
  std::span<const uint8_t> bytes;
};

// The file holding `tensors` (in that order) and `metadata`, as the reference writer lays it out
// (the data section 8-byte aligned); throws tw::Error for a duplicate or reserved name.
std::vector<uint8_t> write_file(const std::vector<Named>& tensors,
                                const std::map<std::string, std::string>& metadata);
// Its first part: the 8-byte header length and the header, the data section following it. Only
// the tensors' names, dtypes and shapes are read (not `bytes`), so a writer may stream the data.
std::vector<uint8_t> write_header(const std::vector<Named>& tensors,
                                  const std::map<std::string, std::string>& metadata);
// numel(shape) * dtype_size(dtype).
uint64_t byte_size(const Named& t);

// Parses and checks `bytes` as a whole safetensors file; throws tw::Error starting with `what`
// saying what is wrong.
Layout parse_layout(std::span<const uint8_t> bytes, const std::string& what);

}  // namespace tw::safetensors
TW_INTERNAL_END
