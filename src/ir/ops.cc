#include "ir/ops.h"

#include <bit>
#include <cstring>
#include <functional>
#include <tuple>

namespace tw::ir {

#define TW_KIND_NAME_ENTRY(Name, str, ...) #str,
const char* kind_name(UnaryKind k) {
  static const char* kNames[] = {TW_UNARY_KINDS(TW_KIND_NAME_ENTRY)};
  return k < UnaryKind::kCount ? kNames[static_cast<int>(k)] : "?";
}
const char* kind_name(BinaryKind k) {
  static const char* kNames[] = {TW_BINARY_KINDS(TW_KIND_NAME_ENTRY)};
  return k < BinaryKind::kCount ? kNames[static_cast<int>(k)] : "?";
}
const char* kind_name(ReduceKind k) {
  static const char* kNames[] = {TW_REDUCE_KINDS(TW_KIND_NAME_ENTRY)};
  return k < ReduceKind::kCount ? kNames[static_cast<int>(k)] : "?";
}
const char* kind_name(PoolKind k) {
  static const char* kNames[] = {TW_POOL_KINDS(TW_KIND_NAME_ENTRY)};
  return k < PoolKind::kCount ? kNames[static_cast<int>(k)] : "?";
}
#undef TW_KIND_NAME_ENTRY
const char* kind_name(BlockFormat f) {
  return f < BlockFormat::kCount ? block_format_name(f).data() : "?";
}

bool Bytes::operator==(const Bytes& o) const {
  return data.size() == o.data.size() &&
         (data.size() == 0 || std::memcmp(data.data(), o.data.data(), data.size()) == 0);
}

OpCode op_code(const Op& op) {
  return std::visit(
      [](const auto& o) -> OpCode {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, std::monostate>) {
          return OpCode{0};
        } else {
          return OpTraits<T>::kCode;
        }
      },
      op);
}

const char* op_code_name(OpCode code) {
  switch (code) {
#define TW_OP_NAME_ENTRY(Name, c, since) \
  case OpCode::k##Name: return #Name;
    TW_OP_LIST(TW_OP_NAME_ENTRY)
#undef TW_OP_NAME_ENTRY
  }
  return "?";
}

namespace {
std::string snake(const char* camel) {
  std::string s;
  for (const char* p = camel; *p; ++p) {
    if (*p >= 'A' && *p <= 'Z') {
      if (!s.empty()) s += '_';
      s += static_cast<char>(*p - 'A' + 'a');
    } else {
      s += *p;
    }
  }
  return s;
}
}  // namespace

std::string op_name(const Op& op) {
  return std::visit(
      [](const auto& o) -> std::string {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, std::monostate>) {
          return "(none)";
        } else if constexpr (std::is_same_v<T, Unary> || std::is_same_v<T, Binary> ||
                             std::is_same_v<T, Reduce> || std::is_same_v<T, Pool2d>) {
          return kind_name(o.kind);
        } else if constexpr (std::is_same_v<T, BinaryScalar>) {
          return std::string(kind_name(o.kind)) + "_scalar";
        } else if constexpr (std::is_same_v<T, Softmax>) {
          return o.log ? "log_softmax" : "softmax";
        } else if constexpr (std::is_same_v<T, MatMul>) {
          return "matmul";
        } else if constexpr (std::is_same_v<T, Conv2d>) {
          return "conv2d";
        } else if constexpr (std::is_same_v<T, AdaptiveAvgPool2d>) {
          return "adaptive_avg_pool2d";
        } else {
          return snake(OpTraits<T>::kStructName);
        }
      },
      op);
}

namespace {
struct IoCollector {
  std::vector<TensorId>* ins;
  std::vector<TensorId>* outs;
  void operator()(const char*, const In& v) const {
    if (ins && v.id) ins->push_back(v.id);
  }
  void operator()(const char*, const std::vector<In>& v) const {
    if (ins)
      for (const In& x : v) ins->push_back(x.id);
  }
  void operator()(const char*, const Out& v) const {
    if (outs) outs->push_back(v.id);
  }
  template <class T>
  void operator()(const char*, const T&) const {}
};

// Attributes compare by value, doubles by their bits: an op carrying NaN equals itself (as
// Scalar's == treats NaN), which a plain == would deny. Equal bits hash equally (HashVisitor).
inline bool same_field(double a, double b) {
  return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b);
}
template <class T>
bool same_field(const T& a, const T& b) {
  return a == b;
}

struct EqVisitor {
  template <class T>
  bool operator()(const T& a, const T& b) const {
    if constexpr (std::is_same_v<T, std::monostate>) {
      return true;
    } else {
      return std::apply(
          [&](const auto&... x) {
            return std::apply([&](const auto&... y) { return (same_field(x, y) && ...); }, b.tie());
          },
          a.tie());
    }
  }
  template <class T, class U>
  bool operator()(const T&, const U&) const {
    return false;
  }
};

inline void hash_mix(size_t& h, uint64_t v) {
  h ^= std::hash<uint64_t>{}(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
}
struct HashVisitor {
  size_t* h;
  void operator()(const char*, const In& v) const { hash_mix(*h, v.id); }
  void operator()(const char*, const Out& v) const { hash_mix(*h, v.id); }
  void operator()(const char*, const std::vector<In>& v) const {
    for (auto& x : v) hash_mix(*h, x.id);
  }
  void operator()(const char*, const std::vector<int64_t>& v) const {
    for (auto x : v) hash_mix(*h, static_cast<uint64_t>(x));
    hash_mix(*h, v.size());
  }
  void operator()(const char*, const Scalar& v) const {
    hash_mix(*h, v.is_float ? std::hash<double>{}(v.f) : static_cast<uint64_t>(v.i));
  }
  void operator()(const char*, const Bytes& v) const {
    hash_mix(*h, std::hash<std::string_view>{}(std::string_view(
                     reinterpret_cast<const char*>(v.data.data()), v.data.size())));
  }
  void operator()(const char*, double v) const { hash_mix(*h, std::hash<double>{}(v)); }
  template <class T>
  void operator()(const char*, const T& v) const {
    hash_mix(*h, static_cast<uint64_t>(v));
  }
};
}  // namespace

void op_inputs(const Op& op, std::vector<TensorId>& into) {
  into.clear();
  std::visit(
      [&](const auto& o) {
        if constexpr (!std::is_same_v<std::decay_t<decltype(o)>, std::monostate>)
          o.fields(IoCollector{&into, nullptr});
      },
      op);
}

void op_outputs(const Op& op, std::vector<TensorId>& into) {
  into.clear();
  std::visit(
      [&](const auto& o) {
        if constexpr (!std::is_same_v<std::decay_t<decltype(o)>, std::monostate>)
          o.fields(IoCollector{nullptr, &into});
      },
      op);
}

std::vector<TensorId> op_inputs(const Op& op) {
  std::vector<TensorId> ins;
  op_inputs(op, ins);
  return ins;
}

std::vector<TensorId> op_outputs(const Op& op) {
  std::vector<TensorId> outs;
  op_outputs(op, outs);
  return outs;
}

bool operator==(const Op& a, const Op& b) { return std::visit(EqVisitor{}, a, b); }

size_t op_hash(const Op& op) {
  size_t h = static_cast<size_t>(op_code(op));
  std::visit(
      [&](const auto& o) {
        if constexpr (!std::is_same_v<std::decay_t<decltype(o)>, std::monostate>)
          o.fields(HashVisitor{&h});
      },
      op);
  return h;
}

}  // namespace tw::ir
