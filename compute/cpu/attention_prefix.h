// attention_prefix.h — CpuBackend's attention of a block of queries against a longer key prefix
// (Tk > Tq, query i at position Tk - Tq + i): the chunks of context parallelism. attention.cpp
// sends such shapes here; equal lengths take its tiled kernel.
#pragma once

#include "compute/tensor.h"

namespace carousel::cpu {

// The Backend contracts of attention_forward / attention_backward (compute/backend.h) for
// k.dim(1) > q.dim(1); doc_start [B, Tq] (packed documents, or undefined): each query's first
// key, a position in the keys' sequence.
void attention_prefix_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                              const Tensor& lse, const Tensor& scratch, const Tensor& doc_start);
void attention_prefix_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                               const Tensor& v, const Tensor& out, const Tensor& lse,
                               const Tensor& dq, const Tensor& dk, const Tensor& dv,
                               const Tensor& scratch, const Tensor& doc_start);

}  // namespace carousel::cpu
