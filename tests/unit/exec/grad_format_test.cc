// The compressed gradient reduction's formats (exec/backend/grad_format.h)
// against independent references: every finite E4M3 value enumerated from
// the format's definition (OCP 8-bit floating point, E4M3: bias 7, 3 mantissa
// bits, subnormals m x 2^-9, largest 448, no infinities) and the nearest of
// them found by brute force; the packed blocks through the CPU table.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "exec/backend/compute_backend.h"
#include "exec/backend/grad_format.h"

namespace loom::exec {
namespace {

using namespace grad_format;

// The finite non-negative E4M3 values by byte (0x00..0x7e), from the
// definition, not from the code under test.
std::vector<double> e4m3_values() {
  std::vector<double> v;
  for (int b = 0; b <= 0x7e; ++b) {
    const int e = b >> 3, m = b & 7;
    v.push_back(e == 0 ? m * std::ldexp(1.0, -9) : (1 + m / 8.0) * std::ldexp(1.0, e - 7));
  }
  return v;
}

// Round to nearest, ties to the even byte, saturating at 448: brute force.
uint8_t nearest_e4m3(float x) {
  static const std::vector<double> vals = e4m3_values();
  const double a = std::fabs(double(x));
  int best = 0;
  for (int b = 1; b < int(vals.size()); ++b) {
    const double d = std::fabs(vals[size_t(b)] - a), db = std::fabs(vals[size_t(best)] - a);
    if (d < db || (d == db && (b % 2) == 0)) best = b;
  }
  return uint8_t((std::signbit(x) ? 0x80 : 0) | best);
}

TEST(GradFormat, E4m3DecodesEveryByteByTheDefinition) {
  const std::vector<double> vals = e4m3_values();
  EXPECT_EQ(vals.back(), 448.0);
  for (int b = 0; b <= 0x7e; ++b) {
    EXPECT_EQ(double(from_e4m3(uint8_t(b))), vals[size_t(b)]) << b;
    EXPECT_EQ(double(from_e4m3(uint8_t(b | 0x80))), -vals[size_t(b)]) << b;
    EXPECT_EQ(to_e4m3(float(vals[size_t(b)])), b) << "round trip of byte " << b;
  }
  EXPECT_TRUE(std::isnan(from_e4m3(0x7f)));
  EXPECT_TRUE(std::isnan(from_e4m3(0xff)));
}

TEST(GradFormat, E4m3RoundsToNearestEvenAndSaturates) {
  // Every midpoint between neighbours, and just either side of it.
  const std::vector<double> vals = e4m3_values();
  std::vector<float> xs;
  for (size_t b = 0; b + 1 < vals.size(); ++b) {
    const float mid = float((vals[b] + vals[b + 1]) / 2);
    xs.insert(xs.end(), {mid, std::nextafter(mid, 0.f), std::nextafter(mid, 1e9f), -mid});
  }
  // Random magnitudes over the whole range, the subnormals and below them.
  uint64_t s = 7;
  for (int i = 0; i < 20000; ++i) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    const double u = double(s >> 11) / double(1ULL << 53);
    xs.push_back(float((i % 2 ? -1 : 1) * std::ldexp(1.0, int(u * 24) - 14) * (1 + u)));
  }
  xs.insert(xs.end(), {0.f, -0.f, 448.f, 460.f, 463.99f, 464.f, 470.f, 1e6f, -1e30f, 1e-12f,
                       std::numeric_limits<float>::infinity()});
  for (float x : xs) EXPECT_EQ(int(to_e4m3(x)), int(nearest_e4m3(x))) << x;
  EXPECT_EQ(to_e4m3(std::nanf("")) & 0x7f, 0x7f);
}

TEST(GradFormat, PackedBlocksThroughTheCpuTable) {
  auto be = make_cpu_backend();
  Kernels& k = be->kernels();
  const std::vector<float> x = {0.5f, -3.f, 1.f / 3, 2e-4f, 0.f, 2.9f, -1e-7f};
  const int64_t n = int64_t(x.size());
  // fp8: the header is the amax, each value the nearest E4M3 of x * 448/amax.
  std::vector<uint8_t> p(size_t(grad_packed_bytes(GradFormat::kFp8, n)));
  k.grad_pack({x.data(), p.data(), n, GradFormat::kFp8});
  float amax;
  std::memcpy(&amax, p.data(), 4);
  EXPECT_EQ(amax, 3.f);
  std::vector<float> y(x.size(), 1.f);
  k.grad_unpack({p.data(), y.data(), n, GradFormat::kFp8, /*accumulate=*/true});
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(p[4 + i], nearest_e4m3(x[i] * (448.f / 3.f))) << i;
    EXPECT_EQ(y[i], 1.f + from_e4m3(p[4 + i]) * (3.f / 448.f)) << i;
    // E4M3 keeps 3 mantissa bits: within 1/16 relative, or a subnormal step.
    EXPECT_NEAR(y[i] - 1.f, x[i], std::max(std::fabs(x[i]) / 16, 3.f / 448 * std::ldexp(1.f, -10))) << i;
  }
  EXPECT_EQ(p[4 + 1], 0xfe) << "the amax packs to -448";
  // bf16: round to nearest even, unpacked exactly.
  std::vector<uint8_t> h(size_t(grad_packed_bytes(GradFormat::kBf16, n)));
  k.grad_pack({x.data(), h.data(), n, GradFormat::kBf16});
  k.grad_unpack({h.data(), y.data(), n, GradFormat::kBf16, /*accumulate=*/false});
  for (size_t i = 0; i < x.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &x[i], 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    float want;
    std::memcpy(&want, &u, 4);
    EXPECT_EQ(y[i], want) << i;
  }
  // A non-finite gradient stays non-finite; an all-zero block packs zeros.
  const std::vector<float> bad = {1.f, std::numeric_limits<float>::infinity(), 2.f};
  std::vector<uint8_t> pb(size_t(grad_packed_bytes(GradFormat::kFp8, 3)));
  k.grad_pack({bad.data(), pb.data(), 3, GradFormat::kFp8});
  std::vector<float> yb(3);
  k.grad_unpack({pb.data(), yb.data(), 3, GradFormat::kFp8, false});
  for (float v : yb) EXPECT_FALSE(std::isfinite(v));
  const std::vector<float> zeros(5, 0.f);
  std::vector<uint8_t> pz(size_t(grad_packed_bytes(GradFormat::kFp8, 5)));
  k.grad_pack({zeros.data(), pz.data(), 5, GradFormat::kFp8});
  std::vector<float> yz(5, 7.f);
  k.grad_unpack({pz.data(), yz.data(), 5, GradFormat::kFp8, false});
  for (float v : yz) EXPECT_EQ(v, 0.f);
}

}  // namespace
}  // namespace loom::exec
