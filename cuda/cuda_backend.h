// cuda_backend.h — the CUDA implementation of Backend (cuBLAS GEMMs, kernels built on the shared
// elementwise math), behind a factory so host code needs no CUDA headers.
//
// make_cuda_backend(d) gives a backend on GPU d (several logical devices may share one GPU:
// each backend has its own stream, cuBLAS handle and memory accounting). Without a CUDA build,
// or without a visible GPU, it throws carousel::Error saying why.
#pragma once

#include <memory>

#include "compute/backend.h"

namespace carousel {

std::unique_ptr<Backend> make_cuda_backend(int gpu, int logical_index = 0);

}  // namespace carousel
