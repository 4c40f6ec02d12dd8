// fast_tier_ops.h — which Backend ops the GPU's fast tier takes in bfloat16 itself (its native
// ops: the front end validates them like float32 and does not stage them through float32
// copies). One table, read by the CUDA backend (cuda/cuda_backend.cu) and by the CPU rehearsal
// of the fast tier (cuda/plans/rehearsal_backend.h), so that a bfloat16 run on CPUs meets every
// front-end rule the GPU run will meet, in CI, before a GPU is lent.
//
// The native ops' dtype rules are the front end's (compute/op_check.h): every floating argument
// in the activations' dtype, except statistics (float32 beside bfloat16) and accumulated weight
// gradients (the activations' dtype or float32: rmsnorm_backward's dweight, embedding_backward's
// dtable). The fast kernels take exactly those mixes.
#pragma once

#include "compute/backend.h"

namespace carousel::gpu {

// Whether the fast tier takes `op` in bfloat16 itself. `cudnn_attention`: the backend opened
// cuDNN; attention is then native (cuDNN, or for a shape cuDNN refuses the reference kernel on
// float32 copies made inside the backend).
bool fast_tier_native_bf16(Backend::Op op, bool cudnn_attention);

}  // namespace carousel::gpu
