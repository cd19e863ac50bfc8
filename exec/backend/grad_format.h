// The packed formats of the compressed data-parallel gradient reduction
// (`loom plan --grad-reduce`, exec/runtime/grad_compress.h), one definition
// for the CPU kernels and the CUDA kernels (host and device code), so both
// pack bit for bit alike.
//
//   bf16: 2 bytes per element, round to nearest even (NaN stays NaN), as
//         To16bit's bf16.
//   fp8:  a 4-byte header, the block's amax (the largest |x|, as fp32 bits),
//         then one OCP E4M3 byte per element ("e4m3fn": bias 7, no
//         infinities, 0x7f / 0xff NaN, largest finite 448): x * (448 / amax)
//         rounded to nearest even and saturated to +-448. Unpacked as
//         e4m3 x (amax / 448). amax 0 packs zeros; a non-finite amax packs
//         NaN bytes, so a non-finite gradient stays non-finite.
#pragma once

#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define LOOM_HD __host__ __device__ inline
#else
#define LOOM_HD inline
#endif

namespace loom::exec {

enum class GradFormat : uint8_t { kBf16, kFp8 };

// Bytes of `n` packed elements (the fp8 header included).
LOOM_HD int64_t grad_packed_bytes(GradFormat f, int64_t n) { return f == GradFormat::kBf16 ? 2 * n : 4 + n; }

namespace grad_format {

LOOM_HD uint32_t bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
LOOM_HD float from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

LOOM_HD uint16_t to_bf16(float x) {
  uint32_t u = bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
LOOM_HD float from_bf16(uint16_t h) { return from_bits(uint32_t(h) << 16); }

// The largest finite E4M3 value and the scale's numerator.
constexpr float kFp8Max = 448.f;

// E4M3 (e4m3fn) of a float: round to nearest even, saturated to +-448, NaN
// to 0x7f with the sign.
LOOM_HD uint8_t to_e4m3(float x) {
  const uint32_t u = bits(x);
  const uint8_t sign = uint8_t((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint8_t(sign | 0x7fu);
  if (a >= 0x43e00000u) return uint8_t(sign | 0x7eu);  // >= 448 (and inf): saturate
  if (a < 0x3c800000u) {                                 // below 2^-6: subnormal steps of 2^-9
    // a / 2^-9 rounded to nearest even, exactly: the value's mantissa
    // shifted into place (0..8; 8 is the smallest normal, 0x08).
    if (a < 0x3a000000u) return sign;                    // below 2^-11: under a quarter step, to 0
    const int e = int(a >> 23) - 127;                    // -11..-7
    const uint32_t m = (a & 0x7fffffu) | 0x800000u;      // 24-bit significand
    const int shift = 23 - (e + 9);                      // keep e + 9 + 1 bits
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return uint8_t(sign | q);
  }
  // Normal: keep 3 mantissa bits, round to nearest even (a carry may bump the
  // exponent); 464 and above were saturated, and 448 <= |x| < 464 round to 448.
  const uint32_t r = a + 0x7ffffu + ((a >> 20) & 1u);
  const int e = int(r >> 23) - 127 + 7;
  const uint32_t m3 = (r >> 20) & 7u;
  if (e > 15 || (e == 15 && m3 == 7u)) return uint8_t(sign | 0x7eu);
  return uint8_t(sign | uint32_t(e) << 3 | m3);
}

LOOM_HD float from_e4m3(uint8_t b) {
  const uint32_t sign = uint32_t(b & 0x80u) << 24;
  const uint32_t e = (b >> 3) & 0xfu, m = b & 7u;
  if (e == 15 && m == 7) return from_bits(sign | 0x7fc00000u);
  float v;
  if (e == 0) v = float(m) * (1.f / 512.f);  // m x 2^-9, exact
  else v = from_bits(((e - 7 + 127) << 23) | (m << 20));
  return from_bits(bits(v) | sign);
}

// The fp8 block's scale factors from its amax: multiply by `pack` before
// to_e4m3, by `unpack` after from_e4m3.
LOOM_HD float fp8_pack_factor(float amax) { return amax > 0.f ? kFp8Max / amax : 0.f; }
LOOM_HD float fp8_unpack_factor(float amax) { return amax / kFp8Max; }

}  // namespace grad_format
}  // namespace loom::exec
