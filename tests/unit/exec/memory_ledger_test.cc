// The executor's memory ledger (exec/backend/memory_ledger.h): allocations
// charged to the scope's class, frees to the class they were allocated
// under, the breakdown at the peak, and the CPU backend wired to it.
#include "exec/backend/memory_ledger.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "exec/backend/compute_backend.h"

namespace loom::exec {
namespace {

double of(const MemoryBreakdown& b, MemoryClass c) { return b[size_t(c)]; }

TEST(MemoryLedger, ChargesTheInnermostScopeAndFreesToTheAllocatingClass) {
  MemoryLedger ledger;
  std::vector<char> arena(4096);
  char* base = arena.data();
  ledger.on_allocate(base, 100);  // no scope: other
  {
    MemoryClassScope w(MemoryClass::kWeights);
    ledger.on_allocate(base + 128, 200);
    {
      MemoryClassScope a(MemoryClass::kActivations);
      ledger.on_allocate(base + 512, 300);
    }
    ledger.on_allocate(base + 1024, 50);  // back to weights
  }
  EXPECT_EQ(current_memory_class(), MemoryClass::kOther);
  MemoryBreakdown live = ledger.live_breakdown();
  EXPECT_EQ(of(live, MemoryClass::kOther), 100);
  EXPECT_EQ(of(live, MemoryClass::kWeights), 250);
  EXPECT_EQ(of(live, MemoryClass::kActivations), 300);
  EXPECT_EQ(ledger.live_bytes(), 650u);
  // Freed on another thread, under another scope: still the activations' bytes.
  std::thread([&] {
    MemoryClassScope g(MemoryClass::kGrads);
    ledger.on_release(base + 512);
  }).join();
  live = ledger.live_breakdown();
  EXPECT_EQ(of(live, MemoryClass::kActivations), 0);
  EXPECT_EQ(of(live, MemoryClass::kGrads), 0);
  EXPECT_EQ(ledger.live_bytes(), 350u);
  // The peak and what was live at it.
  EXPECT_EQ(ledger.peak_bytes(), 650u);
  const MemoryBreakdown at = ledger.peak_breakdown();
  EXPECT_EQ(of(at, MemoryClass::kActivations), 300);
  EXPECT_EQ(of(at, MemoryClass::kWeights), 250);
  ledger.on_release(base + 3000);  // not a live buffer: nothing changes
  EXPECT_EQ(ledger.live_bytes(), 350u);
}

TEST(MemoryLedger, DiscardAndReclaimInsideABufferKeepItsClass) {
  MemoryLedger ledger;
  std::vector<char> arena(1 << 16);
  char* p = arena.data();
  {
    MemoryClassScope w(MemoryClass::kWeights);
    ledger.on_allocate(p, 40000);
  }
  ledger.on_discard(p + 4096, 16384);  // a range inside: ZeRO-3's shards not owned
  EXPECT_EQ(ledger.live_bytes(), 40000u - 16384u);
  EXPECT_EQ(of(ledger.live_breakdown(), MemoryClass::kWeights), 40000 - 16384);
  ledger.on_reclaim(p + 4096, 16384);
  ledger.on_reclaim(p + 4096, 16384);  // never more than the buffer
  EXPECT_EQ(ledger.live_bytes(), 40000u);
  ledger.on_discard(p + 8192, 8192);
  ledger.on_release(p);  // what is resident goes
  EXPECT_EQ(ledger.live_bytes(), 0u);
  EXPECT_EQ(of(ledger.live_breakdown(), MemoryClass::kWeights), 0);
}

TEST(MemoryLedger, TheCpuBackendReportsItsPeakByClass) {
  auto be = make_cpu_backend();
  {
    MemoryClassScope o(MemoryClass::kOptimizer);
    DeviceBuffer m(be.get(), 1 << 20);
    {
      MemoryClassScope a(MemoryClass::kActivations);
      DeviceBuffer x = DeviceBuffer::uninitialized(be.get(), 3 << 20);
    }
    DeviceBuffer small(be.get(), 1 << 10);
  }
  EXPECT_EQ(be->allocated_bytes(), 0u);
  EXPECT_EQ(be->peak_allocated_bytes(), size_t(4 << 20));
  const MemoryBreakdown at = be->peak_memory_breakdown();
  EXPECT_EQ(of(at, MemoryClass::kOptimizer), 1 << 20);
  EXPECT_EQ(of(at, MemoryClass::kActivations), 3 << 20);
  double sum = 0;
  for (double b : at) sum += b;
  EXPECT_EQ(sum, double(be->peak_allocated_bytes()));
}

}  // namespace
}  // namespace loom::exec
