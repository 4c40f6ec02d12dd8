// without_cuda.cpp — GPU discovery and the CUDA backend factory for builds without CUDA: both say
// so.
#include "cuda/device_info.h"

namespace carousel {

bool cuda_built() { return false; }

CudaDevices list_cuda_devices() {
  CudaDevices out;
  out.why_none =
      "carousel was built without CUDA (CAROUSEL_CUDA=OFF or nvcc not found at configure time)";
  return out;
}

}  // namespace carousel

#include "compute/error.h"
#include "cuda/cuda_backend.h"

namespace carousel {

std::unique_ptr<Backend> make_cuda_backend(int, int, GpuKernels) {
  fail(
      "device=cuda: carousel was built without CUDA (CAROUSEL_CUDA=OFF or nvcc not found at "
      "configure time); rebuild with CAROUSEL_CUDA=ON or use device=cpu");
}

}  // namespace carousel
