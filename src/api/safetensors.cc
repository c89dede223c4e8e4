// The safetensors format (tensorwire/serialize.h): a writer, and a reader that trusts nothing in
// the file: the header and its entries are parsed and checked by safetensors::parse_layout
// (safetensors_layout.{h,cc}: a strict JSON parser, then the reference implementation's checks)
// before any tensor is made.
#include <fstream>

#include "api/safetensors_layout.h"
#include "tensorwire/serialize.h"

namespace tw {

std::vector<uint8_t> safetensors_bytes(const NamedTensors& tensors,
                                       const std::map<std::string, std::string>& metadata) {
  std::vector<std::vector<uint8_t>> data;
  std::vector<safetensors::Named> named;
  data.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    if (!t.defined()) throw Error("save_safetensors: tensor " + name + " is undefined");
    data.push_back(t.to_bytes());
    named.push_back({name, t.dtype(), t.shape(), data.back()});
  }
  return safetensors::write_file(named, metadata);
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
  const safetensors::Layout layout = safetensors::parse_layout(bytes, what);
  Safetensors out;
  out.metadata = layout.metadata;
  const uint8_t* data = bytes.data() + layout.data_offset;
  for (const safetensors::Entry& e : layout.entries) {
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
