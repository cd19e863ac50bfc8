#include "core/status.h"

namespace loom {

int status_exit_code(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return 0;
    case StatusCode::kInvalidArgument:
    case StatusCode::kParseError:
    case StatusCode::kNotFound:
    case StatusCode::kUnsupported: return 2;
    default: return 1;
  }
}

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kParseError: return "parse error";
    case StatusCode::kNotFound: return "not found";
    case StatusCode::kIoError: return "I/O error";
    case StatusCode::kUnsupported: return "unsupported";
    case StatusCode::kRemoteError: return "remote error";
    case StatusCode::kTimeout: return "timeout";
    case StatusCode::kResourceExhausted: return "out of memory";
    case StatusCode::kInternal: return "internal error";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (is_ok()) return "ok";
  return std::string(status_code_name(code_)) + ": " + message_;
}

Status Status::with_context(const std::string& context) const {
  if (is_ok()) return *this;
  return Status(code_, context + ": " + message_);
}

void check_failed(const char* expr, const char* file, int line, const std::string& msg) {
  std::fprintf(stderr, "loom: internal check failed: %s at %s:%d: %s\n", expr, file, line, msg.c_str());
  std::abort();
}

}  // namespace loom
