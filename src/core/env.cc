#include "core/env.h"

#include <array>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace tw {
namespace {

constexpr EnvVar kVars[] = {
#define TW_ENV_ROW(name, kind, what) {"TW_" #name, EnvKind::kind, what},
    TW_ENV_LIST(TW_ENV_ROW)
#undef TW_ENV_ROW
};
constexpr size_t kNumVars = sizeof(kVars) / sizeof(kVars[0]);

// One warning per variable and process.
std::array<std::atomic<bool>, kNumVars> warned{};

std::optional<uint64_t> parse_count(const std::string& s) {
  if (s.empty() || !std::isdigit(static_cast<unsigned char>(s[0]))) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (errno || !end || *end) return std::nullopt;
  return static_cast<uint64_t>(v);
}

}  // namespace

std::span<const EnvVar> env_vars() { return {kVars, kNumVars}; }

const EnvVar& env_var(Env v) { return kVars[static_cast<size_t>(v)]; }

const char* env_kind_name(EnvKind kind) {
  switch (kind) {
    case EnvKind::kCount: return "a count";
    case EnvKind::kBytes: return "bytes (4M, 1G, ...)";
    case EnvKind::kFlag: return "0 or 1";
    case EnvKind::kText: return "text";
  }
  return "text";
}

std::optional<uint64_t> parse_byte_count(const std::string& text) {
  if (std::optional<uint64_t> n = parse_count(text)) return n;
  if (text.empty() || !(std::isdigit(static_cast<unsigned char>(text[0])) || text[0] == '.'))
    return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (errno || end == text.c_str() || !(v >= 0)) return std::nullopt;
  const std::string suffix(end);
  static const std::string kUnits = "KMGT";
  if (suffix.empty()) return std::nullopt;
  const size_t u =
      kUnits.find(static_cast<char>(std::toupper(static_cast<unsigned char>(suffix[0]))));
  if (u == std::string::npos) return std::nullopt;
  const std::string rest = suffix.substr(1);
  if (!rest.empty() && rest != "B" && rest != "iB") return std::nullopt;
  const double bytes = std::ldexp(v, 10 * static_cast<int>(u + 1));
  if (bytes >= 18446744073709551615.0) return std::nullopt;
  return static_cast<uint64_t>(bytes);
}

std::optional<std::string> env_text(Env v) {
  const char* e = std::getenv(env_var(v).name);
  if (e == nullptr || *e == '\0') return std::nullopt;
  return std::string(e);
}

std::optional<uint64_t> env_number(Env v) {
  const std::optional<std::string> text = env_text(v);
  if (!text) return std::nullopt;
  const EnvVar& var = env_var(v);
  std::optional<uint64_t> n =
      var.kind == EnvKind::kBytes ? parse_byte_count(*text) : parse_count(*text);
  if (!n && !warned[static_cast<size_t>(v)].exchange(true)) {
    std::fprintf(stderr, "tensorwire: %s='%s' is not %s; ignored (the default holds)\n", var.name,
                 text->c_str(), env_kind_name(var.kind));
  }
  return n;
}

std::optional<bool> env_flag(Env v) {
  const std::optional<std::string> text = env_text(v);
  if (!text) return std::nullopt;
  return *text != "0";
}

}  // namespace tw
