// The CPU backend with a kernel table that computes as a GPU's 16-bit path
// does: every GEMM operand rounded to fp16 (IEEE, overflow to inf included)
// or bf16 (round to nearest even), and saved activations held in that
// 16-bit format (to_16bit / from_16bit). Lets the trainer's mixed-precision
// behaviour (loss scaling, 16-bit saved activations and their memory) run
// for real without a GPU.
#pragma once

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "exec/backend/compute_backend.h"
#include "exec/backend/cpu_kernels.h"
#include "exec/backend/grad_format.h"

namespace loom::exec::test_support {

class Emulated16BitKernels final : public CpuKernels {
 public:
  explicit Emulated16BitKernels(Precision p) : p_(p) {
    LOOM_CHECK(p == Precision::kFp16 || p == Precision::kBf16, "emulated 16-bit kernels: fp16 or bf16");
  }
  Precision precision() const override { return p_; }
  void gemm(const Gemm& g) override {
    if (g.A16 || g.B16) return gemm_16bit_operands(g);  // widened exactly, then here again
    auto a = rounded(g.A, g.M * g.K), b = rounded(g.B, g.K * g.N);
    Gemm r = g;
    r.A = a.data();
    r.B = b.data();
    CpuKernels::gemm(r);
  }
  void to_16bit(const To16bit& a) override {
    for (int64_t i = 0; i < a.n; ++i) a.y[i] = encode(a.x[i]);
  }
  void from_16bit(const From16bit& a) override {
    for (int64_t i = 0; i < a.n; ++i) a.y[i] = decode(a.x[i]);
  }

 private:
  uint16_t encode(float x) const {
    if (p_ == Precision::kBf16) return grad_format::to_bf16(x);
    const _Float16 h = static_cast<_Float16>(x);
    uint16_t u;
    std::memcpy(&u, &h, 2);
    return u;
  }
  float decode(uint16_t u) const {
    if (p_ == Precision::kBf16) return grad_format::from_bf16(u);
    _Float16 h;
    std::memcpy(&h, &u, 2);
    return static_cast<float>(h);
  }
  std::vector<float> rounded(const float* x, int64_t n) const {
    std::vector<float> r(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) r[size_t(i)] = decode(encode(x[i]));
    return r;
  }
  Precision p_;
};

// The CPU backend's memory (and its ledger) with that kernel table.
class Emulated16BitBackend : public ComputeBackend {
 public:
  explicit Emulated16BitBackend(Precision p) : k_(p) {}
  std::string name() const override { return std::string("cpu-") + precision_name(k_.precision()) + "-emulated"; }
  bool host_visible() const override { return true; }
  void* allocate(size_t b) override { return cpu_->allocate(b); }
  void* allocate_uninitialized(size_t b) override { return cpu_->allocate_uninitialized(b); }
  void release(void* p, size_t b) override { cpu_->release(p, b); }
  size_t peak_allocated_bytes() const override { return cpu_->peak_allocated_bytes(); }
  MemoryBreakdown peak_memory_breakdown() const override { return cpu_->peak_memory_breakdown(); }
  size_t allocated_bytes() const override { return cpu_->allocated_bytes(); }
  void discard(void* p, size_t b) override { cpu_->discard(p, b); }
  void reclaim(void* p, size_t b) override { cpu_->reclaim(p, b); }
  void copy_to_device(void* d, const void* s, size_t b) override { cpu_->copy_to_device(d, s, b); }
  void copy_to_host(void* d, const void* s, size_t b) override { cpu_->copy_to_host(d, s, b); }
  void copy(void* d, const void* s, size_t b) override { cpu_->copy(d, s, b); }
  void fill_zero(void* p, size_t b) override { cpu_->fill_zero(p, b); }
  void synchronize() override {}
  Kernels& kernels() override { return k_; }

 private:
  std::unique_ptr<ComputeBackend> cpu_ = make_cpu_backend();
  Emulated16BitKernels k_;
};

}  // namespace loom::exec::test_support
