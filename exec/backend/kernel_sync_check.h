// SyncCheckKernels: a debugging kernel table that forwards every call and,
// after each op, waits for the device and checks for an error, so a fault is
// reported naming the op that raised it and its shape:
//   CUDA error 'an illegal memory access was encountered'
//   (cudaErrorIllegalAddress) in attention_backward (B=2, T=1024, Hq=32, Hk=8, D=128)
// The first failure is kept (status() returns it from then on, ahead of the
// inner table's) and printed once to stderr. The CUDA backend puts one in
// front of its table when LOOM_CUDA_SYNC_DEBUG=1 (and checks its copies the
// same way); every op then costs a host synchronization.
#pragma once

#include <functional>
#include <string>

#include "exec/backend/observed_kernels.h"

namespace loom::exec {

class SyncCheckKernels final : public ObservedKernels {
 public:
  // `wait` blocks until the work queued so far has run and returns the
  // device's error, if any; `label` prefixes the stderr line.
  SyncCheckKernels(Kernels& inner, std::function<Status()> wait, std::string label);

  Status status() override;

 protected:
  void after(const KernelCall& call) override;

 private:
  std::function<Status()> wait_;
  std::string label_;
  Status first_ = Status::ok();
};

}  // namespace loom::exec
