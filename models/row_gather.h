// row_gather.h — rows of a matrix picked by index, and the adjoint: rows summed into their index.
//
// The MoE MLP (moe_mlp.cpp) gathers each (token, choice) row of x into expert order and sums the
// experts' weighted outputs back into their tokens; its backward runs the two the other way. An
// embedding lookup is exactly this gather (the table's rows picked by token id) and its backward
// exactly this scatter-add, so these call Backend::embedding_forward / embedding_backward rather
// than adding two ops every backend would implement again: the same kernels (so the same bits),
// and the same index checks. The names say what the MoE code does with them.
#pragma once

#include "compute/backend.h"

namespace carousel {

// out[i,:] = in[index[i],:]; in [rows, C], index int32 [n] with values in [0, rows), out [n, C].
inline void gather_rows(Backend& be, const Tensor& in, const Tensor& index, const Tensor& out) {
  be.embedding_forward(in, index, out);
}

// out[index[i],:] += in[i,:]: accumulates, so zero `out` first for a plain sum; in [n, C],
// index int32 [n] with values in [0, rows), out [rows, C].
inline void scatter_add_rows(Backend& be, const Tensor& in, const Tensor& index,
                             const Tensor& out) {
  be.embedding_backward(in, index, out);
}

}  // namespace carousel
