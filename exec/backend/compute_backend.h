// ComputeBackend: where the executor's math runs. One interface, one folder per
// backend (cpu/ now; cuda/ plugs in behind the same calls), chosen at run time.
//
// Buffers are device memory owned by the backend (host memory on the CPU
// backend). The model and runtime only hold DeviceBuffer objects and call the
// backend's ops; they never dereference device pointers themselves, except
// through host_view() on backends that are host-visible (the CPU backend),
// which the reference paths and tests use.
// Thread-safety: a backend is used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/memory_class.h"
#include "exec/backend/kernels.h"
#include "exec/backend/op_timer.h"

namespace loom::exec {

class ComputeBackend;

// A float32 (or int32) array in a backend's memory. Move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(ComputeBackend* backend, size_t bytes);  // zero-filled
  // Contents undefined: for outputs a kernel or copy overwrites entirely
  // (activations), which saves a memory pass per buffer.
  static DeviceBuffer uninitialized(ComputeBackend* backend, size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  float* f32() const { return static_cast<float*>(ptr_); }
  int32_t* i32() const { return static_cast<int32_t*>(ptr_); }
  size_t bytes() const { return bytes_; }
  size_t floats() const { return bytes_ / sizeof(float); }
  bool empty() const { return bytes_ == 0; }

 private:
  ComputeBackend* backend_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

class ComputeBackend {
 public:
  virtual ~ComputeBackend() = default;
  virtual std::string name() const = 0;       // "cpu", "cuda:0"
  virtual bool host_visible() const = 0;       // device pointers may be read by the host
  virtual void* allocate(size_t bytes) = 0;    // zero-filled
  // Contents undefined. With LOOM_POISON_UNINITIALIZED=1 in the environment
  // the bytes are set to 0xFF (NaN as floats, -1 as int32), so a read before
  // the first write shows up as NaN losses (the test suite runs that way too).
  virtual void* allocate_uninitialized(size_t bytes) { return allocate(bytes); }
  virtual void release(void* ptr, size_t bytes) = 0;
  virtual size_t peak_allocated_bytes() const = 0;
  virtual size_t allocated_bytes() const = 0;
  // What was live at the peak, by class (exec/backend/memory_ledger.h): the
  // figures sum to peak_allocated_bytes().
  virtual MemoryBreakdown peak_memory_breakdown() const = 0;
  // Gives the memory of [ptr, ptr + bytes) back while keeping the range
  // addressable; it reads as zeros until written again (ZeRO-3 releases the
  // parameters it does not own between uses). reclaim() accounts the range
  // as resident again before it is rewritten.
  virtual void discard(void* ptr, size_t bytes) = 0;
  virtual void reclaim(void* ptr, size_t bytes) = 0;
  // Copies between host and device (plain memcpy on the CPU backend).
  virtual void copy_to_device(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy_to_host(void* dst, const void* src, size_t bytes) = 0;
  // Host to device without waiting: the source is staged (in pinned memory on
  // CUDA) and may be reused when this returns; the copy runs on a copy
  // stream and the backend's later kernels wait for it. Plain memcpy on the CPU.
  virtual void copy_to_device_async(void* dst, const void* src, size_t bytes) { copy_to_device(dst, src, bytes); }
  // Within the backend's memory (ordered with the kernels), and zero-filling.
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  virtual void fill_zero(void* ptr, size_t bytes) = 0;
  virtual void synchronize() = 0;
  // The ops (exec/backend/kernels.h), on this backend's memory: the
  // backend's own table, or the last wrapper installed over it.
  virtual Kernels& kernels() = 0;
  // Puts `wrapper` in front of the table: kernels() returns it from now on.
  // It must forward to the table kernels() returned before this call (a
  // decorator such as exec/backend/kernel_profile.h); the backend owns it and
  // destroys it before its own table. Install it before anything (a Trainer)
  // holds on to kernels(). kUnsupported where the backend has no such slot.
  virtual Status wrap_kernels(std::unique_ptr<Kernels> wrapper) {
    return unsupported("the " + name() + " backend cannot wrap its kernel table");
  }
  // Times ops in the order the backend runs them (exec/backend/op_timer.h):
  // the host clock here, which is right for synchronous backends; device
  // backends record events on their stream.
  virtual std::unique_ptr<OpTimer> make_op_timer() { return make_host_op_timer(); }
  // The device stream the kernels run on (cudaStream_t), for communicators
  // that must order their work after it; null on the CPU.
  virtual void* native_stream() { return nullptr; }
};

// Whether LOOM_POISON_UNINITIALIZED is set (read once).
bool poison_uninitialized();

// The CPU backend: host memory, kernels from exec/backend/cpu_ops.h (fp32).
std::unique_ptr<ComputeBackend> make_cpu_backend();
// The CPU kernel table (forwards to cpu::), for backends and tests.
std::unique_ptr<Kernels> make_cpu_kernels();

}  // namespace loom::exec
