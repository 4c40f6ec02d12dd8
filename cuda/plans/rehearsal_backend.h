// rehearsal_backend.h — the GPU's fast tier rehearsed on a CPU (config key
// rehearse_gpu_kernels): a CpuBackend that declares exactly the fast tier's native bfloat16 ops
// (fast_tier_ops.h, the table the CUDA backend reads), so the Backend front end validates every
// bfloat16 call by the rules the GPU run will meet, and its do_<op> receives the bfloat16
// tensors as the CUDA kernels do.
//
// Why: the CPU backend alone stages every bfloat16 op through float32 copies, which accepts any
// mix of dtypes that widens to one; the fast tier takes bfloat16 itself and accepts only the
// documented mixes (compute/backend.h's conventions). A model change that passes a mix the GPU
// refuses would stop the first GPU run at its first backward — with this backend it stops a CI
// test instead.
//
// Numbers: each native op keeps the fast kernel's dtype contract — bfloat16 values widened to
// float32 (exact), float32 math, each bfloat16 output rounded once, float32 accumulators
// (parameter gradients) added to in float32 — with the CPU backend's kernels and summation order,
// which is what the CPU's staging computes: a run rehearsing the GPU gives the same bits as the
// plain CPU run. What differs is only which calls are accepted.
#pragma once

#include <memory>

#include "compute/cpu_backend.h"

namespace carousel::gpu {

// As CpuBackend(device_index, memory_limit_bytes), rehearsing the fast tier.
std::unique_ptr<Backend> make_rehearsal_backend(int device_index,
                                                std::size_t memory_limit_bytes = 0);

}  // namespace carousel::gpu
