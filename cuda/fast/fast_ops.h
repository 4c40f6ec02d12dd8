// fast_ops.h — the host side of the fast kernel tier: each function takes validated tensors (the
// Backend front end checked them), picks the element type and pack width, plans the launch
// (cuda/plans/launch_plan.h) and launches cuda/fast/fast_kernels.cuh on the backend's stream.
// Scratch (the RMSNorm weight-gradient partials, the embedding backward's sorted tokens) comes from
// the backend's stream-ordered pool. Storage: float32 or bfloat16; statistics and RoPE tables
// float32; the accumulated weight gradients (rmsnorm_backward's dweight, embedding_backward's
// dtable) the values' type or float32 beside bfloat16.
#pragma once

#include <cuda_runtime.h>

#include "compute/backend.h"

namespace carousel::gpu::fast {

struct Launch {
  Backend& backend;  // for scratch tensors
  int gpu;           // made current before each launch
  cudaStream_t stream;
};

void cast(const Launch& l, const Tensor& src, const Tensor& dst);
void scale(const Launch& l, const Tensor& x, double alpha);
void axpy(const Launch& l, double alpha, const Tensor& x, const Tensor& y);
void add(const Launch& l, const Tensor& a, const Tensor& b, const Tensor& out);
void embedding_forward(const Launch& l, const Tensor& table, const Tensor& tokens,
                       const Tensor& out);
void embedding_backward(const Launch& l, const Tensor& dout, const Tensor& tokens,
                        const Tensor& dtable);
void rmsnorm_forward(const Launch& l, const Tensor& x, const Tensor& weight, double eps,
                     const Tensor& out, const Tensor& rstd);
void rmsnorm_backward(const Launch& l, const Tensor& dout, const Tensor& x, const Tensor& weight,
                      const Tensor& rstd, const Tensor& dx, const Tensor& dweight);
void rope(const Launch& l, const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& out,
          bool backward);
void swiglu_forward(const Launch& l, const Tensor& gate, const Tensor& up, const Tensor& out);
void swiglu_backward(const Launch& l, const Tensor& dout, const Tensor& gate, const Tensor& up,
                     const Tensor& dgate, const Tensor& dup);
// losses (forward) or dlogits (backward) may be undefined.
void cross_entropy(const Launch& l, const Tensor& logits, const Tensor& targets,
                   const Tensor& losses, double dloss, const Tensor& dlogits);
// sum (squares: sum_squares) of every element, bitwise the same from run to run: double block
// partials in a grid fixed by the size, added on the host in block order (waits for the stream).
double sum(const Launch& l, const Tensor& x, bool squares);
void adamw(const Launch& l, const Tensor& param, const Tensor& grad, const Tensor& m,
           const Tensor& v, const math::AdamWScalars& scalars);

}  // namespace carousel::gpu::fast
