// cuDNN scaled-dot-product attention (cudnn_sdpa.h) through the
// cudnn-frontend graph API, with the frontend's dynamic loading
// (NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING): nothing links libcudnn; the
// frontend finds every cuDNN entry point in the handle loaded here.
// Built only where the headers were found (cmake/LoomCudnn.cmake); the
// graphs follow the frontend's samples/cpp/sdpa/fp16_{fwd,bwd}.cpp.
#include "exec/backend/cuda/cudnn_sdpa.h"

#include <dlfcn.h>

#include <cmath>
#include <cstdlib>
#include <exception>
#include <map>
#include <atomic>
#include <mutex>

#include <cudnn_frontend.h>

// The frontend's dynamic loading reads this handle (cudnn_frontend_shim.h).
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}

namespace loom::cuda {

namespace fe = cudnn_frontend;

bool cudnn_sdpa_built() { return true; }

namespace {

// The frontend loads a CUDA runtime of its own choosing (libcudart.so.12
// first when both are findable): make it the one this process runs on. Set
// at start-up (static initialization, before any thread could read the
// environment), unless the user set it.
const bool cudart_pinned = [] {
  return setenv("CUDNN_FRONTEND_CUDART_LIB_NAME",
                ("libcudart.so." + std::to_string(CUDART_VERSION / 1000)).c_str(), 0) == 0;
}();

std::atomic<int64_t>& executions() {
  static std::atomic<int64_t> n{0};
  return n;
}

// Loads libcudnn: once it has loaded, for the rest of the process; a failed
// attempt is retried by the next call (a test or a caller may fix the path).
Status load_cudnn() {
  static std::mutex mu;
  static Status unusable = Status::ok();  // a library that loaded but cannot serve: final (the
                                          // frontend caches the symbols it resolved from it)
  std::lock_guard<std::mutex> lock(mu);
  if (!unusable.is_ok()) return unusable;
  if (fe::cudnn_dlhandle) return Status::ok();
  const char* env = std::getenv("LOOM_CUDNN_LIBRARY");
  const std::string name = env && *env ? env : "libcudnn.so.9";
  dlerror();
  void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (!h) {
    const char* why = dlerror();
    return unsupported("cannot load cuDNN (" + name + ": " + (why ? why : "not found") +
                       "); put cuDNN 9's library folder on LD_LIBRARY_PATH (a CUDA toolkit's lib64, or a Python "
                       "environment's nvidia/cudnn/lib from the nvidia-cudnn-cu13 wheel) or set LOOM_CUDNN_LIBRARY "
                       "to its libcudnn.so.9");
  }
  fe::cudnn_dlhandle = h;
  try {
    const int64_t v = int64_t(fe::detail::get_backend_version());
    if (v >= 90000) return Status::ok();
    unusable = unsupported("cuDNN " + std::to_string(v) + " from " + name +
                       " is older than 9.0, which the fused attention needs; install cuDNN 9 (the nvidia-cudnn-cu13 "
                       "wheel) or set LOOM_CUDNN_LIBRARY");
  } catch (const std::exception& e) {
    unusable = unsupported("cuDNN from " + name + " is not usable: " + e.what());
  }
  return unusable;
}

std::string fe_message(fe::error_t e) { return e.get_message(); }

enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

// (B,T,H,D) memory seen as cuDNN's (B,H,T,D) dimensions.
fe::graph::Tensor_attributes bthd(const char* name, int64_t uid, const SdpaShape& s, int64_t H) {
  return fe::graph::Tensor_attributes()
      .set_name(name)
      .set_uid(uid)
      .set_dim({s.B, H, s.T, s.D})
      .set_stride({s.T * H * s.D, s.D, H * s.D, 1});
}

void set_bthd(const std::shared_ptr<fe::graph::Tensor_attributes>& t, int64_t uid, const SdpaShape& s, int64_t H) {
  t->set_output(true).set_uid(uid).set_dim({s.B, H, s.T, s.D}).set_stride({s.T * H * s.D, s.D, H * s.D, 1});
}

fe::graph::Tensor_attributes stats_attr(const SdpaShape& s) {
  return fe::graph::Tensor_attributes()
      .set_name("Stats")
      .set_uid(kStats)
      .set_dim({s.B, s.Hq, s.T, 1})
      .set_stride({s.Hq * s.T, s.T, 1, 1})
      .set_data_type(fe::DataType_t::FLOAT);
}

// LOOM_CUDNN_DETERMINISTIC=1: cuDNN's deterministic backward (dQ without
// atomics; slower), for bit-identical reruns.
bool deterministic_backward() {
  const char* e = std::getenv("LOOM_CUDNN_DETERMINISTIC");
  return e && std::string(e) == "1";
}

// `composite`: the forward through cuDNN's composite SDPA node instead of
// the frontend's automatic choice (the retry when that choice is refused).
std::shared_ptr<fe::graph::Graph> make_graph(const SdpaShape& s, bool backward, bool composite) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(s.bf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  auto q = g->tensor(bthd("Q", kQ, s, s.Hq));
  auto k = g->tensor(bthd("K", kK, s, s.Hk));
  auto v = g->tensor(bthd("V", kV, s, s.Hk));
  const float scale = float(1.0 / std::sqrt(double(s.D)));
  if (!backward) {
    auto opt = fe::graph::SDPA_attributes().set_name("loom_sdpa").set_generate_stats(true).set_attn_scale(scale);
    if (composite) opt.set_implementation(fe::AttentionImplementation_t::COMPOSITE);
    if (s.causal)
      opt.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT).set_diagonal_band_right_bound(0);
    auto [o, stats] = g->sdpa(q, k, v, opt);
    set_bthd(o, kO, s, s.Hq);
    stats->set_output(true)
        .set_uid(kStats)
        .set_data_type(fe::DataType_t::FLOAT)
        .set_dim({s.B, s.Hq, s.T, 1})
        .set_stride({s.Hq * s.T, s.T, 1, 1});
  } else {
    auto o = g->tensor(bthd("O", kO, s, s.Hq));
    auto dout = g->tensor(bthd("dO", kDO, s, s.Hq));
    auto stats = g->tensor(stats_attr(s));
    auto opt = fe::graph::SDPA_backward_attributes()
                   .set_name("loom_sdpa_backward")
                   .set_attn_scale(scale)
                   .set_deterministic_algorithm(deterministic_backward());
    if (s.causal)
      opt.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT).set_diagonal_band_right_bound(0);
    auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, dout, stats, opt);
    set_bthd(dq, kDQ, s, s.Hq);
    set_bthd(dk, kDK, s, s.Hk);
    set_bthd(dv, kDV, s, s.Hk);
  }
  return g;
}

class FrontendSdpa final : public CudnnSdpa {
 public:
  explicit FrontendSdpa(cudnnHandle_t h) : handle_(h) {}
  ~FrontendSdpa() override {
    plans_.clear();
    try {
      fe::detail::destroy_handle(handle_);
    } catch (...) {
    }
  }

  Result<size_t> prepare(const SdpaShape& s, bool backward) override {
    auto& slot = plans_[{s, backward}];
    if (slot.graph) return slot.workspace;
    if (!slot.failure.is_ok()) return slot.failure;
    const std::string what = std::string("cuDNN attention ") + (backward ? "backward" : "forward") + " at " +
                             s.to_string();
    // The forward is tried as the frontend chooses, then (refused) through
    // the composite node; the backward has one form.
    std::string why;
    for (bool composite : {false, true}) {
      if (composite && backward) break;
      try {
        auto g = make_graph(s, backward, composite);
        fe::error_t e = g->build(handle_, {fe::HeurMode_t::A});
        int64_t ws = 0;
        if (e.is_good()) e = g->get_workspace_size(ws);
        if (e.is_good()) {
          slot.graph = std::move(g);
          slot.workspace = size_t(ws);
          return slot.workspace;
        }
        why += (why.empty() ? "" : "; composite: ") + fe_message(e);
      } catch (const std::exception& ex) {
        why += (why.empty() ? "" : "; composite: ") + std::string(ex.what());
      }
    }
    slot.failure = unsupported(what + ": " + why);
    return slot.failure;
  }

  Status forward(const SdpaShape& s, const uint16_t* q, const uint16_t* k, const uint16_t* v, uint16_t* out,
                 float* lse, void* workspace) override {
    std::unordered_map<fe::graph::Tensor_attributes::uid_t, void*> pack = {
        {kQ, const_cast<uint16_t*>(q)}, {kK, const_cast<uint16_t*>(k)}, {kV, const_cast<uint16_t*>(v)},
        {kO, out},                      {kStats, lse}};
    return execute(s, false, pack, workspace);
  }

  Status backward(const SdpaShape& s, const uint16_t* q, const uint16_t* k, const uint16_t* v, const uint16_t* out,
                  const uint16_t* dout, const float* lse, uint16_t* dq, uint16_t* dk, uint16_t* dv,
                  void* workspace) override {
    std::unordered_map<fe::graph::Tensor_attributes::uid_t, void*> pack = {
        {kQ, const_cast<uint16_t*>(q)},     {kK, const_cast<uint16_t*>(k)},
        {kV, const_cast<uint16_t*>(v)},     {kO, const_cast<uint16_t*>(out)},
        {kDO, const_cast<uint16_t*>(dout)}, {kStats, const_cast<float*>(lse)},
        {kDQ, dq},                          {kDK, dk},
        {kDV, dv}};
    return execute(s, true, pack, workspace);
  }

  std::string version() const override {
    int64_t v = 0;
    try {
      v = int64_t(fe::detail::get_backend_version());
    } catch (...) {
    }
    return "cuDNN " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100) +
           " (frontend " + std::to_string(CUDNN_FRONTEND_MAJOR_VERSION) + "." +
           std::to_string(CUDNN_FRONTEND_MINOR_VERSION) + "." + std::to_string(CUDNN_FRONTEND_PATCH_VERSION) + ")";
  }

 private:
  struct Plan {
    std::shared_ptr<fe::graph::Graph> graph;
    size_t workspace = 0;
    Status failure = Status::ok();
  };
  Status execute(const SdpaShape& s, bool backward,
                 std::unordered_map<fe::graph::Tensor_attributes::uid_t, void*>& pack, void* workspace) {
    auto it = plans_.find({s, backward});
    if (it == plans_.end() || !it->second.graph)
      return internal_error("cuDNN attention at " + s.to_string() + " ran before prepare() built its plan");
    try {
      fe::error_t e = it->second.graph->execute(handle_, pack, workspace);
      if (!e.is_good())
        return internal_error(std::string("cuDNN attention ") + (backward ? "backward" : "forward") + " at " +
                              s.to_string() + ": " + fe_message(e));
    } catch (const std::exception& ex) {
      return internal_error(std::string("cuDNN attention at ") + s.to_string() + ": " + ex.what());
    }
    executions().fetch_add(1, std::memory_order_relaxed);
    return Status::ok();
  }

  cudnnHandle_t handle_;
  std::map<std::pair<SdpaShape, bool>, Plan> plans_;
};

}  // namespace

int64_t cudnn_sdpa_executions() { return executions().load(std::memory_order_relaxed); }
bool cudnn_loaded() { return fe::cudnn_dlhandle != nullptr; }

Result<std::unique_ptr<CudnnSdpa>> make_cudnn_sdpa(cudaStream_t stream) {
  LOOM_RETURN_IF_ERROR(load_cudnn());
  cudnnHandle_t h = nullptr;
  try {
    if (cudnnStatus_t st = fe::detail::create_handle(&h); st != CUDNN_STATUS_SUCCESS)
      return unsupported(std::string("cudnnCreate failed (") + fe::detail::get_error_string(st) +
                         "): cuDNN found no usable GPU or does not match this driver");
    if (cudnnStatus_t st = fe::detail::set_stream(h, stream); st != CUDNN_STATUS_SUCCESS) {
      fe::detail::destroy_handle(h);
      return unsupported(std::string("cudnnSetStream failed (") + fe::detail::get_error_string(st) + ")");
    }
  } catch (const std::exception& e) {
    return unsupported(std::string("cuDNN is not usable: ") + e.what());
  }
  return std::unique_ptr<CudnnSdpa>(std::make_unique<FrontendSdpa>(h));
}

}  // namespace loom::cuda
