// Status and StatusOr: how every gpool layer reports failure without exceptions.
//
// Modelled on LevelDB's Status: a cheap OK value and an error code with a message that says what
// was wrong and where (file:line, field, peer). Thread safety: values; distinct objects may be
// used from different threads freely, one object needs external synchronisation.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace gpool {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // bad input: a malformed file, request field or flag
  kNotFound,
  kAlreadyExists,
  kFailedPrecondition,
  kResourceExhausted,  // a quota, limit or capacity is used up
  kUnavailable,        // a peer or service cannot be reached now; retrying may help
  kPermissionDenied,
  kUnimplemented,
  kInternal,
  kIoError,
  kAborted,
  kDeadlineExceeded,
  kUnauthenticated,  // no credentials, or ones the peer does not accept (gRPC UNAUTHENTICATED)
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
  static Status FailedPrecondition(std::string m) {
    return {StatusCode::kFailedPrecondition, std::move(m)};
  }
  static Status ResourceExhausted(std::string m) {
    return {StatusCode::kResourceExhausted, std::move(m)};
  }
  static Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status PermissionDenied(std::string m) {
    return {StatusCode::kPermissionDenied, std::move(m)};
  }
  static Status Unauthenticated(std::string m) {
    return {StatusCode::kUnauthenticated, std::move(m)};
  }
  static Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
  static Status IoError(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
  static Status Aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: net.topo:12: expected ..." or "OK".
  std::string ToString() const;

  // Returns a copy whose message is prefixed with `context: `, e.g. a file name.
  Status WithContext(std::string_view context) const;

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Holds either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status s) : v_(std::move(s)) { assert(!std::get<Status>(v_).ok()); }  // NOLINT
  StatusOr(T value) : v_(std::move(value)) {}                                     // NOLINT

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<Status, T> v_;
};

}  // namespace gpool

#define GPOOL_CONCAT_INNER(a, b) a##b
#define GPOOL_CONCAT(a, b) GPOOL_CONCAT_INNER(a, b)

// Returns from the current function if `expr` (a Status) is not OK.
#define GPOOL_RETURN_IF_ERROR(expr)              \
  do {                                           \
    ::gpool::Status gpool_status_ = (expr);      \
    if (!gpool_status_.ok()) return gpool_status_; \
  } while (0)

// GPOOL_ASSIGN_OR_RETURN(auto x, Foo()); declares x from a StatusOr or returns its error.
#define GPOOL_ASSIGN_OR_RETURN(lhs, expr) \
  GPOOL_ASSIGN_OR_RETURN_IMPL(GPOOL_CONCAT(gpool_statusor_, __LINE__), lhs, expr)
#define GPOOL_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()
