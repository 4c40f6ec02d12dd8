// float8_ops.h — the CUDA kernels of the float8 ops (Backend::amax, quantize_float8) on every
// kernel tier: the scalar code is compute/float8/float8.h, the CPU backend's, so both quantise to
// the same bits. amax: a grid-stride pass of kThreads x at most 1024 blocks, each block's amax
// by a shared-memory tree, then one block combining the blocks' (a max is exact: the order does
// not matter, NaN propagates). quantize_float8: one thread per element. Tensors arrive validated
// by the Backend front end (compute/float8/backend_float8.cpp).
//
// Written and compiled here, not yet run on a GPU (docs/float8.md). The GPU part of float8 adds
// cuBLASLt float8 GEMMs with scale pointers, which make these the reference tier's kernels.
#pragma once

#include <cuda_runtime.h>

#include "compute/backend.h"
#include "cuda/fast/fast_ops.h"

namespace carousel::gpu::float8 {

void amax(const fast::Launch& l, const Tensor& x, const Tensor& out);
void quantize(const fast::Launch& l, const Tensor& x, Float8Format format, float scale,
              const Tensor& out);

}  // namespace carousel::gpu::float8
