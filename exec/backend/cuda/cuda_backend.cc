// The CUDA ComputeBackend: device memory from a caching allocator (freed
// blocks are kept per size and reused, as PyTorch's allocator does, so the
// per-micro-batch activations never hit cudaMalloc in steady state), copies,
// synchronization, and the peak of live tensor bytes.
//
// LOOM_CUDA_SYNC_DEBUG=1: the table is wrapped in a SyncCheckKernels
// (exec/backend/kernel_sync_check.h) that synchronizes after every op and
// names the op a device error comes from, and every copy, fill and zeroing
// allocation synchronizes too (a fault there ends the process naming it).
#include <cuda_runtime.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "exec/backend/backend_error.h"
#include "exec/backend/cuda/cuda_backend.h"
#include "exec/backend/cuda/cuda_kernels.h"
#include "exec/backend/cuda/cuda_op_timer.h"
#include "exec/backend/kernel_sync_check.h"
#include "exec/backend/memory_ledger.h"
#include "exec/backend/cuda/cuda_ops.h"

namespace loom::exec {

namespace {

[[noreturn]] void fatal(cudaError_t e, const char* what) {
  // ComputeBackend's allocation and copy calls have no Status: they throw a
  // BackendError (exec/backend/backend_error.h) that the trainer's entry
  // points return as their Status.
  throw_backend_error(internal_error(std::string("CUDA backend: ") + what + ": " + cudaGetErrorName(e) + " (" +
                                     cudaGetErrorString(e) +
                                     "); the device is in an error state: check `nvidia-smi` and rerun with "
                                     "LOOM_CUDA_SYNC_DEBUG=1 to name the kernel"));
}

std::string gib(double bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f GiB", bytes / double(1ull << 30));
  return b;
}

bool sync_debug_requested() {
  const char* e = std::getenv("LOOM_CUDA_SYNC_DEBUG");
  return e && *e && std::string(e) != "0";
}

class CudaBackend final : public ComputeBackend {
 public:
  explicit CudaBackend(int device) : device_(device) {
    if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) fatal(e, "cudaSetDevice");
    if (cudaError_t e = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking); e != cudaSuccess)
      fatal(e, "cudaStreamCreate");
    // The kernels' small stream-ordered scratch (cudaMallocAsync) stays cached
    // in the device's pool instead of going back to the driver at every sync.
    cudaMemPool_t pool = nullptr;
    if (cudaDeviceGetDefaultMemPool(&pool, device) == cudaSuccess) {
      uint64_t keep = UINT64_MAX;
      cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
    }
    (void)cudaGetLastError();
  }
  Status start_kernels(Precision precision) {
    LOOM_ASSIGN_OR_RETURN(kernels_, make_cuda_kernels(this, stream_, precision));
    if (sync_debug_) {
      std::fprintf(stderr, "loom: LOOM_CUDA_SYNC_DEBUG: %s synchronizes after every kernel and copy (slow)\n",
                   name().c_str());
      wrappers_.push_back(std::make_unique<SyncCheckKernels>(
          *kernels_, [this] { return wait_for_stream(); }, "LOOM_CUDA_SYNC_DEBUG"));
    }
    return Status::ok();
  }
  ~CudaBackend() override {
    while (!wrappers_.empty()) wrappers_.pop_back();  // outermost first
    kernels_.reset();  // its buffers go back to this allocator first
    cudaStreamSynchronize(stream_);
    for (Staging& st : staging_) {
      if (st.done) cudaEventSynchronize(st.done), cudaEventDestroy(st.done);
      if (st.host) cudaFreeHost(st.host);
    }
    if (copy_stream_) cudaStreamDestroy(copy_stream_);
    for (auto& [bytes, p] : free_) cudaFree(p);
    cudaStreamDestroy(stream_);
  }
  std::string name() const override { return "cuda:" + std::to_string(device_); }
  bool host_visible() const override { return false; }

  void* allocate(size_t bytes) override {
    void* p = allocate_uninitialized(bytes);
    // The interface promises zero-filled memory.
    if (cudaError_t e = cudaMemsetAsync(p, 0, round_up(bytes), stream_); e != cudaSuccess) fatal(e, "cudaMemsetAsync");
    debug_check("allocate (zero fill)", bytes);
    return p;
  }
  void* allocate_uninitialized(size_t bytes) override {
    const size_t rounded = round_up(bytes);
    void* p = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.find(rounded);
      if (it != free_.end()) {
        p = it->second;
        free_.erase(it);
      }
    }
    if (!p) {
      cudaError_t e = cudaMalloc(&p, rounded);
      if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        release_cache();  // give the cached blocks back and try once more
        e = cudaMalloc(&p, rounded);
        if (e == cudaErrorMemoryAllocation) {
          (void)cudaGetLastError();
          size_t free_b = 0, total_b = 0;
          (void)cudaMemGetInfo(&free_b, &total_b);
          (void)cudaGetLastError();
          throw_backend_error(resource_exhausted(
              "out of memory on GPU " + std::to_string(device_) + ": allocating " + gib(double(rounded)) +
              " with " + gib(double(ledger_.live_bytes())) + " of tensors live (peak " +
              gib(double(ledger_.peak_bytes())) + "), " + gib(double(free_b)) + " free of " + gib(double(total_b)) +
              "; lower the micro-batch, use recompute=selective or full, ZeRO, or more pipeline / tensor ranks"));
        }
      }
      if (e != cudaSuccess) fatal(e, "cudaMalloc");
    }
    if (poison_uninitialized())
      if (cudaError_t e = cudaMemsetAsync(p, 0xFF, rounded, stream_); e != cudaSuccess) fatal(e, "cudaMemsetAsync");
    ledger_.on_allocate(p, bytes);
    std::lock_guard<std::mutex> lock(mu_);
    sizes_[p] = rounded;
    return p;
  }
  void release(void* ptr, size_t bytes) override {
    if (!ptr) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sizes_.find(ptr);
    const size_t rounded = it != sizes_.end() ? it->second : round_up(bytes);
    if (it != sizes_.end()) sizes_.erase(it);
    free_.emplace(rounded, ptr);
    ledger_.on_release(ptr);
  }
  size_t peak_allocated_bytes() const override { return ledger_.peak_bytes(); }
  size_t allocated_bytes() const override { return ledger_.live_bytes(); }
  MemoryBreakdown peak_memory_breakdown() const override { return ledger_.peak_breakdown(); }
  // Device memory cannot be returned in place: the range is zeroed (it reads
  // as zeros until rewritten) and no longer counted as resident.
  void discard(void* ptr, size_t bytes) override {
    if (cudaError_t e = cudaMemsetAsync(ptr, 0, bytes, stream_); e != cudaSuccess) fatal(e, "cudaMemsetAsync");
    debug_check("discard", bytes);
    ledger_.on_discard(ptr, bytes);
  }
  void reclaim(void* ptr, size_t bytes) override { ledger_.on_reclaim(ptr, bytes); }
  void copy_to_device(void* dst, const void* src, size_t bytes) override {
    if (cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_); e != cudaSuccess)
      fatal(e, "cudaMemcpyAsync to device");
    debug_check("copy_to_device", bytes);
    synchronize();  // the host buffer may be reused as soon as this returns
  }
  // Two pinned staging slots used in turn: the host fills one while the
  // other's copy may still be in flight on the copy stream.
  void copy_to_device_async(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    if (!copy_stream_ && cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking) != cudaSuccess)
      fatal(cudaGetLastError(), "cudaStreamCreate (copy stream)");
    Staging& st = staging_[next_slot_];
    next_slot_ ^= 1;
    if (st.done) {
      if (cudaError_t e = cudaEventSynchronize(st.done); e != cudaSuccess) fatal(e, "cudaEventSynchronize");
    } else if (cudaError_t e = cudaEventCreateWithFlags(&st.done, cudaEventDisableTiming); e != cudaSuccess) {
      fatal(e, "cudaEventCreate");
    }
    if (st.bytes < bytes) {
      if (st.host) cudaFreeHost(st.host);
      st.host = nullptr;
      if (cudaError_t e = cudaMallocHost(&st.host, bytes); e != cudaSuccess) fatal(e, "cudaMallocHost");
      st.bytes = bytes;
    }
    std::memcpy(st.host, src, bytes);
    // The copy must not overtake kernels still using `dst` (it may be reused).
    if (cudaError_t e = cudaEventRecord(st.done, stream_); e != cudaSuccess) fatal(e, "cudaEventRecord");
    if (cudaError_t e = cudaStreamWaitEvent(copy_stream_, st.done, 0); e != cudaSuccess) fatal(e, "cudaStreamWaitEvent");
    if (cudaError_t e = cudaMemcpyAsync(dst, st.host, bytes, cudaMemcpyHostToDevice, copy_stream_); e != cudaSuccess)
      fatal(e, "cudaMemcpyAsync (copy stream)");
    if (cudaError_t e = cudaEventRecord(st.done, copy_stream_); e != cudaSuccess) fatal(e, "cudaEventRecord");
    if (cudaError_t e = cudaStreamWaitEvent(stream_, st.done, 0); e != cudaSuccess) fatal(e, "cudaStreamWaitEvent");
    debug_check("copy_to_device_async", bytes);
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    if (cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_); e != cudaSuccess)
      fatal(e, "cudaMemcpyAsync to host");
    debug_check("copy_to_host", bytes);
    synchronize();
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (dst == src || bytes == 0) return;
    if (cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_); e != cudaSuccess)
      fatal(e, "cudaMemcpyAsync on device");
    debug_check("copy", bytes);
  }
  void fill_zero(void* ptr, size_t bytes) override {
    if (cudaError_t e = cudaMemsetAsync(ptr, 0, bytes, stream_); e != cudaSuccess) fatal(e, "cudaMemsetAsync");
    debug_check("fill_zero", bytes);
  }
  void synchronize() override {
    if (cudaError_t e = cudaStreamSynchronize(stream_); e != cudaSuccess) fatal(e, "cudaStreamSynchronize");
  }
  Kernels& kernels() override { return wrappers_.empty() ? *kernels_ : *wrappers_.back(); }
  Status wrap_kernels(std::unique_ptr<Kernels> wrapper) override {
    if (!wrapper) return invalid_argument("wrap_kernels: no wrapper");
    wrappers_.push_back(std::move(wrapper));
    return Status::ok();
  }
  std::unique_ptr<OpTimer> make_op_timer() override { return make_cuda_op_timer(stream_); }
  void* native_stream() override { return stream_; }

 private:
  // The stream's work done, or the device error that stopped it.
  Status wait_for_stream() {
    const cudaError_t e = cudaStreamSynchronize(stream_);
    if (e == cudaSuccess) return Status::ok();
    return internal_error(std::string("CUDA error '") + cudaGetErrorString(e) + "' (" + cudaGetErrorName(e) + ")");
  }
  // LOOM_CUDA_SYNC_DEBUG: after a copy or fill, wait for it (and the copy
  // stream) and end the process naming it if the device failed.
  void debug_check(const char* what, size_t bytes) {
    if (!sync_debug_) return;
    cudaError_t e = cudaStreamSynchronize(stream_);
    if (e == cudaSuccess && copy_stream_) e = cudaStreamSynchronize(copy_stream_);
    if (e == cudaSuccess) return;
    // A fault a kernel raised earlier was named by the table's check already.
    const Status table = kernels().status();
    throw_backend_error(internal_error(std::string("LOOM_CUDA_SYNC_DEBUG: CUDA error '") + cudaGetErrorString(e) +
                                       "' (" + cudaGetErrorName(e) + ") in " + what + " (bytes=" +
                                       std::to_string(bytes) + ")" +
                                       (table.is_ok() ? std::string() : "; first reported: " + table.message())));
  }
  // 512-byte granularity below 1 MB, 2 MB above (fewer distinct cached sizes).
  static size_t round_up(size_t b) {
    const size_t g = b < (1u << 20) ? 512 : (2u << 20);
    return (std::max<size_t>(b, 1) + g - 1) / g * g;
  }
  void release_cache() {
    std::lock_guard<std::mutex> lock(mu_);
    cudaStreamSynchronize(stream_);
    for (auto& [bytes, p] : free_) cudaFree(p);
    free_.clear();
  }
  int device_;
  cudaStream_t stream_ = nullptr;
  std::mutex mu_;
  std::multimap<size_t, void*> free_;
  std::map<void*, size_t> sizes_;
  MemoryLedger ledger_;
  std::unique_ptr<Kernels> kernels_;
  const bool sync_debug_ = sync_debug_requested();
  std::vector<std::unique_ptr<Kernels>> wrappers_;  // each over the one before (the first over kernels_)
  struct Staging {
    void* host = nullptr;
    size_t bytes = 0;
    cudaEvent_t done = nullptr;
  };
  cudaStream_t copy_stream_ = nullptr;
  Staging staging_[2];
  int next_slot_ = 0;
};

}  // namespace

Result<std::unique_ptr<ComputeBackend>> make_cuda_backend(int device, Precision precision) {
  if (precision == Precision::kFp8)
    return unsupported("the CUDA backend trains in fp32, bf16 or fp16 (with loss scaling), not fp8");
  const int n = cuda::device_count();
  if (n == 0) return unsupported("the CUDA backend needs an NVIDIA GPU; none is visible (use the CPU backend)");
  if (device < 0 || device >= n)
    return invalid_argument("CUDA device " + std::to_string(device) + " does not exist (" + std::to_string(n) +
                            " visible)");
  auto backend = std::make_unique<CudaBackend>(device);
  LOOM_RETURN_IF_ERROR(backend->start_kernels(precision));
  return std::unique_ptr<ComputeBackend>(std::move(backend));
}

}  // namespace loom::exec
