// cudnn_attention.h — causal grouped-query attention through cuDNN's fused flash attention (SDPA
// forward and backward, the softmax statistics saved for the backward), for the fast tier with
// bfloat16 activations. Built with the cuDNN frontend's graph API in cudnn_attention.cpp, the only
// file that includes the frontend (one translation unit: it compiles slowly).
//
// cuDNN is loaded at run time (dlopen of libcudnn.so.9), not linked: a machine without it still
// runs carousel. open() also loads, up front, what cuDNN and its frontend would otherwise load at
// the first graph build (the frontend's CUDA runtime, cuDNN's graph and run-time-compiled engine
// libraries, NVRTC and its builtins). When any is missing or cuDNN is too old, open() logs one
// warning naming the library and saying that the reference attention runs, and returns null.
//
// Degrade, not die: a graph cuDNN refuses for a shape (validate, support check, plan build) is
// said once per shape with cuDNN's words, remembered, and forward()/backward() return false for
// that shape from then on: the caller runs its reference attention. Graphs are cached per process
// and GPU (cuda/plans/attention_plan.h: the key and the memo), shared by every backend and logical
// device on that GPU, and each build is logged with its wall time.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "compute/backend.h"

namespace carousel::gpu {

class CudnnAttention {
 public:
  // null, after a warning that says why (once per process), when cuDNN or a library it needs
  // cannot be loaded or is older than 9.0. `gpu` is the device the backend runs on (current on
  // the calling thread); `stream` the backend's stream, on which every call runs.
  static std::unique_ptr<CudnnAttention> open(Backend& backend, int gpu, cudaStream_t stream);
  virtual ~CudnnAttention() = default;

  // Shapes as Backend::attention_forward/backward: q [B,Tq,H,D], k v [B,Tk,Hkv,D] bfloat16 with
  // Tk >= Tq (Tk > Tq: a context-parallel chunk against its key prefix, causal from the bottom
  // right), lse [B,H,Tq] float32. true: cuDNN ran it. false: nothing was written and the caller
  // runs the reference attention, because cuDNN refused this shape's graph (said once per shape,
  // with cuDNN's words), or the shape is outside cuDNN's limits as carousel reads them
  // (cudnn_attention_unsupported: head_dim, heads; said the same way), or an operand is not
  // 16-byte aligned (said once). A failed execute of a built graph is an error
  // (cudnn_attention.cpp says why).
  // The forward's statistics and the reference kernel's lse share one convention (the natural
  // log of the sum of exponentials of the scaled scores), so either backward takes either
  // forward's lse: a refused backward after a cuDNN forward is still right.
  virtual bool forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                       const Tensor& lse) = 0;
  virtual bool backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& out, const Tensor& lse, const Tensor& dq, const Tensor& dk,
                        const Tensor& dv) = 0;
  virtual std::string version() const = 0;  // "cuDNN 9.19.0"
};

// Logs once per process that attention runs the reference kernel in the fast tier without
// asking cuDNN: float32 (cuDNN's fused attention takes bfloat16) or packed documents (`packed`:
// the graphs here are built for the causal mask only). cuDNN missing is said by open(), a
// refused bfloat16 shape by forward()/backward().
void note_reference_attention(DType dtype, bool have_cudnn, bool packed);

}  // namespace carousel::gpu
