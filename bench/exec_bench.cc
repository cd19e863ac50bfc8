// Executor figures on this machine (prints, does not assert):
//   1. the measured GEMM peak (fp32, Eigen, all threads and one thread),
//   2. GPT-2 124M training steps on one rank (B=4, T=64, fp32): tokens/s and
//      achieved GFLOP/s as a fraction of that peak;
//   3. parameter initialization: GPT-2 355M's ParamStore::materialize (all threads),
//      and the per-element draw with the name hashed once per tensor against
//      once per element (the old path), as a ratio;
//   4. the optimizer's cost per call: AdamW over 4 Mi parameters as 1 tensor
//      and as 4096 tensors of 1 Ki (the executor calls it once per parameter
//      tensor it owns), the difference per call.
// usage: loom_exec_bench [steps] [threads]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/model_spec.h"
#include "core/resources.h"
#include "exec/backend/cpu_ops.h"
#include "exec/model/params.h"
#include "exec/comm/self_communicator.h"
#include "exec/runtime/trainer.h"

using namespace loom;
using Clock = std::chrono::steady_clock;

static double gemm_gflops(int64_t n, int reps) {
  std::vector<float> a(size_t(n * n), 0.5f), b(size_t(n * n), 0.25f), c(size_t(n * n), 0.f);
  cpu::gemm(false, false, n, n, n, 1.f, a.data(), b.data(), 0.f, c.data());  // warm-up
  auto t0 = Clock::now();
  for (int i = 0; i < reps; ++i) cpu::gemm(false, true, n, n, n, 1.f, a.data(), b.data(), 0.f, c.data());
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  return 2.0 * double(n) * double(n) * double(n) * reps / s / 1e9;
}

int main(int argc, char** argv) {
  int steps = argc > 1 ? std::atoi(argv[1]) : 6;
  int threads = argc > 2 ? std::atoi(argv[2]) : 0;
  cpu::set_num_threads(1);
  double peak1 = std::max(gemm_gflops(1024, 4), gemm_gflops(2048, 1));
  cpu::set_num_threads(threads);
  double peak = std::max(gemm_gflops(1024, 8), gemm_gflops(2048, 2));
  std::printf("GEMM peak (fp32, square 1024-2048): %.1f GFLOP/s all threads, %.1f GFLOP/s one thread\n", peak, peak1);

  auto model = load_model_spec("gpt2-124m");
  if (!model.is_ok()) return std::fprintf(stderr, "%s\n", model.status().to_string().c_str()), 1;
  exec::TrainerConfig cfg;
  cfg.model = *model;
  cfg.train.global_batch = 4;
  cfg.train.seq_len = 64;
  cfg.train.steps = steps;
  cfg.train.precision = Precision::kFp32;
  cfg.layout.micro_batch = 4;
  auto world = exec::make_self_communicator("world");
  auto data = exec::open_byte_text(default_corpus().value(), 1);
  if (!data.is_ok()) return std::fprintf(stderr, "%s\n", data.status().to_string().c_str()), 1;
  auto t = exec::Trainer::create(world.get(), cfg, data->get());
  if (!t.is_ok()) return std::fprintf(stderr, "%s\n", t.status().to_string().c_str()), 1;
  const double tokens = 4 * 64;
  // Executed FLOPs of a step: 6 per parameter of every GEMM (fwd + two bwd) per
  // token, incl. the 50257-wide logits, plus the attention scores and values
  // (causal: half of 12*L*T*C per token).
  const double flops_token = model->model_flops_per_token_palm(64) - 6.0 * 12 * 64 * 768;
  double sum = 0;
  int n = 0;
  for (int s = 0; s < steps; ++s) {
    auto r = (*t)->step(s);
    if (!r.is_ok()) return std::fprintf(stderr, "%s\n", r.status().to_string().c_str()), 1;
    std::printf("step %d: %.3f s, loss %.4f\n", s + 1, r->step_time_s, r->loss);
    if (s >= 2) {
      sum += r->step_time_s;
      ++n;
    }
  }
  double step = n ? sum / n : 0;
  double gflops = flops_token * tokens / step / 1e9;
  std::printf("GPT-2 124M, B=4, T=64, fp32, 1 rank: %.3f s/step, %.0f tokens/s, %.1f GFLOP/s = %.0f%% of the GEMM peak\n",
              step, tokens / step, gflops, 100 * gflops / peak);

  // Initialization: the draw per element, name hashed per element vs per tensor.
  const std::string name = "layers.17.mlp.fc_in.weight";
  const int64_t n_draw = 4'000'000;
  volatile float sink = 0;
  auto t1 = Clock::now();
  for (int64_t i = 0; i < n_draw; ++i) sink = sink + exec::init_normal(1234, name, i);
  double per_element = std::chrono::duration<double>(Clock::now() - t1).count();
  t1 = Clock::now();
  const uint64_t stream = exec::init_stream(1234, name);
  for (int64_t i = 0; i < n_draw; ++i) sink = sink + exec::init_normal_at(stream, i);
  double per_tensor = std::chrono::duration<double>(Clock::now() - t1).count();
  std::printf("init draw, one thread: %.1f ns/element hashing the name per element, %.1f ns hashing it once "
              "(ratio %.2f)\n", 1e9 * per_element / n_draw, 1e9 * per_tensor / n_draw, per_element / per_tensor);
  auto m355 = load_model_spec("gpt2-355m");
  if (!m355.is_ok()) return std::fprintf(stderr, "%s\n", m355.status().to_string().c_str()), 1;
  auto d355 = exec::model_dims(*m355);
  if (!d355.is_ok()) return std::fprintf(stderr, "%s\n", d355.status().to_string().c_str()), 1;
  auto cpu = exec::make_cpu_backend();  // outlives the store's buffers
  exec::ParamStore store;
  exec::add_chunk_params(store, *d355, 0, d355->L, true, true, 1, 0);
  t1 = Clock::now();
  store.materialize(cpu.get(), 1234);
  std::printf("GPT-2 355M parameter initialization (%lld parameters, ParamStore::materialize, all threads): %.2f s\n",
              (long long)store.numel(), std::chrono::duration<double>(Clock::now() - t1).count());

  // AdamW: one call over n parameters against n / 1024 calls of 1 Ki.
  {
    const int64_t n = int64_t{1} << 22, piece = 1024;
    std::vector<float> p(size_t(n), 0.5f), g(size_t(n), 1e-3f), m1(size_t(n), 0.f), v1(size_t(n), 0.f);
    auto time_calls = [&](int64_t len) {
      double best = 1e30;
      for (int rep = 0; rep < 5; ++rep) {
        auto t = Clock::now();
        for (int64_t at = 0; at < n; at += len)
          cpu::adamw_update(p.data() + at, g.data() + at, m1.data() + at, v1.data() + at, len, 1e-4f, 0.9f, 0.95f,
                            1e-8f, 0.1f, rep + 1, 1.f);
        best = std::min(best, std::chrono::duration<double>(Clock::now() - t).count());
      }
      return best;
    };
    const double one = time_calls(n), many = time_calls(piece);
    std::printf("AdamW over %lld parameters: %.2f ms as one call, %.2f ms as %lld calls of %lld: %.2f us per call "
                "beyond the bytes\n", (long long)n, 1e3 * one, 1e3 * many, (long long)(n / piece), (long long)piece,
                1e6 * (many - one) / double(n / piece));
  }
  return 0;
}
