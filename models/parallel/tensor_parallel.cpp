// tensor_parallel.cpp — the row gathers and scatters of sequence parallelism (the pieces that
// call them: linear.h).
//
// The collectives wait on the host: correct on every communicator; overlapping them with the
// next GEMM on GPUs is listed in docs/parallelism.md as not done yet.
#include "models/parallel/tensor_parallel.h"

#include "compute/error.h"

namespace carousel {

Tensor TensorGroup::gather_rows(Backend& be, const Tensor& mine) const {
  if (size() == 1) return mine;
  const std::int64_t n = mine.rows(), E = mine.cols();
  Tensor all = be.empty({n * size(), E}, mine.dtype());
  comm->all_gather(mine, all).wait();
  return all;
}

Tensor TensorGroup::reduce_scatter_rows(Backend& be, const Tensor& partial) const {
  if (size() == 1) return partial;
  const std::int64_t N = partial.rows(), E = partial.cols();
  CAROUSEL_ASSERT(N % size() == 0, "{} rows cannot be split over {} tensor ranks", N, size());
  Tensor mine = be.empty({N / size(), E}, partial.dtype());
  comm->reduce_scatter(partial, mine, ReduceOp::Sum).wait();
  return mine;
}

}  // namespace carousel
