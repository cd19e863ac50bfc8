#include "exec/backend/kernel_sync_check.h"

#include <cstdio>
#include <utility>

namespace loom::exec {

SyncCheckKernels::SyncCheckKernels(Kernels& inner, std::function<Status()> wait, std::string label)
    : ObservedKernels(inner), wait_(std::move(wait)), label_(std::move(label)) {}

Status SyncCheckKernels::status() {
  if (!first_.is_ok()) return first_;
  return inner().status();
}

void SyncCheckKernels::after(const KernelCall& call) {
  if (!first_.is_ok()) return;  // the first failure is the one to report
  Status s = wait_();                  // a fault while the op ran (named as the device's error)
  if (s.is_ok()) s = inner().status();  // a refused shape or a failed launch
  if (s.is_ok()) return;
  first_ = Status(s.code(), s.message() + " in " + call.to_string());
  std::fprintf(stderr, "loom: %s: %s\n", label_.c_str(), first_.message().c_str());
  std::fflush(stderr);
}

}  // namespace loom::exec
