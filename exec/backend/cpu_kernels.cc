#include "exec/backend/cpu_kernels.h"

#include <cstring>

#include "exec/backend/compute_backend.h"

namespace loom::exec {

void CpuKernels::to_16bit(const To16bit& a) {
  const float* x = a.x;
  uint16_t* y = a.y;
  const int64_t n = a.n;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, &x[i], 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
      y[i] = uint16_t((u >> 16) | 0x40u);
      continue;
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    y[i] = uint16_t(u >> 16);
  }
}

void CpuKernels::from_16bit(const From16bit& a) {
  const uint16_t* x = a.x;
  float* y = a.y;
  const int64_t n = a.n;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = uint32_t(x[i]) << 16;
    std::memcpy(&y[i], &u, 4);
  }
}

std::unique_ptr<Kernels> make_cpu_kernels() { return std::make_unique<CpuKernels>(); }

}  // namespace loom::exec
