// cudnn_attention_unavailable.cpp — CudnnAttention for builds configured without the cuDNN
// frontend headers or cudnn.h (cuda/CMakeLists.txt chooses this file then): open() says so once
// and the fast tier uses the reference attention.
#include <spdlog/spdlog.h>

#include <mutex>

#include "cuda/fast/cudnn_attention.h"

namespace carousel::gpu {

std::unique_ptr<CudnnAttention> CudnnAttention::open(Backend&, int, cudaStream_t) {
  static std::once_flag warned;
  std::call_once(warned, [] {
    spdlog::warn(
        "gpu_kernels=fast without cuDNN attention: this build found no cuDNN frontend "
        "headers (PyPI nvidia-cudnn-frontend, installed by scripts/setup.sh) or no "
        "cudnn.h when it was configured; attention runs the reference kernel (many "
        "times slower at long sequences). Run scripts/setup.sh and rebuild");
  });
  return nullptr;
}

void note_reference_attention(DType, bool, bool) {}  // open() said it already

}  // namespace carousel::gpu
