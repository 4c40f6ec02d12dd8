// device_info.cu — CUDA device discovery through the runtime API (no driver library linked).
#include <fmt/format.h>

#include "cuda/cuda_check.h"
#include "cuda/device_info.h"
#include "cuda/error.h"

namespace carousel {

namespace detail {
void throw_cuda_error(cudaError_t err, const char* stmt, const char* file, int line) {
  int device = -1;
  cudaGetDevice(&device);
  throw Error(fmt::format("CUDA error {} ({}) in '{}' at {}:{} on device {}",
                          cudaGetErrorName(err), cudaGetErrorString(err), stmt, file, line,
                          device));
}
}  // namespace detail

bool cuda_built() { return true; }

CudaDevices list_cuda_devices() {
  CudaDevices out;
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    out.why_none = fmt::format("no usable CUDA device: cudaGetDeviceCount failed with {} ({})",
                               cudaGetErrorName(err), cudaGetErrorString(err));
    cudaGetLastError();  // clear the sticky error so later calls start clean
    return out;
  }
  if (count == 0) {
    out.why_none = "no CUDA device is visible (cudaGetDeviceCount returned 0)";
    return out;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, i));
    out.devices.push_back({i, prop.name, prop.totalGlobalMem, prop.major, prop.minor});
  }
  return out;
}

}  // namespace carousel
