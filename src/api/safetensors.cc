// The safetensors format (tensorwire/serialize.h): a writer, and a reader over the header parser
// of core/safetensors_format.h, which trusts nothing in the file.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <variant>

#include "core/safetensors_format.h"
#include "core/shape.h"
#include "tensorwire/serialize.h"

namespace tw {

std::vector<uint8_t> safetensors_bytes(const NamedTensors& tensors,
                                       const std::map<std::string, std::string>& metadata) {
  std::string header = "{";
  std::set<std::string> names;
  std::vector<std::vector<uint8_t>> data;
  uint64_t offset = 0;
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      header += (first ? "" : ",") + json_string(k) + ":" + json_string(v);
      first = false;
    }
    header += "}";
  }
  for (const auto& [name, t] : tensors) {
    if (name == "__metadata__")
      throw Error("save_safetensors: a tensor may not be named __metadata__");
    if (!names.insert(name).second)
      throw Error("save_safetensors: the name " + name + " appears twice");
    if (!t.defined()) throw Error("save_safetensors: tensor " + name + " is undefined");
    data.push_back(t.to_bytes());
    std::string shape;
    for (int64_t d : t.shape()) shape += (shape.empty() ? "" : ",") + std::to_string(d);
    const uint64_t end = offset + data.back().size();
    header += std::string(header.size() > 1 ? "," : "") + json_string(name) + ":{\"dtype\":\"" +
              safetensors_dtype_name(t.dtype()) + "\",\"shape\":[" + shape +
              "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(end) + "]}";
    offset = end;
  }
  header += "}";
  // Pad with spaces so that the data starts 8-byte aligned (as the reference writer does).
  while ((8 + header.size()) % 8 != 0) header += ' ';
  std::vector<uint8_t> out(8 + header.size() + offset);
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<uint8_t>(n >> (8 * i));
  std::memcpy(out.data() + 8, header.data(), header.size());
  size_t at = 8 + header.size();
  for (const auto& d : data) {
    if (!d.empty()) std::memcpy(out.data() + at, d.data(), d.size());
    at += d.size();
  }
  return out;
}

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  const std::vector<uint8_t> bytes = safetensors_bytes(tensors, metadata);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw Error("save_safetensors: cannot open " + path + " for writing");
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  f.close();
  if (!f) throw Error("save_safetensors: writing " + path + " failed");
}

Safetensors parse_safetensors(std::span<const uint8_t> bytes, const Device& device,
                              const std::string& what) {
  const SafetensorsIndex index = parse_safetensors_index(bytes, what);
  Safetensors out;
  out.metadata = index.metadata;
  const uint8_t* data = bytes.data() + index.data_offset;
  for (const SafetensorsEntry& e : index.entries) {
    out.tensors[e.name] =
        from_bytes(std::span<const uint8_t>(data + e.begin, static_cast<size_t>(e.end - e.begin)),
                   e.shape, e.dtype, device);
  }
  return out;
}

Safetensors read_safetensors(const std::string& path, const Device& device) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) throw Error("load_safetensors: cannot open " + path);
  const std::streamoff size = f.tellg();
  if (size < 0) throw Error("load_safetensors: cannot read " + path);
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  f.seekg(0);
  if (size > 0 && !f.read(reinterpret_cast<char*>(bytes.data()), size))
    throw Error("load_safetensors: cannot read " + path);
  return parse_safetensors(bytes, device, path);
}

std::map<std::string, Tensor> load_safetensors(const std::string& path, const Device& device) {
  return read_safetensors(path, device).tensors;
}

void save_safetensors(const std::string& path, const nn::Module& module,
                      const std::map<std::string, std::string>& metadata) {
  save_safetensors(path, module.state_dict(), metadata);
}

void load_safetensors(const std::string& path, nn::Module& module, bool strict) {
  module.load_state_dict(load_safetensors(path), strict);
}

}  // namespace tw
