#include "exec/backend/cpu_kernels.h"

#include <algorithm>
#include <cstring>
#include <vector>

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

void CpuKernels::gemm_16bit_operands(const Gemm& a) {
  std::vector<float> wa, wb;
  Gemm r = a;
  if (a.A16) {
    wa.resize(size_t(a.M * a.K));
    from_16bit({a.A16, wa.data(), a.M * a.K});
    r.A = wa.data();
    r.A16 = nullptr;
  }
  if (a.B16) {
    wb.resize(size_t(a.K * a.N));
    from_16bit({a.B16, wb.data(), a.K * a.N});
    r.B = wb.data();
    r.B16 = nullptr;
  }
  gemm(r);
}

void CpuKernels::grad_pack(const GradPack& a) {
  using namespace grad_format;
  if (a.format == GradFormat::kBf16) {
    uint16_t* y = reinterpret_cast<uint16_t*>(a.y);
    for (int64_t i = 0; i < a.n; ++i) {
      const uint16_t h = to_bf16(a.x[i]);
      std::memcpy(y + i, &h, 2);  // y is bytes: no alignment promised
    }
    return;
  }
  // The largest |x| by its bits: NaN above infinity above every finite value.
  uint32_t amax_bits = 0;
  for (int64_t i = 0; i < a.n; ++i) amax_bits = std::max(amax_bits, bits(a.x[i]) & 0x7fffffffu);
  std::memcpy(a.y, &amax_bits, 4);
  const float amax = from_bits(amax_bits), s = fp8_pack_factor(amax);
  const bool finite = amax_bits <= 0x7f7fffffu;
  uint8_t* q = a.y + 4;
  for (int64_t i = 0; i < a.n; ++i) q[i] = finite ? to_e4m3(a.x[i] * s) : uint8_t(0x7fu);
}

void CpuKernels::grad_unpack(const GradUnpack& a) {
  using namespace grad_format;
  if (a.format == GradFormat::kBf16) {
    for (int64_t i = 0; i < a.n; ++i) {
      uint16_t h;
      std::memcpy(&h, a.x + 2 * i, 2);
      a.y[i] = a.accumulate ? a.y[i] + from_bf16(h) : from_bf16(h);
    }
    return;
  }
  uint32_t amax_bits;
  std::memcpy(&amax_bits, a.x, 4);
  const float s = fp8_unpack_factor(from_bits(amax_bits));
  const uint8_t* q = a.x + 4;
  for (int64_t i = 0; i < a.n; ++i) {
    const float v = from_e4m3(q[i]) * s;
    a.y[i] = a.accumulate ? a.y[i] + v : v;
  }
}

std::unique_ptr<Kernels> make_cpu_kernels() { return std::make_unique<CpuKernels>(); }

}  // namespace loom::exec
