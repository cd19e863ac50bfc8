#include "exec/backend/kernel_call.h"

#include "exec/backend/kernel_ops.h"

namespace loom::exec {

std::string KernelCall::to_string() const {
  std::string s = kernel_op_name(op);
  if (num_dims == 0) return s;
  s += " (";
  for (int i = 0; i < num_dims; ++i) {
    if (i) s += ", ";
    s += dims[size_t(i)].name;
    s += '=';
    s += std::to_string(dims[size_t(i)].value);
  }
  s += ')';
  return s;
}

}  // namespace loom::exec
