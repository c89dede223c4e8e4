// Saving and loading tensors in the safetensors format (https://huggingface.co/docs/safetensors),
// readable by PyTorch, JAX and the other frameworks:
//   8 bytes   N, the header's length (unsigned little-endian)
//   N bytes   a JSON object: {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
//             ..., "__metadata__": {"key": "value"}} (optional metadata, strings only), padded
//             with spaces
//   the rest  the tensors' raw little-endian bytes, row-major; data_offsets are relative to here
// dtypes: F32, F64, I32, I64, U8, BOOL, F16, BF16. A malformed file (truncated, bad JSON,
// offsets out of range, overlapping or leaving gaps, a size that disagrees with dtype and shape,
// an absurd header length) is refused with a tw::Error saying what is wrong.
#pragma once
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tensorwire/export.h"
#include "tensorwire/nn.h"
#include "tensorwire/tensor.h"

TW_API_BEGIN

namespace tw {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

struct Safetensors {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;
};

// The file's bytes: tensors in the order given (their values are read from their devices).
std::vector<uint8_t> safetensors_bytes(const NamedTensors& tensors,
                                       const std::map<std::string, std::string>& metadata = {});
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Parses a file's bytes into tensors on `device`. `what` names the source in error messages.
Safetensors parse_safetensors(std::span<const uint8_t> bytes, const Device& device = Device::cpu(),
                              const std::string& what = "safetensors data");
Safetensors read_safetensors(const std::string& path, const Device& device = Device::cpu());
// Only the tensors.
std::map<std::string, Tensor> load_safetensors(const std::string& path,
                                               const Device& device = Device::cpu());

// A module's parameters under their dotted names (named_parameters), and loading them back into
// a module of the same structure (onto its parameters' devices; strict: names must match).
void save_safetensors(const std::string& path, const nn::Module& module,
                      const std::map<std::string, std::string>& metadata = {});
void load_safetensors(const std::string& path, nn::Module& module, bool strict = true);

}  // namespace tw
TW_API_END
