#include "ir/printer.h"

#include <sstream>

namespace tw::ir {
namespace {

std::string scalar_str(const Scalar& s) {
  if (!s.is_float) return std::to_string(s.i);
  std::ostringstream os;
  os.precision(17);
  os << s.f;
  return os.str();
}

struct Printer {
  std::ostringstream& os;
  bool first = true;
  void sep(const char* name) {
    if (!first) os << ", ";
    first = false;
    os << name << "=";
  }
  void operator()(const char* n, const In& v) {
    sep(n);
    if (v.id) {
      os << "%" << v.id;
    } else {
      os << "none";
    }
  }
  void operator()(const char* n, const Out& v) {
    sep(n);
    os << "%" << v.id;
  }
  void operator()(const char* n, const std::vector<In>& v) {
    sep(n);
    os << "[";
    for (size_t i = 0; i < v.size(); ++i) os << (i ? ", %" : "%") << v[i].id;
    os << "]";
  }
  void operator()(const char* n, const std::vector<int64_t>& v) {
    sep(n);
    os << shape_str(v);
  }
  void operator()(const char* n, int64_t v) { sep(n), os << v; }
  void operator()(const char* n, uint64_t v) { sep(n), os << v; }
  void operator()(const char* n, double v) { sep(n), os << scalar_str(Scalar(v)); }
  void operator()(const char* n, bool v) { sep(n), os << (v ? "true" : "false"); }
  void operator()(const char* n, DType v) { sep(n), os << dtype_name(v); }
  void operator()(const char* n, const Scalar& v) { sep(n), os << scalar_str(v); }
  void operator()(const char* n, const Bytes& v) {
    sep(n), os << "<" << v.data.size() << " bytes>";
  }
  template <class E>
  requires std::is_enum_v<E>
  void operator()(const char* n, E v) {
    sep(n);
    os << kind_name(v);
  }
};

}  // namespace

std::string to_string(const Op& op) {
  std::ostringstream os;
  std::visit(
      [&](const auto& o) {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, std::monostate>) {
          os << "(none)";
        } else {
          os << op_name(op) << "(";
          Printer p{os};
          o.fields(p);
          os << ")";
        }
      },
      op);
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Op& op) { return os << to_string(op); }

}  // namespace tw::ir
