// vocab_parts.h — the CUDA kernels of the vocabulary-part ops (Backend::embedding_part_*,
// cross_entropy_part_*, cross_entropy_combine: a vocabulary-parallel head's pieces), on every
// kernel tier: simple kernels (one thread per element, row or column; one block per row for the
// log-sum-exp), deterministic. The embedding forward and the cross-entropy parts take bfloat16
// natively (no float32 copy of a [V/T, E] table or [tokens, V/T] logits): values widened to
// double, results rounded once as the CPU backend's staging rounds them (to float, then to
// bfloat16). Tensors arrive validated by the Backend front end.
#pragma once

#include <cuda_runtime.h>

#include "compute/backend.h"
#include "cuda/fast/fast_ops.h"

namespace carousel::gpu::vocab_parts {

void embedding(const fast::Launch& l, const Tensor& table, const Tensor& tokens, std::int64_t first,
               const Tensor& rows, bool backward);
void cross_entropy_forward(const fast::Launch& l, const Tensor& logits, const Tensor& targets,
                           std::int64_t first, const Tensor& lse, const Tensor& target_logits);
void cross_entropy_combine(const fast::Launch& l, const Tensor& lse_parts,
                           const Tensor& target_logit_parts, const Tensor& lse,
                           const Tensor& losses);
void cross_entropy_backward(const fast::Launch& l, const Tensor& logits, const Tensor& targets,
                            std::int64_t first, const Tensor& lse, double dloss,
                            const Tensor& dlogits);

}  // namespace carousel::gpu::vocab_parts
