// The kernel-table decorators on the CPU: the per-op profiler forwards every
// call bit for bit, counts calls, FLOPs and bytes from the arguments, turns
// timer pairs into per-step rows; the sync check names the op a failure comes
// from; a profiled backend trains exactly like a plain one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "exec/backend/compute_backend.h"
#include "exec/backend/kernel_profile.h"
#include "exec/backend/kernel_sync_check.h"
#include "exec/comm/self_communicator.h"
#include "exec/runtime/trainer.h"
#include "tests/support/tiny_training.h"

namespace loom::exec {
namespace {

std::vector<float> random_vec(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Every pair takes `seconds_per_pair`, so rates and per-step figures are exact.
class FixedTimer final : public OpTimer {
 public:
  explicit FixedTimer(double seconds_per_pair, int* takes = nullptr) : s_(seconds_per_pair), takes_(takes) {}
  void start() override { ++started_; }
  void stop() override { ++stopped_; }
  std::vector<double> take() override {
    EXPECT_EQ(started_, stopped_);
    if (takes_) ++*takes_;
    std::vector<double> out(size_t(stopped_), s_);
    started_ = stopped_ = 0;
    return out;
  }

 private:
  double s_;
  int* takes_;
  int started_ = 0, stopped_ = 0;
};

const OpProfileRow* find(const std::vector<OpProfileRow>& rows, const std::string& op) {
  for (const OpProfileRow& r : rows)
    if (r.op == op) return &r;
  return nullptr;
}

// GEMM, attention forward and backward, LayerNorm and cross-entropy through a
// profiled table and through a plain one: the same bits.
TEST(KernelProfile, ProfiledTableGivesBitIdenticalResults) {
  auto backend = make_cpu_backend();
  auto profiler = install_kernel_profiler(*backend);
  ASSERT_TRUE(profiler.is_ok()) << profiler.status().to_string();
  Kernels& prof = backend->kernels();
  ASSERT_EQ(&prof, static_cast<Kernels*>(*profiler));
  auto plain = make_cpu_kernels();

  const int64_t M = 37, N = 29, K = 53;
  auto a = random_vec(size_t(M * K), 1), b = random_vec(size_t(K * N), 2), c0 = random_vec(size_t(M * N), 3);
  std::vector<float> c1 = c0, c2 = c0;
  prof.gemm({false, true, M, N, K, 0.5f, a.data(), b.data(), 0.25f, c1.data()});
  plain->gemm({false, true, M, N, K, 0.5f, a.data(), b.data(), 0.25f, c2.data()});
  EXPECT_EQ(0, std::memcmp(c1.data(), c2.data(), c1.size() * sizeof(float)));

  const int64_t B = 2, T = 33, Hq = 4, Hk = 2, D = 16;
  const size_t nq = size_t(B * T * Hq * D), nk = size_t(B * T * Hk * D), nl = size_t(B * Hq * T);
  auto q = random_vec(nq, 4), k = random_vec(nk, 5), v = random_vec(nk, 6), dout = random_vec(nq, 7);
  std::vector<float> out[2], lse[2], dq[2], dk[2], dv[2];
  for (int i = 0; i < 2; ++i) {
    Kernels& t = i == 0 ? prof : *plain;
    out[i].resize(nq), lse[i].resize(nl), dq[i].resize(nq), dk[i].resize(nk), dv[i].resize(nk);
    t.attention_forward({q.data(), k.data(), v.data(), out[i].data(), lse[i].data(), B, T, Hq, Hk, D});
    t.attention_backward({dout.data(), q.data(), k.data(), v.data(), out[i].data(), lse[i].data(), dq[i].data(),
                         dk[i].data(), dv[i].data(), B, T, Hq, Hk, D});
  }
  EXPECT_EQ(out[0], out[1]);
  EXPECT_EQ(lse[0], lse[1]);
  EXPECT_EQ(dq[0], dq[1]);
  EXPECT_EQ(dk[0], dk[1]);
  EXPECT_EQ(dv[0], dv[1]);

  const int64_t R = 9, C = 40;
  auto x = random_vec(size_t(R * C), 8), w = random_vec(size_t(C), 9), bias = random_vec(size_t(C), 10);
  std::vector<float> y[2], mean[2], rstd[2];
  for (int i = 0; i < 2; ++i) {
    Kernels& t = i == 0 ? prof : *plain;
    y[i].resize(x.size()), mean[i].resize(size_t(R)), rstd[i].resize(size_t(R));
    t.layernorm_forward({x.data(), w.data(), bias.data(), y[i].data(), mean[i].data(), rstd[i].data(), R, C, 1e-5f});
  }
  EXPECT_EQ(y[0], y[1]);
  EXPECT_EQ(rstd[0], rstd[1]);

  std::vector<int32_t> targets(static_cast<size_t>(R));
  for (size_t i = 0; i < targets.size(); ++i) targets[i] = int32_t(i * 3 % C);
  std::vector<float> mx[2], se[2], tl[2], loss[2], dl[2];
  for (int i = 0; i < 2; ++i) {
    Kernels& t = i == 0 ? prof : *plain;
    mx[i].resize(size_t(R)), se[i].resize(size_t(R)), tl[i].resize(size_t(R)), loss[i].resize(size_t(R));
    dl[i] = x;
    t.xent_row_max({x.data(), mx[i].data(), R, C});
    t.xent_sumexp_and_target({x.data(), targets.data(), mx[i].data(), se[i].data(), tl[i].data(), R, C, 0});
    t.xent_loss({mx[i].data(), se[i].data(), tl[i].data(), loss[i].data(), R});
    t.xent_backward({dl[i].data(), targets.data(), mx[i].data(), se[i].data(), dl[i].data(), R, C, 0, 0.125f});
  }
  EXPECT_EQ(loss[0], loss[1]);
  EXPECT_EQ(dl[0], dl[1]);
  EXPECT_EQ(prof.sum({x.data(), int64_t(x.size())}), plain->sum({x.data(), int64_t(x.size())}));

  const auto rows = (*profiler)->report();
  const OpProfileRow* g = find(rows, "gemm");
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->calls, 1);
  EXPECT_GE(g->seconds, 0);
  ASSERT_NE(find(rows, "attention_backward"), nullptr);
  EXPECT_EQ(find(rows, "rmsnorm_forward"), nullptr) << "ops never called have no row";
}

TEST(KernelProfile, CountsCallsFlopsAndBytesFromTheArguments) {
  auto plain = make_cpu_kernels();
  int takes = 0;
  KernelProfiler p(*plain, std::make_unique<FixedTimer>(1e-3, &takes));
  const int64_t M = 64, N = 48, K = 32;
  std::vector<float> a(size_t(M * K), 1.f), b(size_t(K * N), 1.f), c(size_t(M * N), 0.f);
  p.gemm({false, false, M, N, K, 1.f, a.data(), b.data(), 0.f, c.data()});
  p.gemm({true, false, K, N, M, 1.f, a.data(), c.data(), 1.f, b.data()});  // (K,M)^T... shapes only matter here
  const int64_t B = 2, T = 16, Hq = 4, Hk = 2, D = 8;
  const size_t nq = size_t(B * T * Hq * D), nk = size_t(B * T * Hk * D), nl = size_t(B * Hq * T);
  auto q = random_vec(nq, 1), k = random_vec(nk, 2), v = random_vec(nk, 3), g = random_vec(nq, 4);
  std::vector<float> out(nq), lse(nl), dq(nq), dk(nk), dv(nk);
  p.attention_forward({q.data(), k.data(), v.data(), out.data(), lse.data(), B, T, Hq, Hk, D});
  p.step_done();
  p.attention_forward({q.data(), k.data(), v.data(), out.data(), lse.data(), B, T, Hq, Hk, D});
  p.attention_backward({g.data(), q.data(), k.data(), v.data(), out.data(), lse.data(), dq.data(), dk.data(),
                       dv.data(), B, T, Hq, Hk, D});
  std::vector<float> x(1000, 1.f), y(1000, 2.f);
  p.add_inplace({y.data(), x.data(), 1000});
  p.step_done();
  EXPECT_EQ(takes, 2) << "timings are read back once per step";
  EXPECT_EQ(p.steps(), 2);

  const auto rows = p.report();
  ASSERT_EQ(rows.size(), 4u);
  const OpProfileRow* gemm = find(rows, "gemm");
  ASSERT_NE(gemm, nullptr);
  EXPECT_EQ(gemm->calls, 2);
  EXPECT_DOUBLE_EQ(gemm->flops, 2.0 * (2.0 * M * N * K));
  // fp32 table: A and B read, C written (beta 0) or read and written (beta 1).
  EXPECT_DOUBLE_EQ(gemm->bytes, 4.0 * (M * K + K * N + M * N) + 4.0 * (K * M + M * N + 2 * K * N));
  EXPECT_DOUBLE_EQ(gemm->seconds, 2e-3);
  EXPECT_DOUBLE_EQ(gemm->ms_per_step, 1.0);  // 2 ms over 2 steps
  EXPECT_DOUBLE_EQ(gemm->tflops, gemm->flops / 2e-3 / 1e12);

  // Causal attention: forward 4 B Hq T^2 D / 2, backward 2.5 times that.
  const double fwd = 4.0 * B * Hq * T * T * D / 2;
  const OpProfileRow* af = find(rows, "attention_forward");
  const OpProfileRow* ab = find(rows, "attention_backward");
  ASSERT_NE(af, nullptr);
  ASSERT_NE(ab, nullptr);
  EXPECT_EQ(af->calls, 2);
  EXPECT_DOUBLE_EQ(af->flops, 2 * fwd);
  EXPECT_EQ(ab->calls, 1);
  EXPECT_DOUBLE_EQ(ab->flops, 2.5 * fwd);
  EXPECT_DOUBLE_EQ(af->bytes, 2 * 4.0 * (2.0 * nq + 2.0 * nk + nl));
  EXPECT_DOUBLE_EQ(ab->bytes, 4.0 * (4.0 * nq + 4.0 * nk + nl));

  const OpProfileRow* add = find(rows, "add_inplace");
  ASSERT_NE(add, nullptr);
  EXPECT_DOUBLE_EQ(add->flops, 0);
  EXPECT_DOUBLE_EQ(add->bytes, 12000);
  EXPECT_DOUBLE_EQ(add->gbps, 12000 / 1e-3 / 1e9);

  double share = 0;
  for (const OpProfileRow& r : rows) share += r.share;
  EXPECT_NEAR(share, 1.0, 1e-12);
  EXPECT_DOUBLE_EQ(gemm->share, 2.0 / 6.0);  // six timed calls of 1 ms

  const std::string table = format_op_profile(rows, p.steps());
  EXPECT_NE(table.find("attention_backward"), std::string::npos) << table;
  EXPECT_NE(table.find("total"), std::string::npos) << table;
  auto j = nlohmann::json::parse(op_profile_json(rows, p.steps()));
  EXPECT_EQ(j["steps"], 2);
  ASSERT_EQ(j["ops"].size(), 4u);
  EXPECT_EQ(j["ops"][0]["op"], rows[0].op);
  EXPECT_DOUBLE_EQ(j["total_ms_per_step"].get<double>(), 3.0);

  p.reset();
  EXPECT_EQ(p.steps(), 0);
  EXPECT_TRUE(p.report().empty());
}

TEST(KernelProfile, ReadsTimingsBackWhenManyCallsArePending) {
  auto plain = make_cpu_kernels();
  int takes = 0;
  KernelProfiler p(*plain, std::make_unique<FixedTimer>(1e-6, &takes));
  std::vector<float> x(16, 1.f);
  for (int i = 0; i < 40000; ++i) p.scale_inplace({x.data(), 1.f, 16});
  EXPECT_EQ(takes, 1) << "a bounded number of event pairs in flight";
  const auto rows = p.report();
  EXPECT_EQ(takes, 2);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].calls, 40000);
  EXPECT_NEAR(rows[0].seconds, 4e-2, 1e-12);
}

TEST(KernelSyncCheck, NamesTheOpAFailureComesFrom) {
  auto plain = make_cpu_kernels();
  bool fault = false;
  int waits = 0;
  SyncCheckKernels k(*plain, [&] {
    ++waits;
    return fault ? internal_error("CUDA error 'an illegal memory access was encountered' (cudaErrorIllegalAddress)")
                 : Status::ok();
  }, "TEST_SYNC_DEBUG");
  std::vector<float> a(64, 1.f), b(64, 1.f), c(64, 0.f);
  k.gemm({false, false, 8, 8, 8, 1.f, a.data(), b.data(), 0.f, c.data()});
  EXPECT_TRUE(k.status().is_ok());
  EXPECT_EQ(waits, 1) << "one wait per op";
  EXPECT_EQ(c[0], 8.f) << "forwarded";

  const int64_t B = 1, T = 4, Hq = 2, Hk = 1, D = 8;
  std::vector<float> q(size_t(B * T * Hq * D), 0.5f), kv(size_t(B * T * Hk * D), 0.25f), out(q.size()),
      lse(size_t(B * Hq * T)), dq(q.size()), dk(kv.size()), dv(kv.size());
  k.attention_forward({q.data(), kv.data(), kv.data(), out.data(), lse.data(), B, T, Hq, Hk, D});
  fault = true;
  testing::internal::CaptureStderr();
  k.attention_backward({q.data(), q.data(), kv.data(), kv.data(), out.data(), lse.data(), dq.data(), dk.data(),
                       dv.data(), B, T, Hq, Hk, D});
  k.add_inplace({c.data(), a.data(), 64});  // later ops keep the first failure
  const std::string err = testing::internal::GetCapturedStderr();
  const std::string want =
      "CUDA error 'an illegal memory access was encountered' (cudaErrorIllegalAddress) in attention_backward "
      "(B=1, T=4, Hq=2, Hk=1, D=8)";
  ASSERT_FALSE(k.status().is_ok());
  EXPECT_EQ(k.status().message(), want);
  EXPECT_EQ(k.status().code(), StatusCode::kInternal);
  EXPECT_EQ(err, "loom: TEST_SYNC_DEBUG: " + want + "\n");
  EXPECT_EQ(waits, 3) << "no waits once a failure is known";
}

// A profiled CPU backend under the Trainer: the same losses, and the table
// sees the model's ops.
TEST(KernelProfile, TrainerThroughAProfiledBackendIsUnchanged) {
  for (bool gpt2 : {true, false}) {
    TrainerConfig cfg = test_support::tiny_config(gpt2, "dp=1,micro=2", /*steps=*/3);
    std::vector<double> losses[2];
    std::vector<OpProfileRow> rows;
    int64_t steps = 0;
    for (int profiled = 0; profiled < 2; ++profiled) {
      auto backend = make_cpu_backend();
      KernelProfiler* prof = nullptr;
      if (profiled) {
        auto p = install_kernel_profiler(*backend);
        ASSERT_TRUE(p.is_ok()) << p.status().to_string();
        prof = *p;
      }
      cfg.backend = backend.get();
      auto world = make_self_communicator("world");
      auto data = open_byte_text(test_support::corpus_path(), cfg.train.seed);
      ASSERT_TRUE(data.is_ok()) << data.status().to_string();
      auto t = Trainer::create(world.get(), cfg, data->get());
      ASSERT_TRUE(t.is_ok()) << t.status().to_string();
      for (int64_t s = 0; s < cfg.train.steps; ++s) {
        auto r = (*t)->step(s);
        ASSERT_TRUE(r.is_ok()) << r.status().to_string();
        losses[profiled].push_back(r->loss);
        if (prof) prof->step_done();
      }
      if (prof) {
        rows = prof->report();
        steps = prof->steps();
      }
    }
    EXPECT_EQ(losses[0], losses[1]) << (gpt2 ? "gpt2" : "llama");
    EXPECT_EQ(steps, 3);
    for (const char* op : {"gemm", "attention_forward", "attention_backward", "xent_backward", "adamw_multi",
                           "embedding_forward", gpt2 ? "layernorm_backward" : "rmsnorm_backward"}) {
      const OpProfileRow* r = find(rows, op);
      ASSERT_NE(r, nullptr) << op << "\n" << format_op_profile(rows, steps);
      EXPECT_GT(r->calls, 0) << op;
      EXPECT_GE(r->seconds, 0) << op;
    }
    EXPECT_GT(find(rows, "gemm")->flops, 0);
    // The optimizer step is one AdamW launch and one sum-of-squares launch,
    // not one per parameter tensor.
    EXPECT_EQ(find(rows, "adamw_multi")->calls, steps);
    EXPECT_EQ(find(rows, "add_sum_squares_multi")->calls, steps);
    EXPECT_EQ(find(rows, "adamw_update"), nullptr);
    EXPECT_EQ(find(rows, "add_sum_squares"), nullptr);
  }
}

TEST(KernelProfile, BackendsWithoutAWrapperSlotRefuse) {
  class Bare final : public ComputeBackend {
   public:
    std::string name() const override { return "bare"; }
    bool host_visible() const override { return true; }
    void* allocate(size_t) override { return nullptr; }
    void release(void*, size_t) override {}
    size_t peak_allocated_bytes() const override { return 0; }
    MemoryBreakdown peak_memory_breakdown() const override { return {}; }
    size_t allocated_bytes() const override { return 0; }
    void discard(void*, size_t) override {}
    void reclaim(void*, size_t) override {}
    void copy_to_device(void*, const void*, size_t) override {}
    void copy_to_host(void*, const void*, size_t) override {}
    void copy(void*, const void*, size_t) override {}
    void fill_zero(void*, size_t) override {}
    void synchronize() override {}
    Kernels& kernels() override { return *k_; }

   private:
    std::unique_ptr<Kernels> k_ = make_cpu_kernels();
  } bare;
  auto p = install_kernel_profiler(bare);
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().code(), StatusCode::kUnsupported);
}

}  // namespace
}  // namespace loom::exec
