// expert_parallel.h — expert parallelism: the E ranks that split each MoE layer's routed experts
// between them, and the exchange of routed rows with the ranks holding their experts
// (docs/moe.md#expert-parallelism).
//
// Each rank routes its own tokens (models/moe_mlp.h) and sorts its rows [M, E] by expert, so the
// rows for rank d's experts [d X/E, (d + 1) X/E) are one block. The ranks first all-gather their
// per-expert row counts (every rank then knows what it sends and receives), then exchange the
// blocks with grouped sends and receives (an all-to-all with variable counts; with NCCL,
// ncclSend / ncclRecv in one group, as nccl-tests' alltoall does). The rows a rank receives
// come source by source; it regroups them expert by expert for its GEMMs and back again, and
// the results return by the same exchange the other way. The backward sends the row gradients
// the same two ways. With E = 1 every piece is the identity: no copy, no collective. The counts'
// all-gather is waited for at once (the exchange needs them); each rows exchange is waited for
// through the group's waiter, where an overlapped F&B pair hands the compute to its other half.
#pragma once

#include <cstdint>
#include <vector>

#include "collectives/communicator.h"
#include "compute/backend.h"

namespace carousel {

// How the rank waits for a rows exchange it has posted. Without one it waits at once; the
// executor's (host/runtime/overlapped_pair.h) lets the paired microbatch compute first and
// traces each exchange from posting to completion.
class ExchangeWaiter {
 public:
  virtual ~ExchangeWaiter() = default;
  // `bytes`: the rows this rank sends and receives (its own block excluded).
  virtual void wait(const Event& done, std::int64_t bytes) = 0;
};

struct ExpertGroup {
  Communicator* comm = nullptr;      // the expert group; nullptr: one rank
  ExchangeWaiter* waiter = nullptr;  // nullptr: wait for each exchange at once

  int size() const { return comm ? comm->size() : 1; }
  int rank() const { return comm ? comm->rank() : 0; }
  void wait(const Event& done, std::int64_t bytes) const {
    if (waiter) waiter->wait(done, bytes);
    else done.wait();
  }
};

// How one microbatch's routed rows travel between the expert ranks and back (kept for the
// backward, which sends the gradients the same ways).
struct ExpertDispatch {
  std::vector<std::int64_t> send;   // [E] rows this rank sends to each rank (its rows' blocks)
  std::vector<std::int64_t> recv;   // [E] rows it receives from each rank
  std::vector<std::int64_t> first;  // [X/E + 1] local expert e's rows once regrouped
  Tensor order;    // [R] int32: regrouped row i is received row order[i] (E > 1 only)
  Tensor inverse;  // [R] int32: received row j is regrouped row inverse[j]
};

// Plans the exchange from this rank's rows sorted by expert (`first`: [X + 1] row offsets):
// all-gathers every rank's counts over the group. With E = 1: first as it is, no exchange.
ExpertDispatch plan_dispatch(Backend& be, const ExpertGroup& group,
                             const std::vector<std::int64_t>& first);

// Rows [M, C] in this rank's expert order -> the rows of this rank's experts [R, C], expert by
// expert (dispatch.first), from every rank. With E = 1: `rows` itself.
Tensor to_experts(Backend& be, const ExpertGroup& group, const ExpertDispatch& dispatch,
                  const Tensor& rows);
// The reverse: this rank's experts' rows [R, C] -> [M, C] back on the ranks (and rows) they came
// from. With E = 1: `rows` itself.
Tensor from_experts(Backend& be, const ExpertGroup& group, const ExpertDispatch& dispatch,
                    const Tensor& rows);

}  // namespace carousel
