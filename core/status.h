// Status and Result: how every library function in Loom reports failure.
//
// Library code never throws across a library boundary and never exits; it
// returns a Status (or a Result<T>) and main() decides what to do. A Status
// message is written for the user: it names the field that is wrong and says
// how to fix it ("layout: tp=3 does not divide num_attention_heads=32; use tp
// in {1,2,4,8,16,32}").
#pragma once

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>

namespace loom {

// Codes separate the caller's mistakes from environment failures, as NCCL's
// ncclResult_t separates local, remote and timeout failures.
enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // the user's input is wrong (bad layout, bad flag)
  kParseError,       // a file is not well-formed (JSON syntax, bad shard)
  kNotFound,         // a file or key is missing
  kIoError,          // the OS refused (open, write, fsync)
  kUnsupported,      // valid input this build or machine cannot do
  kRemoteError,      // a peer rank failed
  kTimeout,          // a peer or device did not answer in time
  kResourceExhausted,  // out of host or device memory
  kInternal,         // a bug in Loom
};

const char* status_code_name(StatusCode code);
// The process exit code of a command that ends with `code`: 0 ok, 2 the
// input (invalid argument, parse error, not found, unsupported), 1 anything
// else (I/O, a peer, a timeout, memory, a bug). Every rank of a job that
// fails together exits with the same one.
int status_exit_code(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }
  bool is_ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "invalid argument: layout: tp=3 does not divide ..."
  std::string to_string() const;
  // Prefixes context ("models/x.json: ") to the message; no-op when ok.
  Status with_context(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status parse_error(std::string m) { return {StatusCode::kParseError, std::move(m)}; }
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status io_error(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
inline Status unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status resource_exhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT
    if (status_.is_ok()) status_ = internal_error("Result constructed from an ok Status without a value");
  }
  bool is_ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  const T& value() const& { return *value_; }
  T& value() & { return *value_; }
  T&& value() && { return std::move(*value_); }
  const T& operator*() const& { return *value_; }
  T& operator*() & { return *value_; }
  const T* operator->() const { return &*value_; }
  T* operator->() { return &*value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

[[noreturn]] void check_failed(const char* expr, const char* file, int line, const std::string& msg);

}  // namespace loom

#define LOOM_CONCAT_INNER_(a, b) a##b
#define LOOM_CONCAT_(a, b) LOOM_CONCAT_INNER_(a, b)

// Returns the Status of `expr` from the enclosing function if it is not ok.
#define LOOM_RETURN_IF_ERROR(expr)                    \
  do {                                                \
    ::loom::Status loom_status_ = (expr);             \
    if (!loom_status_.is_ok()) return loom_status_;   \
  } while (0)

// `LOOM_ASSIGN_OR_RETURN(auto x, make_x());` — unwraps a Result or returns its Status.
#define LOOM_ASSIGN_OR_RETURN(lhs, expr) \
  LOOM_ASSIGN_OR_RETURN_IMPL_(LOOM_CONCAT_(loom_result_, __LINE__), lhs, expr)
#define LOOM_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.is_ok()) return tmp.status();            \
  lhs = std::move(tmp).value()

// An invariant check that stays on in release builds. A failure is a Loom bug.
#define LOOM_CHECK(cond, msg)                                            \
  do {                                                                   \
    if (!(cond)) ::loom::check_failed(#cond, __FILE__, __LINE__, (msg)); \
  } while (0)
