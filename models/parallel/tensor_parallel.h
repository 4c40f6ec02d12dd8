// tensor_parallel.h — Megatron-style tensor parallelism with sequence parallelism: the group of
// ranks that computes one layer together and its two row collectives; the pieces that call them
// around the weight GEMMs are in linear.h (docs/parallelism.md#tensor-parallelism).
//
// Between a layer's blocks (norms, residuals) each of the T ranks holds its own rows of the
// activation: [n, E] with n = N / T of the microbatch's N = b x S tokens, rank t rows
// [t n, (t + 1) n) of the row-major [b, S, E] (sequence parallelism). Column-parallel GEMMs
// (q/k/v, gate/up: a block of the weight's rows on each rank) read every token: their input is
// all-gathered first, and their input gradient, a partial sum over the ranks' blocks, is
// reduce-scattered back to rows. Row-parallel GEMMs (o, down: a block of columns) produce
// partial sums: reduce-scattered to rows and added to the residual; their output gradient is
// all-gathered. With T = 1 each piece is the plain op: no copy, no collective.
#pragma once

#include "collectives/communicator.h"
#include "compute/backend.h"

namespace carousel {

struct TensorGroup {
  Communicator* comm = nullptr;  // the tensor group; nullptr: one rank

  int size() const { return comm ? comm->size() : 1; }
  int rank() const { return comm ? comm->rank() : 0; }

  // [n, E] -> [T n, E]: every rank's rows in rank order (T = 1: `mine` itself).
  Tensor gather_rows(Backend& be, const Tensor& mine) const;
  // [T n, E] partial sums -> [n, E]: this rank's rows of their sum (T = 1: `partial` itself).
  Tensor reduce_scatter_rows(Backend& be, const Tensor& partial) const;
};

}  // namespace carousel
