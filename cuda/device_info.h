// device_info.h — which GPUs this process can use, and if none, why not.
//
// Always declared; when carousel is built without CUDA, list_cuda_devices() reports that as the
// reason. Used by `carousel info`, by device=auto, and by GPU tests to skip with a clear reason.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace carousel {

struct CudaDeviceInfo {
  int index = 0;
  std::string name;
  std::size_t total_memory = 0;
  int cc_major = 0, cc_minor = 0;
  bool memory_pools = true;  // stream-ordered allocation (cudaMallocAsync); else cudaMalloc
};

struct CudaDevices {
  std::vector<CudaDeviceInfo> devices;
  std::string why_none;  // set when devices is empty
};

CudaDevices list_cuda_devices();
bool cuda_built();  // carousel was compiled with the CUDA backend

}  // namespace carousel
