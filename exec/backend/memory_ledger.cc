#include "exec/backend/memory_ledger.h"

#include <algorithm>

namespace loom::exec {

namespace {
thread_local MemoryClass t_class = MemoryClass::kOther;
}  // namespace

MemoryClassScope::MemoryClassScope(MemoryClass c) : prev_(t_class) { t_class = c; }
MemoryClassScope::~MemoryClassScope() { t_class = prev_; }
MemoryClass current_memory_class() { return t_class; }

void MemoryLedger::add(MemoryClass c, size_t bytes) {
  live_[size_t(c)] += double(bytes);
  total_ += bytes;
  if (total_ > peak_) {
    peak_ = total_;
    at_peak_ = live_;
  }
}

std::map<uintptr_t, MemoryLedger::Block>::iterator MemoryLedger::containing(const void* p) {
  const uintptr_t a = uintptr_t(p);
  auto it = blocks_.upper_bound(a);
  if (it == blocks_.begin()) return blocks_.end();
  --it;
  return a < it->first + std::max<size_t>(it->second.bytes, 1) ? it : blocks_.end();
}

void MemoryLedger::on_allocate(const void* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  const MemoryClass c = current_memory_class();
  blocks_[uintptr_t(p)] = Block{bytes, bytes, c};
  add(c, bytes);
}

void MemoryLedger::on_release(const void* p) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blocks_.find(uintptr_t(p));
  if (it == blocks_.end()) return;
  live_[size_t(it->second.cls)] -= double(it->second.resident);
  total_ -= it->second.resident;
  blocks_.erase(it);
}

void MemoryLedger::on_discard(const void* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = containing(p);
  if (it == blocks_.end()) return;
  bytes = std::min(bytes, it->second.resident);
  it->second.resident -= bytes;
  live_[size_t(it->second.cls)] -= double(bytes);
  total_ -= bytes;
}

void MemoryLedger::on_reclaim(const void* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = containing(p);
  if (it == blocks_.end()) return;
  bytes = std::min(bytes, it->second.bytes - it->second.resident);
  it->second.resident += bytes;
  add(it->second.cls, bytes);
}

size_t MemoryLedger::live_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return total_;
}
size_t MemoryLedger::peak_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_;
}
MemoryBreakdown MemoryLedger::live_breakdown() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_;
}
MemoryBreakdown MemoryLedger::peak_breakdown() const {
  std::lock_guard<std::mutex> lock(mu_);
  return at_peak_;
}

}  // namespace loom::exec
