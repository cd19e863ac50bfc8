// Hardware profile JSON (core/hw_profile.h parse_hw_profile): hwprofiles/*.json
// and what `loom calibrate` writes. Accepted profiles must round-trip through
// hw_profile_to_json; the lookups the simulator makes are exercised.
#include <cmath>

#include "core/hw_profile.h"
#include "tests/fuzz/fuzz_common.h"

using namespace loom;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto hw = parse_hw_profile(text, "fuzz");
  if (!hw.is_ok()) {
    FUZZ_CHECK(!hw.status().message().empty(), "an error without a message");
    return 0;
  }
  const std::string canon = hw_profile_to_json(*hw);
  auto hw2 = parse_hw_profile(canon, "fuzz (canonical)");
  FUZZ_CHECK(hw2.is_ok(), hw2.status().to_string());
  FUZZ_CHECK(hw_profile_to_json(*hw2) == canon, "the canonical form changed in a round trip");
  const AcceleratorSpec& a = hw->accel;
  for (Precision p : {Precision::kFp32, Precision::kBf16, Precision::kFp16, Precision::kFp8}) {
    double peak = a.peak_flops(p);
    FUZZ_CHECK(peak > 0 && std::isfinite(peak), "a parsed profile with no finite peak for a precision");
  }
  for (double flops : {0.0, 1.0, 1e3, 1e9, 1e12, 1e15, 1e20}) {
    double e = a.gemm_efficiency.lookup(flops);
    FUZZ_CHECK(e > 0 && e <= 1.0 + 1e-9, "GEMM efficiency outside (0, 1]: " + std::to_string(e));
    if (!a.attention_efficiency.flops.empty()) {
      double ea = a.attention_efficiency.lookup(flops);
      FUZZ_CHECK(ea > 0 && ea <= 1.0 + 1e-9, "attention efficiency outside (0, 1]: " + std::to_string(ea));
    }
  }
  // Every other attention kernel the profile carries can be put in use and
  // back; the profile with it in use reads back as written.
  for (const auto& [name, k] : a.attention_kernels) {
    HwProfile sel = *hw;
    Status st = select_attention_kernel(&sel, name);
    FUZZ_CHECK(st.is_ok(), st.to_string());
    FUZZ_CHECK(sel.accel.attention_kernel == name, "the selected kernel is not the one in use");
    FUZZ_CHECK(sel.accel.attention_kernels.count(a.attention_kernel) == 1, "the kernel replaced was dropped");
    const double ea = sel.accel.attention_efficiency.lookup(1e9);
    FUZZ_CHECK(ea > 0 && ea <= 1.0 + 1e-9, "selected attention efficiency outside (0, 1]: " + std::to_string(ea));
    auto back = parse_hw_profile(hw_profile_to_json(sel), "fuzz (kernel selected)");
    FUZZ_CHECK(back.is_ok(), back.status().to_string());
    st = select_attention_kernel(&sel, a.attention_kernel);
    FUZZ_CHECK(st.is_ok(), st.to_string());
    FUZZ_CHECK(sel.accel.attention_efficiency.efficiency == a.attention_efficiency.efficiency,
               "selecting the first kernel again did not restore its table");
    FUZZ_CHECK(a.attention_kernel_source.empty() ? hw_profile_to_json(sel) == canon : true,
               "selecting a kernel and back changed the profile");
  }
  // The per-shape grid: the corners around any shape's nearest held shape
  // weigh 1 together, each a measured time that is positive and finite.
  if (!a.gemm_shapes.empty()) {
    const GemmShapeGrid& g = a.gemm_shapes;
    for (double m : {0.0, 1.0, 300.0, 4096.0, 1e5})
      for (double k : {1.0, 700.0, 1e6}) {
        GemmShapeGrid::Corner c[16];
        const int n = g.corners(g.nearest(m, 2 * m + 1, k), c);
        FUZZ_CHECK(n >= 1 && n <= 16, "grid corners: " + std::to_string(n));
        double sum = 0;
        for (int i = 0; i < n; ++i) {
          FUZZ_CHECK(c[i].weight > 0 && c[i].time_s > 0 && std::isfinite(c[i].time_s), "a grid corner's time");
          sum += c[i].weight;
        }
        FUZZ_CHECK(std::fabs(sum - 1) < 1e-9, "grid corner weights sum to " + std::to_string(sum));
      }
  }
  for (double m : {1.0, 100.0, 4096.0}) {
    double w = a.wave_efficiency(m, m);
    FUZZ_CHECK(w > 0 && w <= 1.0 + 1e-9, "wave efficiency outside (0, 1]: " + std::to_string(w));
  }
  for (const auto& [name, t] : hw->node.measured.tables) {
    for (double b : {0.0, 1.0, 4096.0, 1e9}) {
      double ts = t.lookup(b);
      FUZZ_CHECK(ts >= 0 && std::isfinite(ts), "measured collective " + name + " time " + std::to_string(ts));
    }
  }
  return 0;
}
