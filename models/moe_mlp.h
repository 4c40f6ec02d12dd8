// moe_mlp.h — the routed mixture-of-experts MLP (dropless), forward and backward on a Backend.
//
//   y_t = sum over token t's k chosen experts e of w_{t,e} * down_e(silu(gate_e(x_t)) * up_e(x_t))
//
// with the choice and weights from the router (moe_router.h: on the host, in double). The
// (token, choice) slots are sorted by expert — stable, so token order within an expert and the
// same bits on every run — which makes each expert's rows contiguous: its three GEMMs run on
// exactly its tokens, with no capacity, padding or dropped token:
//   x_perm = x[token of each row]                        gather_rows (row_gather.h)
//   out_perm[rows of e] = SwiGLU_e(x_perm[rows of e])     3 grouped GEMMs over the experts
//   y = sum into each token of w_row * out_perm[row]      scale_rows, scatter_add_rows
// The backward runs the same maps the other way; the combine weights' gradient (row_dots) and
// the balancing loss go through the router's backward into the router weights and x.
// Shapes: x, y [N,E]; router [X,E]; gate, up [X,Fm,E]; down [X,E,Fm]; M = N * k rows.
// With expert parallelism over P ranks (models/parallel/expert_parallel.h) rank r holds experts
// [r X/P, (r + 1) X/P) (gate, up [X/P,Fm,E], down [X/P,E,Fm]): its rows go to their experts'
// ranks after the gather and come back before the combine; the GEMMs run on the R rows every
// rank sent to this rank's experts. With tensor parallelism (parallel.tensor) x holds every
// token (the gathered rows, routed alike on each rank) and each rank holds Fm/T columns of every
// expert: y and dx are partial sums over the tensor ranks, which the layer reduce-scatters.
#pragma once

#include <cstdint>
#include <vector>

#include "compute/backend.h"
#include "models/moe_router.h"
#include "models/parallel/layer_parallel.h"

namespace carousel {

// Views of one MoE MLP's parameters, or of their gradients.
struct MoeWeights {
  Tensor router;          // [X,E]
  Tensor gate, up, down;  // [X,Fm,E], [X,Fm,E], [X,E,Fm]
};

// What the forward keeps for the backward.
struct MoeSaved {
  Routing routing;                  // the router's choice, weights, scores, load and loss
  std::vector<std::int64_t> first;  // [X+1] expert e's rows are [first[e], first[e+1])
  std::vector<std::int64_t> slot;   // [M] row -> slot m = t * k + j
  Tensor token_of_row;              // [M] int32
  Tensor weight_of_row;             // [M] (stats dtype) the combine weight of each row
  Tensor x;                         // [N,E] the input (the router's weight gradient)
  Tensor x_perm, out_perm;          // [M,E] this rank's rows, by expert
  ExpertDispatch dispatch;          // where the rows go (expert parallelism)
  Tensor x_local, gate, up, act;    // [R,E], [R,Fm] x 3: the rows of this rank's experts
};

// y = the MoE MLP of x (y overwritten, distinct from x; undefined: a recomputation for the
// backward, which fills `saved` only). The balancing loss is in
// saved.routing.aux_loss: the caller adds it to the training loss. It is summed over groups of
// `group_tokens` consecutive rows of x (the sequences; 0: one group of all rows), and `bias`
// ([X] or empty) is the auxiliary-loss-free balancing's bias (moe_router.h). `parallel`: the
// expert group the rows are exchanged with, and the context group holding the rest of each
// sequence, over which the balancing loss's per-sequence counts and sums are pooled.
void moe_mlp_forward(Backend& be, const RouterConfig& router, const MoeWeights& w, const Tensor& x,
                     const Tensor& y, MoeSaved& saved, std::int64_t group_tokens = 0,
                     const std::vector<double>& bias = {}, const LayerParallel& parallel = {});

// dx = d/dx of (sum dy * y + daux * balancing loss) (overwritten); the weight gradients
// accumulate into `grads`. daux: the balancing loss's weight in the objective (1 when it is
// added to the loss as it is).
void moe_mlp_backward(Backend& be, const RouterConfig& router, const MoeWeights& w,
                      const MoeWeights& grads, const MoeSaved& saved, const Tensor& dy, double daux,
                      const Tensor& dx, const LayerParallel& parallel = {});

}  // namespace carousel
