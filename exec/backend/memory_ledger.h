// MemoryLedger: a backend's account of its live buffers by class
// (core/memory_class.h), with the breakdown at the peak.
//
// An allocation is charged to the class of the innermost MemoryClassScope on
// the allocating thread (kOther outside any scope); release, discard and
// reclaim charge the class the buffer was allocated under, whichever thread
// calls them. At each new peak of the total the per-class figures are kept,
// so peak_breakdown() says what was live when the rank needed the most
// memory, the figure the simulator's memory model predicts. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

#include "core/memory_class.h"

namespace loom::exec {

// Charges the allocations this thread makes while it lives to `c`.
class MemoryClassScope {
 public:
  explicit MemoryClassScope(MemoryClass c);
  ~MemoryClassScope();
  MemoryClassScope(const MemoryClassScope&) = delete;
  MemoryClassScope& operator=(const MemoryClassScope&) = delete;

 private:
  MemoryClass prev_;
};
MemoryClass current_memory_class();

class MemoryLedger {
 public:
  // A new buffer [p, p + bytes), charged to current_memory_class().
  void on_allocate(const void* p, size_t bytes);
  // The buffer that starts at p is freed (its whole remaining resident size).
  void on_release(const void* p);
  // [p, p + bytes), inside one live buffer, stops / starts again being resident.
  void on_discard(const void* p, size_t bytes);
  void on_reclaim(const void* p, size_t bytes);

  size_t live_bytes() const;
  size_t peak_bytes() const;
  MemoryBreakdown live_breakdown() const;
  MemoryBreakdown peak_breakdown() const;

 private:
  struct Block {
    size_t bytes = 0;     // allocated size
    size_t resident = 0;  // counted now (bytes minus discarded ranges)
    MemoryClass cls = MemoryClass::kOther;
  };
  // The live block containing p, or end().
  std::map<uintptr_t, Block>::iterator containing(const void* p);
  void add(MemoryClass c, size_t bytes);  // with mu_ held

  mutable std::mutex mu_;
  std::map<uintptr_t, Block> blocks_;
  MemoryBreakdown live_{}, at_peak_{};
  size_t total_ = 0, peak_ = 0;
};

}  // namespace loom::exec
