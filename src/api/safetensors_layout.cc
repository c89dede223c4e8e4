// The safetensors layout (safetensors_layout.h). The header is parsed by a small strict JSON
// parser (RFC 8259: no comments, no trailing commas, no leading zeros, escapes checked, nesting
// depth bounded), then validated as the reference implementation does: every entry's byte size
// equals numel * dtype size, and the entries, sorted by offset, tile the data section exactly
// (no gaps, no overlaps, nothing left).
#include "api/safetensors_layout.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>
#include <string_view>
#include <variant>

#include "tensorwire/error.h"

namespace tw::safetensors {
namespace {

// The reference implementation refuses headers above 100 MB; so do we, before allocating.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr int kMaxJsonDepth = 64;

// ---------------------------------------------------------------- JSON

struct Json;
using JsonObject = std::vector<std::pair<std::string, Json>>;  // in file order
using JsonArray = std::vector<Json>;
struct Json {
  // null, bool, number (kept as its text, converted on use), string, array, object
  std::variant<std::monostate, bool, std::string, std::string, JsonArray, JsonObject> v;
  static constexpr size_t kNumber = 2, kString = 3, kArray = 4, kObject = 5;
};

class JsonParser {
 public:
  JsonParser(std::string_view text, std::string what) : s_(text), what_(std::move(what)) {}

  Json parse_document() {
    skip_ws();
    Json j = value(0);
    skip_ws();
    if (i_ != s_.size()) fail("unexpected '" + std::string(1, s_[i_]) + "' after the JSON value");
    return j;
  }

 private:
  [[noreturn]] void fail(const std::string& msg) const {
    throw Error(what_ + ": header is not valid JSON: " + msg + " at byte " + std::to_string(i_) +
                " of the header");
  }
  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r'))
      ++i_;
  }
  bool eat(char c) {
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!eat(c)) fail(std::string("expected '") + c + "'");
  }
  void literal(std::string_view word) {
    if (s_.substr(i_, word.size()) != word) fail("unknown literal");
    i_ += word.size();
  }

  Json value(int depth) {
    if (depth > kMaxJsonDepth) fail("nesting deeper than " + std::to_string(kMaxJsonDepth));
    if (i_ >= s_.size()) fail("unexpected end");
    Json j;
    switch (s_[i_]) {
      case '{': j.v.emplace<Json::kObject>(object(depth)); break;
      case '[': j.v.emplace<Json::kArray>(array(depth)); break;
      case '"': j.v.emplace<Json::kString>(string()); break;
      case 't':
        literal("true");
        j.v = true;
        break;
      case 'f':
        literal("false");
        j.v = false;
        break;
      case 'n': literal("null"); break;
      default: j.v.emplace<Json::kNumber>(number()); break;
    }
    return j;
  }

  JsonObject object(int depth) {
    expect('{');
    JsonObject o;
    skip_ws();
    if (eat('}')) return o;
    for (;;) {
      skip_ws();
      if (i_ >= s_.size() || s_[i_] != '"') fail("expected a string key");
      std::string key = string();
      skip_ws();
      expect(':');
      skip_ws();
      o.emplace_back(std::move(key), value(depth + 1));
      skip_ws();
      if (eat('}')) return o;
      expect(',');
    }
  }

  JsonArray array(int depth) {
    expect('[');
    JsonArray a;
    skip_ws();
    if (eat(']')) return a;
    for (;;) {
      skip_ws();
      a.push_back(value(depth + 1));
      skip_ws();
      if (eat(']')) return a;
      expect(',');
    }
  }

  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  uint32_t hex4() {
    if (i_ + 4 > s_.size()) fail("truncated \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s_[i_++];
      v <<= 4;
      if (c >= '0' && c <= '9') {
        v |= static_cast<uint32_t>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        v |= static_cast<uint32_t>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        v |= static_cast<uint32_t>(c - 'A' + 10);
      } else {
        fail("bad hex digit in \\u escape");
      }
    }
    return v;
  }

  std::string string() {
    expect('"');
    std::string out;
    for (;;) {
      if (i_ >= s_.size()) fail("unterminated string");
      const auto c = static_cast<unsigned char>(s_[i_++]);
      if (c == '"') return out;
      if (c < 0x20) fail("control character in a string");
      if (c != '\\') {
        out += static_cast<char>(c);
        continue;
      }
      if (i_ >= s_.size()) fail("unterminated escape");
      switch (s_[i_++]) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {  // a surrogate pair
            if (!(eat('\\') && eat('u'))) fail("unpaired surrogate in \\u escape");
            const uint32_t lo = hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) fail("unpaired surrogate in \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            fail("unpaired surrogate in \\u escape");
          }
          append_utf8(out, cp);
          break;
        }
        default: fail("unknown escape");
      }
    }
  }

  std::string number() {
    const size_t start = i_;
    eat('-');
    if (eat('0')) {
      // no leading zeros
    } else if (i_ < s_.size() && s_[i_] >= '1' && s_[i_] <= '9') {
      while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_;
    } else {
      fail("unexpected character");
    }
    if (eat('.')) {
      if (i_ >= s_.size() || !std::isdigit(static_cast<unsigned char>(s_[i_])))
        fail("digit expected after '.'");
      while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_;
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (!eat('+')) eat('-');
      if (i_ >= s_.size() || !std::isdigit(static_cast<unsigned char>(s_[i_])))
        fail("digit expected in exponent");
      while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_;
    }
    return std::string(s_.substr(start, i_ - start));
  }

  std::string_view s_;
  std::string what_;
  size_t i_ = 0;
};

// A non-negative JSON integer below 2^63 (shape entries, offsets).
uint64_t as_count(const Json& j, const std::string& what, const std::string& where) {
  const auto* text = std::get_if<Json::kNumber>(&j.v);
  if (!text || text->empty() || (*text)[0] == '-' ||
      text->find_first_of(".eE") != std::string::npos) {
    throw Error(where + ": " + what + " must be a non-negative integer");
  }
  if (text->size() > 19) throw Error(where + ": " + what + " " + *text + " is too large");
  const uint64_t v = std::stoull(*text);
  if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    throw Error(where + ": " + what + " " + *text + " is too large");
  }
  return v;
}

const Json* field(const JsonObject& o, const std::string& key) {
  for (const auto& [k, v] : o)
    if (k == key) return &v;
  return nullptr;
}

const char* format_name(DType d) {
  for (const auto& [name, t] : kDTypes)
    if (t == d) return name;
  return "?";
}

std::string json_escape(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

}  // namespace

Layout parse_layout(std::span<const uint8_t> bytes, const std::string& what) {
  if (bytes.size() < 8) {
    throw Error(what + ": " + std::to_string(bytes.size()) +
                " bytes is too short for a safetensors file (8-byte header length first)");
  }
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t{bytes[static_cast<size_t>(i)]} << (8 * i);
  if (n > kMaxHeaderBytes) {
    throw Error(what + ": header length " + std::to_string(n) + " is absurd (limit " +
                std::to_string(kMaxHeaderBytes) + " bytes)");
  }
  if (n > bytes.size() - 8) {
    throw Error(what + ": header length " + std::to_string(n) + " runs past the end of the " +
                std::to_string(bytes.size()) + "-byte file (truncated?)");
  }
  if (n < 2)
    throw Error(what + ": header of " + std::to_string(n) + " bytes cannot hold a JSON object");
  const std::string_view text(reinterpret_cast<const char*>(bytes.data() + 8),
                              static_cast<size_t>(n));
  if (text[0] != '{') throw Error(what + ": header must start with '{'");
  const Json doc = JsonParser(text, what).parse_document();
  const auto* top = std::get_if<Json::kObject>(&doc.v);
  if (!top) throw Error(what + ": header must be a JSON object");

  Layout out;
  std::set<std::string> seen;
  for (const auto& [name, value] : *top) {
    if (!seen.insert(name).second)
      throw Error(what + ": name \"" + name + "\" appears twice in the header");
    const std::string where = what + ": \"" + name + "\"";
    const auto* obj = std::get_if<Json::kObject>(&value.v);
    if (name == "__metadata__") {
      if (!obj) throw Error(where + " must be an object of strings");
      for (const auto& [k, v] : *obj) {
        const auto* s = std::get_if<Json::kString>(&v.v);
        if (!s) throw Error(where + ": value of \"" + k + "\" must be a string");
        out.metadata[k] = *s;
      }
      continue;
    }
    if (!obj) throw Error(where + " must be an object with dtype, shape and data_offsets");
    for (const auto& [k, v] : *obj) {
      if (k != "dtype" && k != "shape" && k != "data_offsets")
        throw Error(where + ": unknown field \"" + k + "\"");
    }
    const Json* dtype = field(*obj, "dtype");
    const Json* shape = field(*obj, "shape");
    const Json* offsets = field(*obj, "data_offsets");
    if (!dtype || !shape || !offsets) throw Error(where + " needs dtype, shape and data_offsets");
    const auto* dname = std::get_if<Json::kString>(&dtype->v);
    if (!dname) throw Error(where + ": dtype must be a string");
    Entry e{name, kF32, {}, 0, 0};
    bool known = false;
    for (const auto& [fname, t] : kDTypes) {
      if (*dname == fname) {
        e.dtype = t;
        known = true;
      }
    }
    if (!known) {
      throw Error(where + ": dtype " + *dname +
                  " is not supported (F32, F64, I32, I64, U8, BOOL, F16, BF16)");
    }
    const auto* dims = std::get_if<Json::kArray>(&shape->v);
    if (!dims) throw Error(where + ": shape must be an array");
    if (dims->size() > static_cast<size_t>(kMaxRank)) {
      throw Error(where + ": rank " + std::to_string(dims->size()) + " exceeds " +
                  std::to_string(kMaxRank));
    }
    for (const Json& d : *dims)
      e.shape.push_back(static_cast<int64_t>(as_count(d, "shape entry", where)));
    if (Status st = validate_shape(e.shape); !st.ok()) throw Error(where + ": " + st.message());
    const auto* offs = std::get_if<Json::kArray>(&offsets->v);
    if (!offs || offs->size() != 2) throw Error(where + ": data_offsets must be [begin, end]");
    e.begin = as_count((*offs)[0], "data_offsets begin", where);
    e.end = as_count((*offs)[1], "data_offsets end", where);
    if (e.end < e.begin) {
      throw Error(where + ": data_offsets [" + std::to_string(e.begin) + ", " +
                  std::to_string(e.end) + "] end before they begin");
    }
    const uint64_t want = static_cast<uint64_t>(numel(e.shape)) * dtype_size(e.dtype);
    if (e.end - e.begin != want) {
      throw Error(where + ": data_offsets [" + std::to_string(e.begin) + ", " +
                  std::to_string(e.end) + "] hold " + std::to_string(e.end - e.begin) +
                  " bytes but " + *dname + " " + shape_str(e.shape) + " needs " +
                  std::to_string(want));
    }
    out.entries.push_back(std::move(e));
  }

  // The entries must tile the data section: sorted by offset, each starts where the previous
  // one ended, and the last ends at the end of the file.
  const uint64_t data_size = bytes.size() - 8 - n;
  std::vector<const Entry*> sorted;
  for (const Entry& e : out.entries) sorted.push_back(&e);
  std::stable_sort(sorted.begin(), sorted.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t at = 0;
  for (const Entry* e : sorted) {
    if (e->end > data_size) {
      throw Error(what + ": \"" + e->name + "\": data_offsets [" + std::to_string(e->begin) + ", " +
                  std::to_string(e->end) + "] run past the " + std::to_string(data_size) +
                  "-byte data section (truncated?)");
    }
    if (e->begin < at) {
      throw Error(what + ": \"" + e->name + "\": data_offsets [" + std::to_string(e->begin) + ", " +
                  std::to_string(e->end) + "] overlap the previous tensor's (which ends at " +
                  std::to_string(at) + ")");
    }
    if (e->begin > at) {
      throw Error(what + ": \"" + e->name + "\": data_offsets begin at " +
                  std::to_string(e->begin) + ", leaving bytes [" + std::to_string(at) + ", " +
                  std::to_string(e->begin) + ") unused");
    }
    at = e->end;
  }
  if (at != data_size) {
    throw Error(what + ": the tensors end at byte " + std::to_string(at) +
                " of the data section but it has " + std::to_string(data_size) + " bytes");
  }
  out.data_offset = 8 + n;
  return out;
}

std::vector<uint8_t> write_header(const std::vector<Named>& tensors,
                                  const std::map<std::string, std::string>& metadata) {
  std::string header = "{";
  std::set<std::string> names;
  uint64_t offset = 0;
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      header += (first ? "" : ",") + json_escape(k) + ":" + json_escape(v);
      first = false;
    }
    header += "}";
  }
  for (const Named& t : tensors) {
    if (t.name == "__metadata__")
      throw Error("save_safetensors: a tensor may not be named __metadata__");
    if (!names.insert(t.name).second)
      throw Error("save_safetensors: the name " + t.name + " appears twice");
    std::string shape;
    for (int64_t d : t.shape) shape += (shape.empty() ? "" : ",") + std::to_string(d);
    const uint64_t end = offset + byte_size(t);
    header += std::string(header.size() > 1 ? "," : "") + json_escape(t.name) + ":{\"dtype\":\"" +
              format_name(t.dtype) + "\",\"shape\":[" + shape + "],\"data_offsets\":[" +
              std::to_string(offset) + "," + std::to_string(end) + "]}";
    offset = end;
  }
  header += "}";
  // Pad with spaces so that the data starts 8-byte aligned (as the reference writer does).
  while ((8 + header.size()) % 8 != 0) header += ' ';
  std::vector<uint8_t> out(8 + header.size());
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<uint8_t>(n >> (8 * i));
  std::memcpy(out.data() + 8, header.data(), header.size());
  return out;
}

uint64_t byte_size(const Named& t) {
  return static_cast<uint64_t>(numel(t.shape)) * dtype_size(t.dtype);
}

std::vector<uint8_t> write_file(const std::vector<Named>& tensors,
                                const std::map<std::string, std::string>& metadata) {
  std::vector<uint8_t> out = write_header(tensors, metadata);
  size_t at = out.size();
  uint64_t total = 0;
  for (const Named& t : tensors) {
    if (t.bytes.size() != byte_size(t))
      throw Error("save_safetensors: tensor " + t.name + " has " + std::to_string(t.bytes.size()) +
                  " bytes, its shape and dtype say " + std::to_string(byte_size(t)));
    total += t.bytes.size();
  }
  out.resize(at + total);
  for (const Named& t : tensors) {
    if (!t.bytes.empty()) std::memcpy(out.data() + at, t.bytes.data(), t.bytes.size());
    at += t.bytes.size();
  }
  return out;
}

}  // namespace tw::safetensors
