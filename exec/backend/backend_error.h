// How a compute backend reports a failure in a call that has no Status
// (allocation, copies, synchronization: DeviceBuffer's constructor cannot
// return one): it throws BackendError, and the executor's entry points
// (Trainer::create / step / snapshot / restore, the calibration benches)
// catch it and return its Status, so callers of those entry points see
// Status only. Out of memory is
// kResourceExhausted with the size asked for and what was in use; a broken
// device is kInternal with the CUDA error.
#pragma once

#include <exception>
#include <new>
#include <string>
#include <utility>

#include "core/status.h"

namespace loom::exec {

class BackendError : public std::exception {
 public:
  explicit BackendError(Status status) : status_(std::move(status)) {}
  const Status& status() const { return status_; }
  const char* what() const noexcept override { return status_.message().c_str(); }

 private:
  Status status_;
};

[[noreturn]] inline void throw_backend_error(Status status) { throw BackendError(std::move(status)); }

// Runs `body` (returning Status) and turns a BackendError or a host
// allocation failure into a Status; `context` names the work ("step 12").
template <class Body>
Status guard_backend(Body&& body, const std::string& context) {
  try {
    return body();
  } catch (const BackendError& e) {
    return e.status().with_context(context);
  } catch (const std::bad_alloc&) {
    return resource_exhausted(context + ": out of host memory; lower the micro-batch, use recompute, or more ranks");
  }
}

}  // namespace loom::exec
