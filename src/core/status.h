// Status and Result<T>: the error currency of every layer below the API (after Arrow's).
// An OK Status costs one null pointer.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw {

enum class StatusCode : uint8_t {  // serialised in responses: append only
  kOk = 0,
  kInvalidArgument = 1,  // the caller asked for something ill-formed (bad shape, dtype, dim)
  kNotFound = 2,         // an id that does not exist
  kOutOfRange = 3,
  kUnimplemented = 4,      // not supported by this backend or build
  kResourceExhausted = 5,  // a quota, limit or memory
  kUnavailable = 6,        // the peer is gone or not reachable
  kDataLoss = 7,           // malformed bytes (truncated frame, bad encoding)
  kInternal = 8,           // a bug in tensorwire
};
const char* status_code_name(StatusCode c);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message);
  Status(const Status& o) : state_(o.state_ ? std::make_unique<State>(*o.state_) : nullptr) {}
  Status& operator=(const Status& o) {
    state_ = o.state_ ? std::make_unique<State>(*o.state_) : nullptr;
    return *this;
  }
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;

  static Status OK() { return Status(); }
  bool ok() const { return state_ == nullptr; }
  StatusCode code() const { return state_ ? state_->code : StatusCode::kOk; }
  const std::string& message() const;
  std::string to_string() const;
  // The same status with `context: ` put in front of its message.
  Status with_context(const std::string& context) const;

 private:
  struct State {
    StatusCode code;
    std::string message;
  };
  std::unique_ptr<State> state_;
};

inline Status invalid_argument(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status out_of_range(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status resource_exhausted(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}
inline Status unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status data_loss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT
    if (status_.ok()) status_ = internal_error("Result constructed from an OK status");
  }
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace tw

#define TW_CONCAT_INNER(a, b) a##b
#define TW_CONCAT(a, b) TW_CONCAT_INNER(a, b)

#define TW_RETURN_NOT_OK(expr)       \
  do {                               \
    ::tw::Status _tw_st = (expr);    \
    if (!_tw_st.ok()) return _tw_st; \
  } while (0)

#define TW_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()

#define TW_ASSIGN_OR_RETURN(lhs, expr) \
  TW_ASSIGN_OR_RETURN_IMPL(TW_CONCAT(_tw_res_, __LINE__), lhs, expr)

// Returns invalid_argument(message) from the enclosing function when cond is false.
#define TW_CHECK_ARG(cond, message)                      \
  do {                                                   \
    if (!(cond)) return ::tw::invalid_argument(message); \
  } while (0)
TW_INTERNAL_END
