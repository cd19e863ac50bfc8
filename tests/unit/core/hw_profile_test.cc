// HwProfile reader/writer: every shipped profile loads with sources, units
// convert to SI, bad values name the key and its unit, JSON round-trips.
#include "core/cpu_ranks.h"
#include "core/hw_profile.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

namespace loom {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> shipped_profiles() {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(fs::path(LOOM_SOURCE_DIR) / "hwprofiles"))
    if (e.path().extension() == ".json") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

// A small valid profile; tests replace one piece of it to make it invalid.
std::string minimal_profile(const std::string& accel_extra = "", const std::string& memory = "\"memory_gib\": 2") {
  return R"({
  "name": "mini", "nccl_version": "2.30",
  "accelerator": {"name": "X", "sm_arch": 90, "peak_bf16_tflops": 100, "peak_fp32_tflops": 10, )" +
         memory + accel_extra + R"(,
                  "memory_bw_gb_per_s": 1000, "memory_bw_efficiency": 0.5,
                  "gemm_efficiency": [{"gflop": 1, "efficiency": 0.2}, {"gflop": 100, "efficiency": 0.8}],
                  "source": "test"},
  "node": {"devices_per_node": 4, "fabric": "nvswitch", "intra_bw_gb_per_s": 200,
           "intra_ring_busbw_gb_per_s": 150, "intra_latency_us": 3, "source": "test"},
  "network": {"nics_per_node": 2, "nic_bw_gbit_per_s": 100, "latency_us": 5, "topology": "fat-tree",
              "source": "test"}
})";
}

std::string replace(std::string s, const std::string& from, const std::string& to) {
  size_t p = s.find(from);
  EXPECT_NE(p, std::string::npos) << from;
  if (p != std::string::npos) s.replace(p, from.size(), to);
  return s;
}

void expect_error(const std::string& text, StatusCode code, const std::vector<std::string>& must_contain) {
  auto r = parse_hw_profile(text, "t");
  ASSERT_FALSE(r.is_ok()) << "expected an error mentioning " << must_contain.front();
  EXPECT_EQ(r.status().code(), code) << r.status().to_string();
  for (const auto& s : must_contain) EXPECT_NE(r.status().message().find(s), std::string::npos) << r.status().to_string();
}

TEST(HwProfile, EveryShippedProfileLoadsWithSources) {
  auto files = shipped_profiles();
  ASSERT_GE(files.size(), 6u);
  for (const auto& f : files) {
    SCOPED_TRACE(f.string());
    auto r = load_hw_profile(f.string());
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    const HwProfile& hw = *r;
    EXPECT_EQ(hw.name, f.stem().string());
    EXPECT_FALSE(hw.description.empty());
    EXPECT_FALSE(hw.nccl_version.empty());
    EXPECT_FALSE(hw.accel.source.empty());
    EXPECT_FALSE(hw.node.source.empty());
    EXPECT_FALSE(hw.net.source.empty());
    EXPECT_GT(hw.accel.memory_bytes, 1e9);
    EXPECT_GT(hw.accel.memory_bw_bytes_per_s, 1e9);
    EXPECT_LE(hw.node.intra_ring_busbw_bytes_per_s, hw.node.intra_bw_bytes_per_s);
    ASSERT_FALSE(hw.accel.gemm_efficiency.flops.empty());
    for (double e : hw.accel.gemm_efficiency.efficiency) {
      EXPECT_GT(e, 0);
      EXPECT_LE(e, 1);
    }
    if (!hw.is_cpu()) {
      EXPECT_GT(hw.accel.peak_bf16_flops, 5 * hw.accel.peak_fp32_flops) << "tensor cores beat CUDA cores";
      // GEMMs of ~1 GFLOP run far below peak; big ones reach a measured plateau.
      EXPECT_LT(hw.accel.gemm_efficiency.lookup(1e9), 0.5);
      EXPECT_GT(hw.accel.gemm_efficiency.lookup(1e13), 0.7);
      EXPECT_LT(hw.accel.gemm_efficiency.lookup(1e13), 0.9);
    }
  }
}

TEST(HwProfile, LoadsByBareNameAndReportsMissing) {
  auto r = load_hw_profile("dgx-h100");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->name, "dgx-h100");
  auto missing = load_hw_profile("no-such-cluster");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

// Datasheet facts survive the unit conversions.
TEST(HwProfile, DatasheetNumbersInSiUnits) {
  auto h100 = load_hw_profile("dgx-h100");
  ASSERT_TRUE(h100.is_ok()) << h100.status().to_string();
  EXPECT_DOUBLE_EQ(h100->accel.peak_flops(Precision::kBf16), 989e12);
  EXPECT_DOUBLE_EQ(h100->accel.peak_flops(Precision::kFp8), 1979e12);
  EXPECT_DOUBLE_EQ(h100->accel.peak_flops(Precision::kFp32), 67e12);
  EXPECT_DOUBLE_EQ(h100->accel.memory_bw_bytes_per_s, 3350e9);
  EXPECT_NEAR(h100->accel.memory_bytes, 81559.0 * 1024 * 1024, 0.01 * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(h100->node.intra_bw_bytes_per_s, 450e9);
  EXPECT_DOUBLE_EQ(h100->node.intra_ring_busbw_bytes_per_s, 370e9);
  EXPECT_TRUE(h100->node.nvls);
  EXPECT_DOUBLE_EQ(h100->net.nic_bw_bytes_per_s, 50e9);  // 400 Gbit/s
  EXPECT_DOUBLE_EQ(h100->net.node_bw_bytes_per_s(), 400e9);

  auto a100 = load_hw_profile("dgx-a100-80gb");
  ASSERT_TRUE(a100.is_ok()) << a100.status().to_string();
  EXPECT_DOUBLE_EQ(a100->accel.memory_bytes, 80.0 * 1024 * 1024 * 1024);
  EXPECT_FALSE(a100->accel.supports(Precision::kFp8));
  EXPECT_DOUBLE_EQ(a100->accel.peak_flops(Precision::kFp8), 312e12) << "no fp8 units: runs at the bf16 rate";
  EXPECT_FALSE(a100->node.nvls);
  EXPECT_EQ(a100->net.cpu_vendor, "amd");

  auto cpu = load_hw_profile("cpu-local");
  ASSERT_TRUE(cpu.is_ok()) << cpu.status().to_string();
  EXPECT_TRUE(cpu->is_cpu());
  EXPECT_EQ(cpu->node.fabric, "shm");
  EXPECT_FALSE(cpu->accel.supports(Precision::kBf16));
  EXPECT_DOUBLE_EQ(cpu->accel.peak_flops(Precision::kBf16), cpu->accel.peak_fp32_flops);
}

TEST(HwProfile, ConvertsEveryUnit) {
  auto r = parse_hw_profile(minimal_profile(", \"peak_fp8_tflops\": 200"), "mini");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_DOUBLE_EQ(r->accel.memory_bytes, 2.0 * 1073741824.0);
  EXPECT_DOUBLE_EQ(r->accel.peak_bf16_flops, 100e12);
  EXPECT_DOUBLE_EQ(r->accel.peak_fp16_flops, 100e12) << "fp16 defaults to the bf16 rate";
  EXPECT_DOUBLE_EQ(r->accel.peak_fp8_flops, 200e12);
  EXPECT_DOUBLE_EQ(r->accel.gemm_efficiency.flops[1], 100e9);
  EXPECT_DOUBLE_EQ(r->node.intra_latency_s, 3e-6);
  EXPECT_DOUBLE_EQ(r->net.nic_bw_bytes_per_s, 12.5e9);
  EXPECT_DOUBLE_EQ(r->net.latency_s, 5e-6);
  EXPECT_EQ(r->net.cpu_vendor, "intel");
  EXPECT_FALSE(r->node.nvls);
  EXPECT_EQ(r->node.nvlink_domain_size, 0);
}

TEST(HwProfile, BadValuesNameTheKeyAndUnit) {
  const std::string ok = minimal_profile();
  expect_error(minimal_profile("", "\"memory_gib\": -80"), StatusCode::kInvalidArgument,
               {"accelerator.memory_gib", "GiB"});
  expect_error(minimal_profile("", "\"memory_gib\": \"80\""), StatusCode::kInvalidArgument,
               {"accelerator.memory_gib", "number"});
  expect_error(replace(ok, "\"peak_bf16_tflops\": 100,", ""), StatusCode::kInvalidArgument,
               {"peak_bf16_tflops", "missing", "TFLOP/s"});
  expect_error(replace(ok, "\"nic_bw_gbit_per_s\": 100", "\"nic_bw_gbit_per_s\": 0"), StatusCode::kInvalidArgument,
               {"network.nic_bw_gbit_per_s", "Gbit/s"});
  expect_error(replace(ok, "\"intra_latency_us\": 3", "\"intra_latency_us\": -1"), StatusCode::kInvalidArgument,
               {"node.intra_latency_us", "microseconds"});
  expect_error(replace(ok, "\"memory_bw_efficiency\": 0.5", "\"memory_bw_efficiency\": 1.5"),
               StatusCode::kInvalidArgument, {"memory_bw_efficiency", "(0, 1]"});
  expect_error(replace(ok, "\"fabric\": \"nvswitch\"", "\"fabric\": \"infinity\""), StatusCode::kInvalidArgument,
               {"node.fabric", "nvswitch|nvlink|pcie|shm"});
  expect_error(replace(ok, "\"intra_ring_busbw_gb_per_s\": 150", "\"intra_ring_busbw_gb_per_s\": 250"),
               StatusCode::kInvalidArgument, {"intra_ring_busbw_gb_per_s", "exceeds"});
  expect_error(replace(ok, "{\"gflop\": 100,", "{\"gflop\": 0.5,"), StatusCode::kInvalidArgument,
               {"gemm_efficiency[1].gflop", "sort"});
  expect_error(replace(ok, "\"efficiency\": 0.8", "\"efficiency\": 0"), StatusCode::kInvalidArgument,
               {"gemm_efficiency[1].efficiency"});
  expect_error(replace(ok, "\"devices_per_node\": 4", "\"devices_per_node\": 4, \"nvlink_domain_size\": 6"),
               StatusCode::kInvalidArgument, {"nvlink_domain_size", "multiple"});
  expect_error(replace(ok, "\"topology\": \"fat-tree\",\n              \"source\": \"test\"", "\"topology\": \"x\""),
               StatusCode::kInvalidArgument, {"network.source", "missing"});
  expect_error(replace(ok, "\"sm_arch\": 90", "\"sm_arch\": 9.5"), StatusCode::kInvalidArgument, {"sm_arch"});
  expect_error(replace(ok, "\"nccl_version\": \"2.30\",", ""), StatusCode::kInvalidArgument, {"nccl_version"});
  expect_error(minimal_profile(", \"fp8_gemm_best_efficiency\": 0.7"), StatusCode::kInvalidArgument,
               {"fp8_gemm_best_efficiency", "peak_fp8_tflops"});
  expect_error(minimal_profile(", \"peak_fp8_tflops\": 200, \"fp8_gemm_best_efficiency\": 1.2"),
               StatusCode::kInvalidArgument, {"fp8_gemm_best_efficiency", "(0, 1]"});
  std::string no_net = ok.substr(0, ok.find(",\n  \"network\"")) + "\n}";
  expect_error(no_net, StatusCode::kInvalidArgument, {"network", "missing"});
  // The error names the profile it came from.
  expect_error(minimal_profile("", "\"memory_gib\": -1"), StatusCode::kInvalidArgument, {"hwprofile t"});
}

TEST(HwProfile, MalformedJsonGivesLineAndColumn) {
  // Line 3 lacks the comma after "sm_arch": 90.
  std::string text = "{\n  \"name\": \"x\",\n  \"accelerator\": {\"sm_arch\": 90 \"name\": \"y\"}\n}\n";
  expect_error(text, StatusCode::kParseError, {"line 3", "column"});
}

TEST(HwProfile, UnknownKeysAreIgnored) {
  std::string text = replace(minimal_profile(), "\"name\": \"mini\",", "\"name\": \"mini\", \"owner\": \"ops\",");
  EXPECT_TRUE(parse_hw_profile(text, "mini").is_ok());
}

void expect_same(const HwProfile& a, const HwProfile& b) {
  auto near = [](double x, double y) { EXPECT_NEAR(x, y, 1e-12 * std::max(std::fabs(x), 1.0)); };
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.description, b.description);
  EXPECT_EQ(a.nccl_version, b.nccl_version);
  EXPECT_EQ(a.accel.name, b.accel.name);
  EXPECT_EQ(a.accel.sm_arch, b.accel.sm_arch);
  near(a.accel.peak_fp32_flops, b.accel.peak_fp32_flops);
  near(a.accel.peak_bf16_flops, b.accel.peak_bf16_flops);
  near(a.accel.peak_fp16_flops, b.accel.peak_fp16_flops);
  near(a.accel.peak_fp8_flops, b.accel.peak_fp8_flops);
  near(a.accel.sustained_gemm_bf16_flops, b.accel.sustained_gemm_bf16_flops);
  near(a.accel.sustained_gemm_fp8_flops, b.accel.sustained_gemm_fp8_flops);
  near(a.accel.memory_bytes, b.accel.memory_bytes);
  near(a.accel.memory_bw_bytes_per_s, b.accel.memory_bw_bytes_per_s);
  near(a.accel.memory_bw_efficiency, b.accel.memory_bw_efficiency);
  ASSERT_EQ(a.accel.gemm_efficiency.flops.size(), b.accel.gemm_efficiency.flops.size());
  for (size_t i = 0; i < a.accel.gemm_efficiency.flops.size(); ++i) {
    near(a.accel.gemm_efficiency.flops[i], b.accel.gemm_efficiency.flops[i]);
    near(a.accel.gemm_efficiency.efficiency[i], b.accel.gemm_efficiency.efficiency[i]);
  }
  const GemmShapeGrid &ga = a.accel.gemm_shapes, &gb = b.accel.gemm_shapes;
  EXPECT_EQ(ga.sides, gb.sides);
  EXPECT_EQ(ga.batches, gb.batches);
  ASSERT_EQ(ga.flops_per_s.size(), gb.flops_per_s.size());
  for (size_t i = 0; i < ga.flops_per_s.size(); ++i) near(ga.flops_per_s[i], gb.flops_per_s[i]);
  near(ga.measured_peak_flops, gb.measured_peak_flops);
  EXPECT_EQ(ga.source, gb.source);
  EXPECT_EQ(a.accel.source, b.accel.source);
  EXPECT_EQ(a.node.devices_per_node, b.node.devices_per_node);
  EXPECT_EQ(a.node.fabric, b.node.fabric);
  near(a.node.intra_bw_bytes_per_s, b.node.intra_bw_bytes_per_s);
  near(a.node.intra_ring_busbw_bytes_per_s, b.node.intra_ring_busbw_bytes_per_s);
  near(a.node.intra_latency_s, b.node.intra_latency_s);
  EXPECT_EQ(a.node.nvls, b.node.nvls);
  EXPECT_EQ(a.node.nvlink_domain_size, b.node.nvlink_domain_size);
  near(a.node.pcie_bw_bytes_per_s, b.node.pcie_bw_bytes_per_s);
  EXPECT_EQ(a.node.nccl_p2p_channels_per_peer, b.node.nccl_p2p_channels_per_peer);
  EXPECT_EQ(a.node.source, b.node.source);
  EXPECT_EQ(a.net.nics_per_node, b.net.nics_per_node);
  near(a.net.nic_bw_bytes_per_s, b.net.nic_bw_bytes_per_s);
  near(a.net.latency_s, b.net.latency_s);
  EXPECT_EQ(a.net.topology, b.net.topology);
  EXPECT_EQ(a.net.cpu_vendor, b.net.cpu_vendor);
  EXPECT_EQ(a.net.source, b.net.source);
}

// FP8 attention's measured speedup over the 16-bit kernel: read back from a
// plan's embedded profile, interpolated in log(sequence) between measured
// lengths (at 2896, halfway between 2048 and 4096 in log: the two ratios'
// mean) and held at the ends; refused without an FP8 rate or a measured
// attention table, unsorted, or ragged.
TEST(HwProfile, Fp8AttentionSpeedupParsesInterpolatesAndRoundTrips) {
  const std::string table = R"(, "peak_fp8_tflops": 200, "attention_efficiency": [{"gflop": 1, "efficiency": 0.5}])";
  const std::string speedup =
      R"(, "fp8_attention_speedup": {"seq": [2048, 4096], "forward": [1.4, 1.6], "backward": [1.0, 0.8], "source": "t"})";
  auto r = parse_hw_profile(minimal_profile(table + speedup), "t");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const auto& f = r->accel.fp8_attention_speedup;
  EXPECT_DOUBLE_EQ(f.forward_at(1024), 1.4);
  EXPECT_DOUBLE_EQ(f.forward_at(4096), 1.6);
  EXPECT_DOUBLE_EQ(f.backward_at(65536), 0.8);
  EXPECT_NEAR(f.forward_at(2048 * std::sqrt(2.0)), 1.5, 1e-12);
  EXPECT_NEAR(f.backward_at(2048 * std::sqrt(2.0)), 0.9, 1e-12);
  auto back = parse_hw_profile(hw_profile_to_json(*r), "t");
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->accel.fp8_attention_speedup.seq, f.seq);
  EXPECT_EQ(back->accel.fp8_attention_speedup.forward, f.forward);
  EXPECT_EQ(back->accel.fp8_attention_speedup.backward, f.backward);
  EXPECT_EQ(back->accel.fp8_attention_speedup_source, "t");
  auto plain = parse_hw_profile(minimal_profile(table), "t");
  ASSERT_TRUE(plain.is_ok());
  EXPECT_TRUE(plain->accel.fp8_attention_speedup.empty());
  EXPECT_EQ(hw_profile_to_json(*plain).find("fp8_attention_speedup"), std::string::npos);
  expect_error(minimal_profile(R"(, "attention_efficiency": [{"gflop": 1, "efficiency": 0.5}])" + speedup),
               StatusCode::kInvalidArgument, {"fp8_attention_speedup", "peak_fp8_tflops"});
  expect_error(minimal_profile(R"(, "peak_fp8_tflops": 200)" + speedup), StatusCode::kInvalidArgument,
               {"fp8_attention_speedup", "attention_efficiency"});
  expect_error(minimal_profile(table + R"(, "fp8_attention_speedup": {"seq": [4096, 2048], "forward": [1, 1], "backward": [1, 1], "source": "t"})"),
               StatusCode::kInvalidArgument, {"fp8_attention_speedup.seq", "ascending"});
  expect_error(minimal_profile(table + R"(, "fp8_attention_speedup": {"seq": [2048, 4096], "forward": [1], "backward": [1, 1], "source": "t"})"),
               StatusCode::kInvalidArgument, {"fp8_attention_speedup", "one ratio"});
  expect_error(minimal_profile(table + R"(, "fp8_attention_speedup": {"seq": [2048], "forward": [0], "backward": [1], "source": "t"})"),
               StatusCode::kInvalidArgument, {"fp8_attention_speedup.forward", "positive"});
  expect_error(minimal_profile(table + R"(, "fp8_attention_speedup": {"seq": [2048], "forward": [1], "backward": [1]})"),
               StatusCode::kInvalidArgument, {"fp8_attention_speedup"});
  expect_error(minimal_profile(table + R"(, "fp8_attention_speedup": {"seq": [2048], "forward": [1], "backward": [1], "fwd": 1, "source": "t"})"),
               StatusCode::kInvalidArgument, {"fp8_attention_speedup", "unknown key"});
}

TEST(HwProfile, MeasuredKernelTablesParseCheckAndRoundTrip) {
  const std::string extra = R"(, "optimizer_bw_efficiency": 0.25, "attention_backward_ratio": 1.3, "discard_gb_per_s": 3.5,
      "sustained_attention_ratio": 0.85, "wgrad_accumulate_exposed": 0,
      "attention_efficiency": [{"gflop": 0.001, "efficiency": 0.1}, {"gflop": 0.1, "efficiency": 0.4}])";
  auto r = parse_hw_profile(minimal_profile(extra), "t");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_DOUBLE_EQ(r->accel.optimizer_bw_efficiency, 0.25);
  ASSERT_EQ(r->accel.attention_efficiency.flops.size(), 2u);
  EXPECT_DOUBLE_EQ(r->accel.attention_efficiency.flops[1], 1e8);
  auto back = parse_hw_profile(hw_profile_to_json(*r), "t");
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_DOUBLE_EQ(back->accel.optimizer_bw_efficiency, 0.25);
  EXPECT_DOUBLE_EQ(back->accel.attention_backward_ratio, 1.3);
  EXPECT_DOUBLE_EQ(back->accel.discard_bytes_per_s, 3.5e9);
  EXPECT_DOUBLE_EQ(back->accel.sustained_attention_ratio, 0.85);
  // A measured share of 0 (cuBLAS hides the main gradient's read and write)
  // is a measurement, kept apart from "not measured".
  EXPECT_EQ(back->accel.wgrad_accumulate_exposed, 0);
  EXPECT_EQ(back->accel.wgrad_accumulate_share(), 0);
  EXPECT_EQ(back->accel.attention_efficiency.efficiency, r->accel.attention_efficiency.efficiency);
  // Absent: no table, optimizer at the memory efficiency (0 = unset).
  auto plain = parse_hw_profile(minimal_profile(), "t");
  ASSERT_TRUE(plain.is_ok());
  EXPECT_TRUE(plain->accel.attention_efficiency.flops.empty());
  EXPECT_EQ(plain->accel.optimizer_bw_efficiency, 0);
  EXPECT_EQ(plain->accel.attention_backward_ratio, 0);
  EXPECT_EQ(plain->accel.discard_bytes_per_s, 0);
  EXPECT_EQ(plain->accel.sustained_attention_share(), 1.0);
  EXPECT_EQ(plain->accel.wgrad_accumulate_share(), 1.0);
  EXPECT_EQ(hw_profile_to_json(*plain).find("wgrad_accumulate_exposed"), std::string::npos);
  expect_error(minimal_profile(R"(, "wgrad_accumulate_exposed": 1.5)"), StatusCode::kInvalidArgument,
               {"wgrad_accumulate_exposed", "[0, 1]"});
  expect_error(minimal_profile(R"(, "wgrad_accumulate_exposed": "all")"), StatusCode::kInvalidArgument,
               {"wgrad_accumulate_exposed"});
  // The ratio is a measured fraction of a measured table.
  const std::string table = R"(, "attention_efficiency": [{"gflop": 1, "efficiency": 0.5}])";
  expect_error(minimal_profile(table + R"(, "sustained_attention_ratio": 1.2)"), StatusCode::kInvalidArgument,
               {"sustained_attention_ratio", "(0, 1]"});
  expect_error(minimal_profile(table + R"(, "sustained_attention_ratio": 0)"), StatusCode::kInvalidArgument,
               {"sustained_attention_ratio"});
  expect_error(minimal_profile(R"(, "sustained_attention_ratio": 0.9)"), StatusCode::kInvalidArgument,
               {"sustained_attention_ratio", "attention_efficiency"});
  expect_error(minimal_profile(R"(, "discard_gb_per_s": -3)"), StatusCode::kInvalidArgument, {"discard_gb_per_s"});
  expect_error(minimal_profile(R"(, "attention_backward_ratio": -1)"), StatusCode::kInvalidArgument,
               {"attention_backward_ratio", "backward / forward"});
  expect_error(minimal_profile(R"(, "optimizer_bw_efficiency": 2)"), StatusCode::kInvalidArgument,
               {"optimizer_bw_efficiency", "(0, 1]"});
  expect_error(minimal_profile(R"(, "attention_efficiency": [{"gflop": 1, "efficiency": 0.1}, {"gflop": 0.5, "efficiency": 0.2}])"),
               StatusCode::kInvalidArgument, {"attention_efficiency[1].gflop", "sort"});
  // Past 1e9 in its unit a quantity overflows once converted (1e300 GiB to
  // bytes: infinite memory, a profile that fits anything and cannot be
  // written back): refused.
  expect_error(minimal_profile(R"(, "discard_gb_per_s": 1e300)"), StatusCode::kInvalidArgument,
               {"discard_gb_per_s", "out of range"});
}

TEST(HwProfile, SustainedGemmRatesParseCheckAndRoundTrip) {
  auto r = parse_hw_profile(minimal_profile(R"(, "peak_fp8_tflops": 200, "sustained_gemm_tflops": {"bf16": 60, "fp8": 150})"), "t");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_DOUBLE_EQ(r->accel.sustained_gemm_efficiency(Precision::kBf16), 0.6);
  EXPECT_DOUBLE_EQ(r->accel.sustained_gemm_efficiency(Precision::kFp16), 0.6);  // same tensor rate
  EXPECT_DOUBLE_EQ(r->accel.sustained_gemm_efficiency(Precision::kFp8), 0.75);
  EXPECT_DOUBLE_EQ(r->accel.sustained_gemm_efficiency(Precision::kFp32), 1.0);  // CUDA cores: no figure
  auto back = parse_hw_profile(hw_profile_to_json(*r), "t");
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_DOUBLE_EQ(back->accel.sustained_gemm_bf16_flops, 60e12);
  EXPECT_DOUBLE_EQ(back->accel.sustained_gemm_fp8_flops, 150e12);
  auto plain = parse_hw_profile(minimal_profile(), "t");
  ASSERT_TRUE(plain.is_ok());
  EXPECT_DOUBLE_EQ(plain->accel.sustained_gemm_efficiency(Precision::kBf16), 1.0);
  expect_error(minimal_profile(R"(, "sustained_gemm_tflops": {"bf16": 120})"), StatusCode::kInvalidArgument,
               {"sustained_gemm_tflops.bf16", "above peak_bf16_tflops"});
  expect_error(minimal_profile(R"(, "sustained_gemm_tflops": {"fp8": 50})"), StatusCode::kInvalidArgument,
               {"sustained_gemm_tflops.fp8", "peak_fp8_tflops"});
  expect_error(minimal_profile(R"(, "sustained_gemm_tflops": {"fp16": 50})"), StatusCode::kInvalidArgument,
               {"sustained_gemm_tflops", "unknown key 'fp16'"});
  expect_error(minimal_profile(R"(, "sustained_gemm_tflops": 50)"), StatusCode::kInvalidArgument,
               {"sustained_gemm_tflops", "must be an object"});
  expect_error(minimal_profile(R"(, "sustained_gemm_tflops": {"bf16": -5})"), StatusCode::kInvalidArgument,
               {"sustained_gemm_tflops.bf16"});
}

TEST(HwProfile, GemmForwardSharesParseCheckAndRoundTrip) {
  const std::string shared = R"(, "head_gemm_efficiency": [{"gflop": 0.1, "efficiency": 0.5, "forward_share": 0.4},
      {"gflop": 10, "efficiency": 0.6, "forward_share": 0.3}])";
  auto r = parse_hw_profile(minimal_profile(shared), "t");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const GemmEfficiencyTable& t = r->accel.head_gemm_efficiency;
  ASSERT_EQ(t.forward_share.size(), 2u);
  // Linear in log(flops): 1 GFLOP is halfway between 0.1 and 10 GFLOP.
  EXPECT_NEAR(t.forward_share_at(1e9), 0.35, 1e-12);
  EXPECT_DOUBLE_EQ(t.forward_share_at(1e3), 0.4);
  EXPECT_DOUBLE_EQ(t.forward_share_at(1e15), 0.3);
  EXPECT_DOUBLE_EQ(r->accel.gemm_efficiency.forward_share_at(1e9), 1.0 / 3.0);  // none measured
  auto back = parse_hw_profile(hw_profile_to_json(*r), "t");
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->accel.head_gemm_efficiency.forward_share, t.forward_share);
  EXPECT_TRUE(back->accel.gemm_efficiency.forward_share.empty());
  expect_error(minimal_profile(R"(, "head_gemm_efficiency": [{"gflop": 0.1, "efficiency": 0.5, "forward_share": 0.4},
      {"gflop": 10, "efficiency": 0.6}])"),
               StatusCode::kInvalidArgument, {"head_gemm_efficiency[1]", "every point", "or on none"});
  expect_error(minimal_profile(R"(, "head_gemm_efficiency": [{"gflop": 0.1, "efficiency": 0.5, "forward_share": 1}])"),
               StatusCode::kInvalidArgument, {"forward_share", "strictly between 0 and 1"});
}

TEST(HwProfile, MeasuredCollectivesParseCheckAndRoundTrip) {
  const std::string node = R"("intra_latency_us": 3, "source": "test"})";
  auto with = [&](const std::string& mc) {
    return replace(minimal_profile(), node, R"("intra_latency_us": 3, "measured_collectives": )" + mc +
                                                R"(, "source": "test"})");
  };
  auto r = parse_hw_profile(with(R"({"ranks": 2, "all_reduce": [{"bytes": 4096, "time_us": 10},
      {"bytes": 65536, "time_us": 40}], "send_recv": [{"bytes": 4096, "time_us": 3}]})"), "t");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->node.measured.ranks, 2);
  const CommTimeTable* ar = r->node.measured.find("all_reduce");
  ASSERT_NE(ar, nullptr);
  EXPECT_DOUBLE_EQ(ar->time_s[1], 40e-6);
  EXPECT_DOUBLE_EQ(ar->lookup(65536), 40e-6);
  EXPECT_EQ(r->node.measured.find("all_gather"), nullptr);
  auto back = parse_hw_profile(hw_profile_to_json(*r), "t");
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->node.measured.find("send_recv")->bytes, r->node.measured.find("send_recv")->bytes);
  EXPECT_EQ(back->node.measured.find("all_reduce")->time_s, ar->time_s);
  expect_error(with(R"({"ranks": 2, "all_reduce": [{"bytes": 4096, "time_us": 10}, {"bytes": 1024, "time_us": 40}]})"),
               StatusCode::kInvalidArgument, {"measured_collectives.all_reduce[1].bytes", "sort"});
  expect_error(with(R"({"ranks": 2, "all_reduce": [{"bytes": 4096, "time_us": -1}]})"), StatusCode::kInvalidArgument,
               {"all_reduce[0].time_us"});
  expect_error(with(R"({"ranks": 1, "all_reduce": [{"bytes": 4096, "time_us": 1}]})"), StatusCode::kInvalidArgument,
               {"measured_collectives.ranks"});
  expect_error(with(R"({"ranks": 2})"), StatusCode::kInvalidArgument, {"measured_collectives", "no collective"});
}

TEST(HwProfile, JsonRoundTrips) {
  for (const auto& f : shipped_profiles()) {
    SCOPED_TRACE(f.string());
    auto first = load_hw_profile(f.string());
    ASSERT_TRUE(first.is_ok()) << first.status().to_string();
    std::string text = hw_profile_to_json(*first);
    auto second = parse_hw_profile(text, first->name);
    ASSERT_TRUE(second.is_ok()) << second.status().to_string() << "\n" << text;
    expect_same(*first, *second);
    EXPECT_EQ(hw_profile_to_json(*second), text) << "writing is deterministic";
  }
}

TEST(GemmEfficiencyTable, InterpolatesInLogFlopsAndClamps) {
  GemmEfficiencyTable t;
  t.flops = {1e9, 1e11, 1e12};
  t.efficiency = {0.2, 0.6, 0.8};
  EXPECT_DOUBLE_EQ(t.lookup(1e6), 0.2);
  EXPECT_DOUBLE_EQ(t.lookup(0), 0.2);
  EXPECT_DOUBLE_EQ(t.lookup(1e9), 0.2);
  EXPECT_DOUBLE_EQ(t.lookup(1e11), 0.6);
  EXPECT_NEAR(t.lookup(1e10), 0.4, 1e-12) << "1e10 is halfway between 1e9 and 1e11 in log";
  EXPECT_NEAR(t.lookup(std::sqrt(1e11 * 1e12)), 0.7, 1e-12);
  EXPECT_DOUBLE_EQ(t.lookup(1e15), 0.8);
  double prev = 0;
  for (double f = 1e8; f < 1e13; f *= 1.3) {
    EXPECT_GE(t.lookup(f), prev);
    prev = t.lookup(f);
  }
  EXPECT_DOUBLE_EQ(GemmEfficiencyTable{}.lookup(1e12), 1.0) << "no table: no derating";
}

TEST(Precision, NamesRoundTrip) {
  for (Precision p : {Precision::kFp32, Precision::kBf16, Precision::kFp16, Precision::kFp8}) {
    auto r = parse_precision(precision_name(p));
    ASSERT_TRUE(r.is_ok());
    EXPECT_EQ(*r, p);
  }
  auto bad = parse_precision("tf32");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("fp32|bf16|fp16|fp8"), std::string::npos);
}

// `loom plan --hw cpu-local`: the measured host (1 rank on all its cores)
// shared out among the ranks `loom execute` launches there, each with its
// default max(1, cores / ranks) threads (hand-worked: a 2-core host measured
// at 200 GFLOP/s, 40 GB/s and 16 GiB).
TEST(CpuRanks, TheHostIsSharedOutAsTheExecutorSharesItsCores) {
  HwProfile host = *load_hw_profile("cpu-local");
  host.accel.peak_fp32_flops = 200e9;
  host.accel.memory_bw_bytes_per_s = 40e9;
  host.accel.memory_bytes = 16.0 * (1ull << 30);
  host.accel.cpu_threads = 2;
  host.accel.xent_fwd_ns_per_logit = 1;
  host.accel.xent_bwd_ns_per_logit = 2;
  const NodeSpec shm = host.node;
  struct Case {
    int ranks;
    double gflops, bw_gb, mem_gib, threads;
  } cases[] = {
      {1, 200, 40, 16, 2},            // one rank, both cores
      {2, 100, 20, 8, 1},             // a core each
      {3, 200.0 / 3, 40.0 / 3, 16.0 / 3, 2.0 / 3},  // one thread each on 2/3 of a core
      {4, 50, 10, 4, 0.5},            // oversubscribed: half a core each
  };
  for (const Case& c : cases) {
    HwProfile p = *cpu_local_for_ranks(host, 2, c.ranks, shm);
    EXPECT_EQ(p.name, "cpu-local");
    EXPECT_NEAR(p.accel.peak_fp32_flops, c.gflops * 1e9, 1e3) << c.ranks;
    EXPECT_NEAR(p.accel.memory_bw_bytes_per_s, c.bw_gb * 1e9, 1e3) << c.ranks;
    EXPECT_NEAR(p.accel.memory_bytes, c.mem_gib * (1ull << 30), 1e3) << c.ranks;
    EXPECT_NEAR(p.accel.cpu_threads, c.threads, 1e-12) << c.ranks;
    EXPECT_NEAR(p.accel.xent_fwd_ns_per_logit, 200 / c.gflops, 1e-12) << c.ranks;  // slower by the share
    EXPECT_NEAR(p.accel.xent_bwd_ns_per_logit, 2 * 200 / c.gflops, 1e-12) << c.ranks;
    EXPECT_EQ(p.node.devices_per_node, c.ranks);  // every rank on this host
    // Per thread, the peak is the host's per core: what MFU divides by.
    EXPECT_NEAR(p.accel.peak_fp32_flops / p.accel.cpu_threads, 100e9, 1e3) << c.ranks;
    // The result is a profile like any other.
    EXPECT_TRUE(parse_hw_profile(hw_profile_to_json(p), "cpu-local").is_ok()) << c.ranks;
  }
  EXPECT_FALSE(cpu_local_for_ranks(host, 2, 0, shm).is_ok());
}

// A plan embeds its profile with a hash checked when the plan is read: the
// profile's JSON must read back to the same JSON. A computed profile (a host
// shared among 3 or 7 ranks) may not, by an ulp of a unit conversion;
// canonical_hw_profile makes it.
TEST(HwProfile, CanonicalProfilesReadBackExactly) {
  HwProfile host = *load_hw_profile("cpu-local");
  host.accel.peak_fp32_flops = 287.98765e9;
  host.accel.memory_bw_bytes_per_s = 41.123456789e9;
  host.accel.xent_fwd_ns_per_logit = 3.3333333333;
  host.accel.xent_bwd_ns_per_logit = 1.7;
  for (int ranks = 1; ranks <= 7; ++ranks) {
    HwProfile c = canonical_hw_profile(*cpu_local_for_ranks(host, 2, ranks, host.node));
    const std::string text = hw_profile_to_json(c);
    EXPECT_EQ(hw_profile_to_json(*parse_hw_profile(text, "cpu-local")), text) << ranks;
  }
}

TEST(HwProfile, CpuThreadsRoundTripAndAreChecked) {
  HwProfile p = *load_hw_profile("cpu-local");
  p.accel.cpu_threads = 1.5;
  auto back = parse_hw_profile(hw_profile_to_json(p), "x");
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back->accel.cpu_threads, 1.5);
  std::string text = hw_profile_to_json(p);
  text.replace(text.find("\"cpu_threads\": 1.5"), 18, "\"cpu_threads\": -1");
  auto bad = parse_hw_profile(text, "x");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("cpu_threads"), std::string::npos);
}

TEST(HwProfile, AttentionKernelsSwapAndRoundTrip) {
  const std::string kernels = R"(, "attention_efficiency": [{"gflop": 1, "efficiency": 0.6}], "attention_backward_ratio": 3,
      "attention_kernel": "new",
      "attention_kernels": {"old": {"attention_efficiency": [{"gflop": 1, "efficiency": 0.3}],
                                    "attention_backward_ratio": 2.5, "source": "a paper"}})";
  auto r = parse_hw_profile(minimal_profile(kernels), "t");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  HwProfile hw = *r;
  EXPECT_EQ(attention_kernel_names(hw), "new (in use), old");
  ASSERT_TRUE(select_attention_kernel(&hw, "old").is_ok());
  EXPECT_EQ(hw.accel.attention_kernel, "old");
  EXPECT_EQ(hw.accel.attention_efficiency.efficiency, std::vector<double>{0.3});
  EXPECT_EQ(hw.accel.attention_backward_ratio, 2.5);
  ASSERT_EQ(hw.accel.attention_kernels.count("new"), 1u);  // kept, under its name
  EXPECT_EQ(hw.accel.attention_kernels.at("new").efficiency.efficiency, std::vector<double>{0.6});
  EXPECT_EQ(hw.accel.attention_kernel_source, "a paper");
  // What a plan embeds reads back as the same profile, and swaps back to the
  // profile exactly as it was written.
  auto back = parse_hw_profile(hw_profile_to_json(hw), "t");
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(hw_profile_to_json(*back), hw_profile_to_json(hw));
  ASSERT_TRUE(select_attention_kernel(&*back, "new").is_ok());
  EXPECT_EQ(back->accel.attention_efficiency.efficiency, std::vector<double>{0.6});
  EXPECT_EQ(back->accel.attention_backward_ratio, 3);
  EXPECT_EQ(back->accel.attention_kernels.at("old").source, "a paper");
  EXPECT_EQ(hw_profile_to_json(*back), hw_profile_to_json(*r));
  // An unknown kernel names the ones there are.
  Status s = select_attention_kernel(&hw, "fa3");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'fa3'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("old (in use), new"), std::string::npos) << s.message();
  HwProfile plain = *parse_hw_profile(minimal_profile(), "t");
  EXPECT_NE(select_attention_kernel(&plain, "fa2").message().find("no named attention kernels"), std::string::npos);
  // Alternatives need the table in use named; names are unique; every table has a source.
  expect_error(minimal_profile(R"(, "attention_efficiency": [{"gflop": 1, "efficiency": 0.6}],
      "attention_kernels": {"x": {"attention_efficiency": [{"gflop": 1, "efficiency": 0.3}], "source": "s"}})"),
               StatusCode::kInvalidArgument, {"attention_kernels needs attention_kernel"});
  expect_error(minimal_profile(R"(, "attention_kernel": "x")"), StatusCode::kInvalidArgument,
               {"attention_kernel", "attention_efficiency"});
  expect_error(minimal_profile(R"(, "attention_kernel_source": "x")"), StatusCode::kInvalidArgument,
               {"attention_kernel_source needs attention_kernel"});
  expect_error(minimal_profile(R"(, "attention_efficiency": [{"gflop": 1, "efficiency": 0.6}], "attention_kernel": "x",
      "attention_kernels": {"x": {"attention_efficiency": [{"gflop": 1, "efficiency": 0.3}], "source": "s"}})"),
               StatusCode::kInvalidArgument, {"attention_kernels.x", "own non-empty name"});
  expect_error(minimal_profile(R"(, "attention_efficiency": [{"gflop": 1, "efficiency": 0.6}], "attention_kernel": "x",
      "attention_kernels": {"y": {"attention_efficiency": [{"gflop": 1, "efficiency": 0.3}]}})"),
               StatusCode::kInvalidArgument, {"attention_kernels.y.source"});
  expect_error(minimal_profile(R"(, "attention_efficiency": [{"gflop": 1, "efficiency": 0.6}], "attention_kernel": "x",
      "attention_kernels": {"y": {"attention_efficiency": [{"gflop": 1, "efficiency": 0.3}], "source": "s", "ratio": 2}})"),
               StatusCode::kInvalidArgument, {"attention_kernels.y", "unknown key 'ratio'"});
}

// The unmasked table travels with its kernel: in use, kept under the
// kernel's name when another is selected, and written back exactly.
TEST(HwProfile, UnmaskedAttentionTablesTravelWithTheirKernel) {
  const std::string kernels = R"(, "attention_efficiency": [{"gflop": 1, "efficiency": 0.6}],
      "attention_efficiency_no_mask": [{"gflop": 1, "efficiency": 0.65}], "attention_kernel": "new",
      "attention_kernels": {"old": {"attention_efficiency": [{"gflop": 1, "efficiency": 0.3}],
                                    "attention_efficiency_no_mask": [{"gflop": 1, "efficiency": 0.35}],
                                    "source": "a paper"},
                            "bare": {"attention_efficiency": [{"gflop": 1, "efficiency": 0.2}], "source": "s"}})";
  auto r = parse_hw_profile(minimal_profile(kernels), "t");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  HwProfile hw = *r;
  EXPECT_EQ(hw.accel.attention_efficiency_no_mask.efficiency, std::vector<double>{0.65});
  ASSERT_TRUE(select_attention_kernel(&hw, "old").is_ok());
  EXPECT_EQ(hw.accel.attention_efficiency_no_mask.efficiency, std::vector<double>{0.35});
  EXPECT_EQ(hw.accel.attention_kernels.at("new").efficiency_no_mask.efficiency, std::vector<double>{0.65});
  // A kernel measured only causal leaves none in use (unmasked steps take its causal table).
  ASSERT_TRUE(select_attention_kernel(&hw, "bare").is_ok());
  EXPECT_TRUE(hw.accel.attention_efficiency_no_mask.flops.empty());
  auto back = parse_hw_profile(hw_profile_to_json(hw), "t");
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(hw_profile_to_json(*back), hw_profile_to_json(hw));
  ASSERT_TRUE(select_attention_kernel(&*back, "new").is_ok());
  EXPECT_EQ(hw_profile_to_json(*back), hw_profile_to_json(*r));
  // It is the unmasked rate of a causal table: never alone.
  expect_error(minimal_profile(R"(, "attention_efficiency_no_mask": [{"gflop": 1, "efficiency": 0.6}])"),
               StatusCode::kInvalidArgument, {"attention_efficiency_no_mask", "attention_efficiency too"});
}

}  // namespace
}  // namespace loom
