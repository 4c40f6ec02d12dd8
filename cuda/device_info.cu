// device_info.cu — CUDA device discovery through the runtime API (no driver library linked).
#include <cuda_runtime.h>
#include <fmt/format.h>

#include "compute/error.h"
#include "cuda/device_info.h"

namespace carousel {

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
    int pools = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, i));
    out.devices.push_back({i, prop.name, prop.totalGlobalMem, prop.major, prop.minor, pools != 0});
  }
  return out;
}

}  // namespace carousel
