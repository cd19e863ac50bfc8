// ObservedKernels: a kernel table that forwards every call to another table
// unchanged (same arguments, same pointers, same order: results are
// bit-identical) and calls before() / after() around each op with the call's
// description (exec/backend/kernel_call.h). The base of the per-op profiler
// (kernel_profile.h) and of the synchronizing error check
// (kernel_sync_check.h).
//
// precision(), status(), set_weights() and weights_changed() are forwarded
// without hooks. The inner table must outlive this one; the decorator never
// calls it from its destructor.
// Thread-safety: used by one thread at a time, like the table it wraps.
#pragma once

#include <type_traits>

#include "exec/backend/kernel_call.h"
#include "exec/backend/kernels.h"

namespace loom::exec {

class ObservedKernels : public Kernels {
 public:
  explicit ObservedKernels(Kernels& inner) : inner_(inner) {}

  Kernels& inner() { return inner_; }

  Precision precision() const override { return inner_.precision(); }
  Status status() override { return inner_.status(); }
  void set_weights(const float* params, int64_t n) override { inner_.set_weights(params, n); }
  void weights_changed(const float* begin, int64_t n) override { inner_.weights_changed(begin, n); }

  // Every op: describe the call, before(), the inner table's op, after().
#define LOOM_OBSERVED_OP(Type, name) \
  Type::Result name(const Type& a) override { return observe(a, [&] { return inner_.name(a); }); }
  LOOM_KERNEL_OPS(LOOM_OBSERVED_OP)
#undef LOOM_OBSERVED_OP

 protected:
  // Around every op call (not around the four forwarded without hooks).
  virtual void before(const KernelCall& call) {}
  virtual void after(const KernelCall& call) {}

 private:
  template <typename Op, typename F>
  typename Op::Result observe(const Op& a, F&& forward) {
    const KernelCall call = a.describe(inner_.precision());
    before(call);
    if constexpr (std::is_void_v<typename Op::Result>) {
      forward();
      after(call);
    } else {
      typename Op::Result result = forward();
      after(call);
      return result;
    }
  }

  Kernels& inner_;
};

}  // namespace loom::exec
