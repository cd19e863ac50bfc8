#include <atomic>
#include <cstdlib>
#include <cstring>
#include <malloc.h>
#include <new>
#include <sys/mman.h>
#include <unistd.h>
#include <string>
#include <utility>
#include <vector>

#include "exec/backend/backend_error.h"
#include "exec/backend/compute_backend.h"
#include "exec/backend/memory_ledger.h"

namespace loom::exec {

DeviceBuffer::DeviceBuffer(ComputeBackend* backend, size_t bytes) : backend_(backend), bytes_(bytes) {
  if (bytes_) ptr_ = backend_->allocate(bytes_);
}

DeviceBuffer DeviceBuffer::uninitialized(ComputeBackend* backend, size_t bytes) {
  DeviceBuffer b;
  b.backend_ = backend;
  b.bytes_ = bytes;
  if (bytes) b.ptr_ = backend->allocate_uninitialized(bytes);
  return b;
}

bool poison_uninitialized() {
  static const bool on = [] {
    const char* e = std::getenv("LOOM_POISON_UNINITIALIZED");
    return e && *e && std::string(e) != "0";
  }();
  return on;
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) backend_->release(ptr_, bytes_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept : backend_(o.backend_), ptr_(o.ptr_), bytes_(o.bytes_) {
  o.ptr_ = nullptr;
  o.bytes_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) backend_->release(ptr_, bytes_);
    backend_ = o.backend_;
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

namespace {

class CpuBackend final : public ComputeBackend {
 public:
  std::string name() const override { return "cpu"; }
  bool host_visible() const override { return true; }
  void* allocate(size_t bytes) override {
    void* p = allocate_uninitialized(bytes);
    std::memset(p, 0, (bytes + 63) / 64 * 64);
    return p;
  }
  void* allocate_uninitialized(size_t bytes) override {
    // 64-byte aligned for Eigen's vectorized kernels.
    size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    if (!p)
      throw_backend_error(resource_exhausted(
          "out of host memory: allocating " + std::to_string(rounded >> 20) + " MiB with " +
          std::to_string(ledger_.live_bytes() >> 20) + " MiB of tensors live on this rank; lower the micro-batch, use "
          "recompute, ZeRO, or more ranks (or more memory per rank)"));
    if (poison_uninitialized()) std::memset(p, 0xFF, rounded);
    ledger_.on_allocate(p, bytes);
    return p;
  }
  void release(void* ptr, size_t) override {
    ledger_.on_release(ptr);
    std::free(ptr);
  }
  size_t peak_allocated_bytes() const override { return ledger_.peak_bytes(); }
  size_t allocated_bytes() const override { return ledger_.live_bytes(); }
  MemoryBreakdown peak_memory_breakdown() const override { return ledger_.peak_breakdown(); }
  // Whole pages inside the range go back to the OS (MADV_DONTNEED: anonymous
  // pages read as zeros afterwards); the partial pages at the ends are zeroed.
  void discard(void* ptr, size_t bytes) override {
    auto [b, e] = inner_pages(ptr, bytes);
    char* p = static_cast<char*>(ptr);
    if (b >= e) {
      std::memset(p, 0, bytes);
      return;
    }
    std::memset(p, 0, size_t(b - p));
    std::memset(e, 0, size_t(p + bytes - e));
    ::madvise(b, size_t(e - b), MADV_DONTNEED);
    ledger_.on_discard(b, size_t(e - b));
  }
  void reclaim(void* ptr, size_t bytes) override {
    auto [b, e] = inner_pages(ptr, bytes);
    if (b < e) ledger_.on_reclaim(b, size_t(e - b));
  }
  void copy_to_device(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (dst != src) std::memcpy(dst, src, bytes);
  }
  void fill_zero(void* ptr, size_t bytes) override { std::memset(ptr, 0, bytes); }
  void synchronize() override {}
  Kernels& kernels() override { return wrappers_.empty() ? *kernels_ : *wrappers_.back(); }
  Status wrap_kernels(std::unique_ptr<Kernels> wrapper) override {
    if (!wrapper) return invalid_argument("wrap_kernels: no wrapper");
    wrappers_.push_back(std::move(wrapper));
    return Status::ok();
  }
  ~CpuBackend() override {
    while (!wrappers_.empty()) wrappers_.pop_back();  // outermost first, before the table
  }

 private:
  static std::pair<char*, char*> inner_pages(void* ptr, size_t bytes) {
    const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
    uintptr_t b = (uintptr_t(ptr) + page - 1) / page * page, e = (uintptr_t(ptr) + bytes) / page * page;
    return {reinterpret_cast<char*>(b), reinterpret_cast<char*>(e)};
  }
  MemoryLedger ledger_;
  std::unique_ptr<Kernels> kernels_ = make_cpu_kernels();
  std::vector<std::unique_ptr<Kernels>> wrappers_;  // each over the one before (the first over kernels_)
};

}  // namespace

std::unique_ptr<ComputeBackend> make_cpu_backend() {
  // Activations are allocated and freed every micro-batch: keep freed blocks in
  // the heap (no mmap / munmap per buffer, no page faults on every reuse), as a
  // caching allocator would.
  static const bool tuned = [] {
    ::mallopt(M_MMAP_THRESHOLD, 1 << 30);
    ::mallopt(M_TRIM_THRESHOLD, 1 << 30);
    return true;
  }();
  (void)tuned;
  return std::make_unique<CpuBackend>();
}

}  // namespace loom::exec
