// cudnn_sdpa.h in a build without the cudnn-frontend headers: the attention
// stays on the cuBLAS path.
#include "exec/backend/cuda/cudnn_sdpa.h"

namespace loom::cuda {

bool cudnn_sdpa_built() { return false; }
int64_t cudnn_sdpa_executions() { return 0; }
bool cudnn_loaded() { return false; }

Result<std::unique_ptr<CudnnSdpa>> make_cudnn_sdpa(cudaStream_t) {
  return unsupported(
      "this build has no cuDNN attention: the cudnn-frontend headers were not found when it was configured "
      "(scripts/setup.sh installs them from the nvidia-cudnn-frontend wheel; or set LOOM_CUDNN_FRONTEND_DIR)");
}

}  // namespace loom::cuda
