// cudnn_attention.h — causal grouped-query attention through cuDNN's fused flash attention (SDPA
// forward and backward, the softmax statistics saved for the backward), for the fast tier with
// bfloat16 activations. Built with the cuDNN frontend's graph API in cudnn_attention.cpp, the only
// file that includes the frontend (one translation unit: it compiles slowly).
//
// cuDNN is loaded at run time (dlopen of libcudnn.so.9), not linked: a machine without it still
// runs carousel. When it cannot be loaded or is too old, open() logs a warning naming the library
// and the reason and returns null; the backend then uses the reference attention (never a silent
// slowdown).
// Graphs are built once per shape (cuda/plans/attention_plan.h: the key) and reused.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "compute/backend.h"

namespace carousel::gpu {

class CudnnAttention {
 public:
  // null, after a warning that says why (once per process), when cuDNN cannot be loaded or is
  // older than 9.0.
  static std::unique_ptr<CudnnAttention> open(Backend& backend, cudaStream_t stream);
  virtual ~CudnnAttention() = default;

  // Shapes as Backend::attention_forward/backward: q [B,T,H,D], k v [B,T,Hkv,D] bfloat16,
  // lse [B,H,T] float32. A shape cuDNN does not take is an error naming the limit.
  virtual void forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                       const Tensor& lse) = 0;
  virtual void backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& out, const Tensor& lse, const Tensor& dq, const Tensor& dk,
                        const Tensor& dv) = 0;
  virtual std::string version() const = 0;  // "cuDNN 9.19.0"
  // Whether queries [B,Tq,H,D] against longer keys [B,Tk,Hkv,D] (a context-parallel chunk) run
  // here, with cuDNN's bottom-right causal mask: the graph is built on first asking; a cuDNN
  // that cannot build it is said once (naming cuDNN's reason) and the reference kernel runs.
  virtual bool takes_key_prefix(const Tensor& q, const Tensor& k, bool backward) = 0;
};

// Logs once per process that attention on `dtype` runs the reference kernel in the fast tier
// (float32: cuDNN's fused attention takes bfloat16; or cuDNN is missing, said by open();
// takes_key_prefix says its own reason).
void note_reference_attention(DType dtype, bool have_cudnn);

}  // namespace carousel::gpu
