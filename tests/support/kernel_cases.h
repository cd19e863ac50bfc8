// Every op of the kernel table (exec/backend/kernel_ops.h) as test cases that
// any backend can run, ggml's test-backend-ops in spirit: a case holds its
// arrays (contents before the op, which are checked after it, and with what
// tolerance) and calls the table; the runner copies the arrays into a
// backend's memory, runs the case through that backend's table, copies them
// back and compares them with the CPU reference table's run on host memory.
//
// all_cases() is generated from LOOM_KERNEL_OPS: an op added to the list
// without cases<Op>() in kernel_cases.cc does not link, and the tests check
// at run time that every op was called (a profiler in front of the table).
//
// Arrays a case marks overwritten start as NaN, so an element the op fails to
// write shows up (in the reference too: that is the op's contract).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "exec/backend/compute_backend.h"
#include "exec/backend/kernels.h"
#include "tests/support/close.h"

namespace loom::exec::kernel_cases {

using test::Tol;

// One array of a case.
struct Array {
  enum class Kind { kF32, kI32, kU16, kF64 };
  std::string name;
  Kind kind = Kind::kF32;
  std::vector<float> f32;  // the contents before the case runs (one of the three, by kind)
  std::vector<int32_t> i32;
  std::vector<uint16_t> u16;
  std::vector<double> f64;  // accumulators (AccumulateSum): within tol.elem_rel of each element
  bool checked = false;      // compared with the reference after the run
  bool overwritten = false;  // every element written: starts NaN, none may remain
  Tol tol;                   // across implementations (one implementation matches bit for bit)

  size_t bytes() const;
  const void* data() const;
};

// A case's arrays in the memory of the table that runs it.
class Bound {
 public:
  explicit Bound(std::vector<void*> ptrs) : ptrs_(std::move(ptrs)) {}
  float* f(int i) const { return static_cast<float*>(ptrs_[size_t(i)]); }
  int32_t* i(int i) const { return static_cast<int32_t*>(ptrs_[size_t(i)]); }
  uint16_t* u(int i) const { return static_cast<uint16_t*>(ptrs_[size_t(i)]); }
  double* d(int i) const { return static_cast<double*>(ptrs_[size_t(i)]); }

 private:
  std::vector<void*> ptrs_;
};

struct Case {
  KernelOp op{};      // the op under test
  std::string label;  // "gemm (T, N, beta 0.5)"
  std::vector<Array> arrays;
  // Calls the table; returns the host results of its calls (sum(),
  // take_sum_squares()), compared within host_tol (absolute) of each.
  std::function<std::vector<double>(Kernels&, const Bound&)> run;
  std::vector<double> host_tol;

  // Builders; each returns the array's index for Bound.
  int in(std::string name, std::vector<float> v);
  int in(std::string name, std::vector<int32_t> v);
  int in(std::string name, std::vector<uint16_t> v);
  // Read and written (in place, or accumulated): checked.
  int inout(std::string name, std::vector<float> v, Tol tol);
  int inout(std::string name, std::vector<double> v, Tol tol);
  // Written whole by the op: starts NaN, checked.
  int out(std::string name, size_t n, Tol tol);
  int out16(std::string name, size_t n);  // 16-bit, compared exactly
};

// What the case files share: an op's case by label, and fp32's tolerance
// for another summation order.
inline Case make(KernelOp op, std::string label) {
  Case c;
  c.op = op;
  c.label = std::move(label);
  return c;
}
inline constexpr Tol kF32{1e-5, 1e-5, 0};
inline constexpr Tol kXent{1e-6, 1e-6, 0};
inline constexpr int64_t kElementwise = 100003;  // odd: a tail past every vector width

// The cases of one op (kernel_cases.cc specializes it for every op).
template <typename Op>
std::vector<Case> cases();
// Defined in kernel_cases_gemm.cc and kernel_cases_attention.cc.
template <>
std::vector<Case> cases<Gemm>();
template <>
std::vector<Case> cases<GroupedGemm>();
template <>
std::vector<Case> cases<AttentionForward>();
template <>
std::vector<Case> cases<AttentionBackward>();
template <>
std::vector<Case> cases<AttentionMerge>();
// Defined in kernel_cases_optimizer.cc.
template <>
std::vector<Case> cases<AdamwUpdate>();
template <>
std::vector<Case> cases<AdamwMulti>();
template <>
std::vector<Case> cases<Sum>();
template <>
std::vector<Case> cases<AccumulateSum>();
template <>
std::vector<Case> cases<AddSumSquares>();
template <>
std::vector<Case> cases<AddSumSquaresMulti>();
template <>
std::vector<Case> cases<TakeSumSquares>();
// Every case of every op, in LOOM_KERNEL_OPS order.
std::vector<Case> all_cases();

// A run of a case: every array's bytes afterwards, and the host results.
struct Outcome {
  std::vector<std::vector<uint8_t>> arrays;
  std::vector<double> host;
};
// Runs `c` through `k` (a table of `be`, or a decorator of it), its arrays in
// `be`'s memory.
Outcome run_on(const Case& c, ComputeBackend& be, Kernels& k);
// Runs `c` through the CPU reference table on host memory.
Outcome run_reference(const Case& c);
// `got` against `want`: bit for bit when `exact`, else within each checked
// array's tolerance; overwritten arrays hold no NaN the reference lacks.
void expect_match(const Case& c, const Outcome& got, const Outcome& want, bool exact);

}  // namespace loom::exec::kernel_cases
