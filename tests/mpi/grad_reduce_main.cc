// Compressed gradient reduction (--grad-reduce bf16 | fp8) under mpirun, 4 ranks:
//  1. The collectives (exec/runtime/grad_compress.h) on random gradients of
//     wide dynamic range against the exact sum (fp64): every element within
//     the format's rounding of the pieces the others sent (bf16 2^-8
//     relative; E4M3 2^-4 relative or a subnormal step of its block's scale),
//     plus the all-reduce's one rounding of the result; the owner's own piece
//     never rounded; the all-reduce's replicas bit-identical on every rank.
//  2. Training: dp=2 with ZeRO 0-3 and dp=4 ZeRO-1 track the single-rank fp32
//     losses over 10 steps (bf16 within 1e-4 relative, fp8 within 1e-3), and
//     200 steps on the sample corpus end within 1% (bf16) and 2% (fp8) of
//     the fp32 run's loss, step by step.
// Run as `mpirun -np 4 grad_reduce` (also poisoned: LOOM_POISON_UNINITIALIZED=1).
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "exec/backend/compute_backend.h"
#include "exec/comm/mpi_communicator.h"
#include "exec/comm/self_communicator.h"
#include "exec/runtime/grad_compress.h"
#include "exec/runtime/trainer.h"
#include "tests/mpi/mpi_test_main.h"
#include "tests/support/tiny_training.h"

namespace loom::exec {
namespace {

int failures = 0;

void report(Communicator& world, const std::string& what, double worst, bool ok) {
  double flag = ok ? 0 : 1, w = worst;
  world.all_reduce(&flag, 1, ReduceOp::kMax);
  world.all_reduce(&w, 1, ReduceOp::kMax);
  if (world.rank() == 0) std::printf("%-58s worst %.2e  %s\n", what.c_str(), w, flag == 0 ? "ok" : "FAILED");
  failures += flag != 0;
}

// Rank r's gradient element i: signs and magnitudes over 2^-20..2^6.
float grad_value(int r, size_t i) {
  uint64_t s = (uint64_t(r) + 1) * 0x9E3779B97F4A7C15ULL ^ (uint64_t(i) * 0xBF58476D1CE4E5B9ULL);
  s ^= s >> 31;
  s *= 0x94D049BB133111EBULL;
  s ^= s >> 29;
  const double u = double(s >> 11) / double(1ULL << 53);
  return float(((s & 1) ? -1 : 1) * std::ldexp(1.0 + u, int(u * 26) - 20));
}

void collectives(Communicator& world) {
  auto be = make_cpu_backend();
  const int n = world.size(), me = world.rank();
  const size_t shard = 1003;  // odd: packed blocks padded to whole floats
  for (GradFormat f : {GradFormat::kBf16, GradFormat::kFp8}) {
    const double u = f == GradFormat::kBf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -4);  // 2^-p: 8 and 4 bits
    GradCompressor c(be.get(), &world, f);
    std::vector<float> send(shard * size_t(n)), recv(shard);
    for (size_t i = 0; i < send.size(); ++i) send[i] = grad_value(me, i);
    // Each rank's block amax (fp8's scale), for the subnormal step.
    std::vector<double> amax(size_t(n), 0);
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < shard; ++i) amax[size_t(r)] = std::max(amax[size_t(r)], double(std::fabs(grad_value(r, size_t(me) * shard + i))));
    auto bound = [&](size_t i, bool own_exact) {  // element i of this rank's block
      double b = 0;
      for (int r = 0; r < n; ++r) {
        if (own_exact && r == me) continue;
        const double x = std::fabs(grad_value(r, size_t(me) * shard + i));
        b += f == GradFormat::kBf16 ? x * u : std::max(x * u, amax[size_t(r)] / 448 * std::ldexp(1.0, -10));
      }
      return b;
    };
    const char* name = f == GradFormat::kBf16 ? "bf16" : "fp8";
    // Reduce-scatter.
    {
      auto req = c.ireduce_scatter(send.data(), recv.data(), shard);
      bool ok = req.is_ok() && (*req)->wait().is_ok();
      double worst = 0;
      for (size_t i = 0; ok && i < shard; ++i) {
        double exact = 0, mag = 0;
        for (int r = 0; r < n; ++r) {
          exact += grad_value(r, size_t(me) * shard + i);
          mag += std::fabs(grad_value(r, size_t(me) * shard + i));
        }
        const double err = std::fabs(double(recv[i]) - exact), allowed = bound(i, true) + mag * 4 * 6e-8;
        worst = std::max(worst, err / allowed);
        ok = ok && err <= allowed;
      }
      report(world, std::string("reduce-scatter ") + name + ": error / bound", worst, ok);
    }
    // All-reduce: the reduce-scatter's error plus one rounding of the sum,
    // and every rank holding the same bits.
    {
      std::vector<float> buf = send;
      auto req = c.iall_reduce(buf.data(), shard);
      bool ok = req.is_ok() && (*req)->wait().is_ok();
      double worst = 0;
      for (size_t i = 0; ok && i < shard; ++i) {
        const size_t at = size_t(me) * shard + i;
        double exact = 0, mag = 0;
        for (int r = 0; r < n; ++r) {
          exact += grad_value(r, at);
          mag += std::fabs(grad_value(r, at));
        }
        double block_amax = 0;  // the reduced block's amax bounds fp8's subnormal step
        for (size_t j = 0; j < shard; ++j) block_amax = std::max(block_amax, double(std::fabs(buf[size_t(me) * shard + j])));
        const double last = f == GradFormat::kBf16 ? std::fabs(exact) * u * 1.01 + mag * u * u
                                                   : std::max(std::fabs(exact) * u * 1.01, block_amax / 448 * std::ldexp(1.0, -10)) + mag * u * u;
        const double err = std::fabs(double(buf[at]) - exact), allowed = bound(i, true) + last + mag * 4 * 6e-8;
        worst = std::max(worst, err / allowed);
        ok = ok && err <= allowed;
      }
      std::vector<float> all(buf.size() * size_t(n));
      ok = ok && world.all_gather(buf.data(), all.data(), buf.size()).is_ok();
      for (int r = 1; ok && r < n; ++r)
        ok = std::memcmp(all.data(), all.data() + size_t(r) * buf.size(), buf.size() * sizeof(float)) == 0;
      report(world, std::string("all-reduce ") + name + ": error / bound, replicas equal", worst, ok);
    }
  }
}

// The shared tiny Llama (tests/support/tiny_training.h), with the layout
// equivalence test's schedule, its gradients reduced as `g`.
TrainerConfig config(const std::string& layout, GradReduce g, int64_t steps) {
  TrainerConfig c = test_support::tiny_config(/*gpt2=*/false, layout, steps);
  c.train.lr = 2e-3;
  c.train.min_lr = 2e-4;
  c.train.warmup_steps = 2;
  c.train.grad_reduce = g;
  return c;
}

void training(Communicator& world, TokenSource* data) {
  struct Case {
    const char* layout;
    int ranks;
    int64_t steps;
  };
  const Case cases[] = {{"dp=2", 2, 10},        {"dp=2,zero=1", 2, 10}, {"dp=2,zero=2", 2, 10},
                        {"dp=2,zero=3", 2, 10}, {"dp=4,zero=1", 4, 10}, {"dp=2,zero=1", 2, 200}};
  auto self = make_self_communicator("reference");
  for (const Case& c : cases) {
    auto ref = train_losses(self.get(), config("dp=1", GradReduce::kFp32, c.steps), data);
    if (!ref.is_ok()) {
      std::fprintf(stderr, "reference: %s\n", ref.status().to_string().c_str());
      ++failures;
      return;
    }
    const bool member = world.rank() < c.ranks;
    auto sub = world.split(member ? 0 : 1, world.rank(), "case");
    for (GradReduce g : {GradReduce::kBf16, GradReduce::kFp8}) {
      const double tol = c.steps > 10 ? (g == GradReduce::kBf16 ? 0.01 : 0.02) : (g == GradReduce::kBf16 ? 1e-4 : 1e-3);
      double worst = 0;
      bool ok = true;
      if (member) {
        auto got = train_losses(sub->get(), config(c.layout, g, c.steps), data);
        ok = got.is_ok();
        if (!ok) std::fprintf(stderr, "rank %d %s: %s\n", world.rank(), c.layout, got.status().to_string().c_str());
        for (size_t i = 0; ok && i < ref->size(); ++i) worst = std::max(worst, std::fabs((*got)[i] / (*ref)[i] - 1));
        ok = ok && worst <= tol;
      }
      char what[160];
      std::snprintf(what, sizeof what, "%s %s, %lld steps: max rel. loss diff (<= %.0e)", c.layout,
                    grad_reduce_name(g), (long long)c.steps, tol);
      report(world, what, worst, ok);
    }
  }
}

}  // namespace
}  // namespace loom::exec

int main(int argc, char** argv) {
  using namespace loom;
  using namespace loom::exec;
  MpiTestSetup setup = mpi_test_setup(&argc, &argv, 120);
  if (!setup.world) return 1;
  auto& world = setup.world;
  collectives(*world);
  training(*world, setup.data.get());
  if (world->rank() == 0) std::printf("%d failed\n", failures);
  world.reset();
  mpi_finalize();
  return failures ? 1 : 0;
}
