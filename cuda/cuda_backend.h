// cuda_backend.h — the CUDA implementation of Backend (cuBLAS GEMMs, kernels built on the shared
// elementwise math), behind a factory so host code needs no CUDA headers.
//
// make_cuda_backend(d) gives a backend on GPU d (several logical devices may share one GPU:
// each backend has its own stream, cuBLAS handle and memory accounting). Without a CUDA build,
// or without a visible GPU, it throws carousel::Error saying why.
//
// Two kernel tiers (config key gpu_kernels):
//   Fast       cuda/fast/: cuBLASLt GEMMs with cached plans (lt_gemm.h), cuDNN flash attention
//              for bfloat16 (cudnn_attention.h), fused float32 / native bf16 kernels (fast_ops.h),
//              launched as cuda/plans/ decides (plain C++, tested on CPUs);
//   Reference  classic cuBLAS and the simple kernels (reference_kernels.cuh): the fast tier's
//              oracle on the GPU, as the CPU backend is everyone's.
// Float64 always runs on the reference tier; so does float32 attention (cuDNN's fused attention
// takes bfloat16), which the fast backend says once in the log.
#pragma once

#include <memory>

#include "compute/backend.h"

namespace carousel {

enum class GpuKernels { Fast, Reference };

std::unique_ptr<Backend> make_cuda_backend(int gpu, int logical_index = 0,
                                           GpuKernels kernels = GpuKernels::Fast);

}  // namespace carousel
