// Simulator throughput: what `loom plan` spends its time on.
//
//   BM_ClosedForm/*      Evaluator::estimate over a rotating set of ~200
//                        pre-validated layouts (items/s = evaluations/s);
//                        target >= 1e6/s on 2 cores.
//   BM_BuildProgram      build_program for pp=16, m=512, interleaved v=4.
//   BM_EventEngine       run_event_engine on that program with constant
//                        durations; target < 5 ms.
//   BM_Search405b        search_layouts for llama-3.1-405b on 16384 H100s,
//                        B=2048, s=8192, bf16, SearchSpace defaults; target
//                        < 2 s. Counters: layouts enumerated, fitting.
//
// Run: ./build/bench/loom_sim_bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/hw_profile.h"
#include "core/model_spec.h"
#include "core/program.h"
#include "sim/evaluate.h"
#include "sim/event_engine.h"
#include "sim/search.h"

namespace loom {
namespace {

template <typename T>
T unwrap_or_die(Result<T> r, const char* what) {
  if (!r.is_ok()) {
    std::fprintf(stderr, "sim_bench: %s: %s\n", what, r.status().to_string().c_str());
    std::exit(1);
  }
  return std::move(r).value();
}

// One model on one cluster with a fixed set of valid layouts to evaluate.
struct Case {
  std::unique_ptr<Evaluator> eval;
  std::vector<Layout> layouts;  // (kLayouts,) spread evenly over the enumeration
};

constexpr size_t kLayouts = 200;

Case make_case(const char* model, const char* hw, int world, int64_t global_batch, int64_t seq_len) {
  Case c;
  TrainSpec train;
  train.global_batch = global_batch;
  train.seq_len = seq_len;
  train.precision = Precision::kBf16;
  c.eval = std::make_unique<Evaluator>(unwrap_or_die(load_model_spec(model), model),
                                       unwrap_or_die(load_hw_profile(hw), hw), train, SimOptions{});
  SearchSpace space;
  space.world = world;
  if (std::getenv("LOOM_BENCH_EVEN_SPLIT")) space.try_uneven_ends = false;  // the layout mix before uneven ends
  std::vector<Layout> all = enumerate_layouts(*c.eval, space);
  if (all.empty()) {
    std::fprintf(stderr, "sim_bench: no valid layout of %s on %d x %s\n", model, world, hw);
    std::exit(1);
  }
  // Every layout enumerate_layouts returns passed validate_layout, as
  // Evaluator::estimate requires. A stride keeps all parts of the space.
  const size_t n = std::min(kLayouts, all.size());
  for (size_t i = 0; i < n; ++i) c.layouts.push_back(all[i * all.size() / n]);
  return c;
}

// Built once, shared by all benchmark threads (Evaluator::estimate is const
// and thread-safe).
const Case& llama8b_64() {
  static const Case c = make_case("llama-3-8b", "dgx-h100", 64, 512, 4096);
  return c;
}
const Case& llama405b_16k() {
  static const Case c = make_case("llama-3.1-405b", "dgx-h100", 16384, 2048, 8192);
  return c;
}

void run_closed_form(benchmark::State& state, const Case& c) {
  // Threads start at different offsets so they do not walk in lockstep.
  size_t i = size_t(state.thread_index()) * 37 % c.layouts.size();
  double sink = 0;
  for (auto _ : state) {
    Estimate e = c.eval->estimate(c.layouts[i]);
    sink += e.figures.step_time_s;
    benchmark::DoNotOptimize(e);
    if (++i == c.layouts.size()) i = 0;
  }
  benchmark::DoNotOptimize(sink);
  state.SetItemsProcessed(state.iterations());
  state.counters["layouts"] = benchmark::Counter(double(c.layouts.size()), benchmark::Counter::kAvgThreads);
}

void BM_ClosedForm_Llama8b_64(benchmark::State& state) { run_closed_form(state, llama8b_64()); }
void BM_ClosedForm_Llama405b_16k(benchmark::State& state) { run_closed_form(state, llama405b_16k()); }

// The tested schedule: pp=16, m=512, interleaved v=4, no DP ops.
ProgramConfig interleaved_config() {
  ProgramConfig cfg;
  cfg.pp = 16;
  cfg.virtual_stages = 4;
  cfg.micro_batches = 512;
  cfg.schedule = Schedule::kInterleaved;
  cfg.dp_comm = false;
  return cfg;
}

void BM_BuildProgram(benchmark::State& state) {
  const ProgramConfig cfg = interleaved_config();
  size_t ops = 0;
  for (auto _ : state) {
    Program p = unwrap_or_die(build_program(cfg), "build_program");
    ops = p.ops.size();
    benchmark::DoNotOptimize(p);
  }
  state.counters["ops"] = double(ops);
}

void BM_EventEngine(benchmark::State& state) {
  const Program program = unwrap_or_die(build_program(interleaved_config()), "build_program");
  // Constant durations: compute 1 ms fwd / 2 ms bwd, p2p 0.1 ms.
  std::vector<double> duration_s(program.ops.size());
  for (size_t i = 0; i < program.ops.size(); ++i) {
    switch (program.ops[i].kind) {
      case OpKind::kForward: duration_s[i] = 1e-3; break;
      case OpKind::kBackward: duration_s[i] = 2e-3; break;
      default: duration_s[i] = 1e-4; break;
    }
  }
  double step_time_s = 0;
  for (auto _ : state) {
    Timeline t = unwrap_or_die(run_event_engine(program, duration_s), "run_event_engine");
    step_time_s = t.step_time_s;
    benchmark::DoNotOptimize(t);
  }
  state.SetItemsProcessed(state.iterations() * int64_t(program.ops.size()));  // ops/s
  state.counters["ops"] = double(program.ops.size());
  state.counters["deps"] = double(program.deps.size());
  state.counters["step_time_s"] = step_time_s;
}

void BM_Search405b(benchmark::State& state) {
  TrainSpec train;
  train.global_batch = 2048;
  train.seq_len = 8192;
  train.precision = Precision::kBf16;
  const Evaluator eval(unwrap_or_die(load_model_spec("llama-3.1-405b"), "llama-3.1-405b"),
                       unwrap_or_die(load_hw_profile("dgx-h100"), "dgx-h100"), train, SimOptions{});
  SearchSpace space;  // defaults: all hardware threads, refine_top 8
  space.world = 16384;
  SearchResult last;
  for (auto _ : state) {
    last = unwrap_or_die(search_layouts(eval, space), "search_layouts");
    benchmark::DoNotOptimize(last);
  }
  state.counters["enumerated"] = double(last.enumerated);
  state.counters["fitting"] = double(last.fitting);
  state.counters["refined"] = double(last.refined.size());
  state.counters["best_tok_per_s"] = last.refined.empty() ? 0.0 : last.refined[0].figures.tokens_per_s;
}

BENCHMARK(BM_ClosedForm_Llama8b_64);
BENCHMARK(BM_ClosedForm_Llama8b_64)->Threads(2)->UseRealTime();
BENCHMARK(BM_ClosedForm_Llama405b_16k);
BENCHMARK(BM_ClosedForm_Llama405b_16k)->Threads(2)->UseRealTime();
BENCHMARK(BM_BuildProgram)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EventEngine)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Search405b)->Unit(benchmark::kMillisecond)->Iterations(3)->UseRealTime();

}  // namespace
}  // namespace loom

BENCHMARK_MAIN();
