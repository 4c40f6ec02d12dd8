// fast_tier_ops.cpp — the fast tier's native bfloat16 ops (see fast_tier_ops.h).
#include "cuda/plans/fast_tier_ops.h"

namespace carousel::gpu {

bool fast_tier_native_bf16(Backend::Op op, bool cudnn_attention) {
  using Op = Backend::Op;
  switch (op) {
    // cuda/fast/fast_ops.h: the fused kernels.
    case Op::cast:
    case Op::scale:
    case Op::axpy:
    case Op::add:
    case Op::embedding_forward:
    case Op::embedding_backward:
    case Op::rmsnorm_forward:
    case Op::rmsnorm_backward:
    case Op::rope_forward:
    case Op::rope_backward:
    case Op::swiglu_forward:
    case Op::swiglu_backward:
    case Op::cross_entropy_forward:
    case Op::cross_entropy_backward:
    case Op::adamw_update:
    // cuda/vocab_parts.h: a vocabulary-parallel head's pieces (the reference tier stages them).
    case Op::embedding_part_forward:
    case Op::cross_entropy_part_forward:
    case Op::cross_entropy_part_backward:
      return true;
    // cuda/fast/cudnn_attention.h.
    case Op::attention_forward:
    case Op::attention_backward:
      return cudnn_attention;
    default:
      return false;
  }
}

}  // namespace carousel::gpu
