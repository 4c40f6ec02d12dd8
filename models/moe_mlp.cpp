// moe_mlp.cpp — dropless expert dispatch, per-expert SwiGLU GEMMs and the weighted combine, as
// Backend ops (moe_mlp.h has the maps).
#include "models/moe_mlp.h"

#include "compute/error.h"
#include "models/parallel/linear.h"
#include "models/row_gather.h"

namespace carousel {

namespace {

// A tensor's values in double on the host (any floating dtype), and back.
std::vector<double> to_double(Backend& be, const Tensor& t) {
  if (t.dtype() == DType::F64) return be.to_host<double>(t);
  Tensor wide = be.empty(t.shape(), DType::F64);
  be.cast(t, wide);
  return be.to_host<double>(wide);
}

Tensor from_double(Backend& be, const std::vector<double>& values, Shape shape, DType dtype) {
  Tensor wide = be.from_host(values, std::move(shape));
  if (dtype == DType::F64) return wide;
  Tensor out = be.empty(wide.shape(), dtype);
  be.cast(wide, out);
  return out;
}

// Rows [first, first + count) of a [rows, cols] tensor.
Tensor rows_of(const Tensor& t, std::int64_t first, std::int64_t count) {
  return t.view(first * t.cols(), {count, t.cols()});
}

// Context parallelism: each sequence's tokens are on the C ranks of `context`, so its balancing
// counts and score sums are summed over them (the same sequences in the same order on each) and
// the loss and its gradient follow the whole sequence's.
void pool_balance(Backend& be, const RouterConfig& router, const ContextGroup& context,
                  Routing& r) {
  std::vector<double> stats(r.group_load.begin(), r.group_load.end());
  stats.insert(stats.end(), r.group_scores.begin(), r.group_scores.end());
  Tensor t = be.from_host(stats, {std::int64_t(stats.size())});
  context.comm->all_reduce(t, t, ReduceOp::Sum).wait();
  stats = be.to_host<double>(t);
  const std::size_t n = r.group_load.size();
  for (std::size_t i = 0; i < n; ++i) r.group_load[i] = std::llround(stats[i]);
  std::copy(stats.begin() + std::ptrdiff_t(n), stats.end(), r.group_scores.begin());
  r.group_total = r.group_tokens * context.size();
  score_balance(router, r);
}

}  // namespace

void moe_mlp_forward(Backend& be, const RouterConfig& router, const MoeWeights& w, const Tensor& x,
                     const Tensor& y, MoeSaved& s, std::int64_t group_tokens,
                     const std::vector<double>& bias, const LayerParallel& parallel) {
  const ExpertGroup& experts = parallel.expert;
  const std::int64_t N = x.rows(), E = x.cols(), X = router.experts, k = router.top_k;
  const std::int64_t M = N * k, Fm = w.gate.dim(1), local = X / experts.size();
  const DType dt = x.dtype();
  CAROUSEL_ASSERT(w.router.dim(0) == X && w.gate.dim(0) == local && w.down.dim(0) == local,
                  "MoE weights for {} of {} experts, router [{}, .], gate [{}, ., .]", local, X,
                  w.router.dim(0), w.gate.dim(0));
  Tensor logits = be.empty({N, X}, dt);
  Linear(w.router).forward(be, x, logits);  // [N,E] x [X,E]^T
  s.routing = route(router, to_double(be, logits), bias, group_tokens);
  if (parallel.context.size() > 1 && router.aux_loss_weight != 0.0)
    pool_balance(be, router, parallel.context, s.routing);
  // Rows sorted by expert, stable: expert e's rows are [first[e], first[e+1]).
  s.first.assign(std::size_t(X + 1), 0);
  for (const int e : s.routing.expert) ++s.first[std::size_t(e + 1)];
  for (std::int64_t e = 0; e < X; ++e) s.first[std::size_t(e + 1)] += s.first[std::size_t(e)];
  std::vector<std::int64_t> next(s.first.begin(), s.first.end() - 1);
  s.slot.assign(std::size_t(M), 0);
  std::vector<std::int32_t> token(static_cast<std::size_t>(M));
  std::vector<double> weight(static_cast<std::size_t>(M));
  for (std::int64_t m = 0; m < M; ++m) {
    const std::int64_t row = next[std::size_t(s.routing.expert[std::size_t(m)])]++;
    s.slot[std::size_t(row)] = m;
    token[std::size_t(row)] = std::int32_t(m / k);
    weight[std::size_t(row)] = s.routing.weight[std::size_t(m)];
  }
  s.token_of_row = be.from_host(token, {M});
  s.weight_of_row = from_double(be, weight, {M}, stats_dtype(dt));
  s.x = x;
  s.x_perm = be.empty({M, E}, dt);
  gather_rows(be, x, s.token_of_row, s.x_perm);
  // This rank's experts on their rows (every rank's, with expert parallelism).
  s.dispatch = plan_dispatch(be, experts, s.first);
  s.x_local = to_experts(be, experts, s.dispatch, s.x_perm);
  const std::int64_t R = s.x_local.rows();
  s.gate = be.empty({R, Fm}, dt);
  s.up = be.empty({R, Fm}, dt);
  s.act = be.empty({R, Fm}, dt);
  Tensor out_local = be.empty({R, E}, dt);
  const std::vector<std::int64_t>& rows = s.dispatch.first;  // expert e's rows [rows[e], rows[e+1])
  GroupedLinear(w.gate, rows).forward(be, s.x_local, s.gate);  // [c,E] x [Fm,E]^T each
  GroupedLinear(w.up, rows).forward(be, s.x_local, s.up);
  be.swiglu_forward(s.gate, s.up, s.act);
  GroupedLinear(w.down, rows).forward(be, s.act, out_local);  // [c,Fm] x [E,Fm]^T
  s.out_perm = from_experts(be, experts, s.dispatch, out_local);
  if (!y.defined()) return;  // a recomputation: only what the backward reads
  Tensor weighted = be.empty({M, E}, dt);
  be.scale_rows(s.out_perm, s.weight_of_row, weighted);
  be.fill(y, 0.0);
  scatter_add_rows(be, weighted, s.token_of_row, y);  // y[token] += each of its k rows
}

void moe_mlp_backward(Backend& be, const RouterConfig& router, const MoeWeights& w,
                      const MoeWeights& grads, const MoeSaved& s, const Tensor& dy, double daux,
                      const Tensor& dx, const LayerParallel& parallel) {
  const ExpertGroup& experts = parallel.expert;
  const std::int64_t N = dy.rows(), E = dy.cols(), X = router.experts;
  const std::int64_t M = s.x_perm.rows(), R = s.x_local.rows(), Fm = s.gate.cols();
  const DType dt = dy.dtype();
  // Combine: y[t] += w_row out_perm[row] for the rows of token t.
  Tensor dy_perm = be.empty({M, E}, dt);
  gather_rows(be, dy, s.token_of_row, dy_perm);
  Tensor dots = be.empty({M}, stats_dtype(dt));
  be.row_dots(dy_perm, s.out_perm, dots);  // d w_row
  // With tensor parallelism out_perm is this rank's experts' columns' part: dots are partial sums.
  if (parallel.tensor.size() > 1)
    parallel.tensor.comm->all_reduce(dots, dots, ReduceOp::Sum).wait();
  const std::vector<double> dots_host = to_double(be, dots);
  std::vector<double> dweight(static_cast<std::size_t>(M));
  for (std::int64_t row = 0; row < M; ++row)
    dweight[std::size_t(s.slot[std::size_t(row)])] = dots_host[std::size_t(row)];
  Tensor dout_perm = be.empty({M, E}, dt);
  be.scale_rows(dy_perm, s.weight_of_row, dout_perm);
  // Each of this rank's experts' SwiGLU, on the rows sent to it.
  const Tensor dout_local = to_experts(be, experts, s.dispatch, dout_perm);
  Tensor dact = be.empty({R, Fm}, dt), dgate = be.empty({R, Fm}, dt), dup = be.empty({R, Fm}, dt);
  Tensor dx_local = be.empty({R, E}, dt);
  const std::vector<std::int64_t>& rows = s.dispatch.first;  // expert e's rows [rows[e], rows[e+1])
  const GroupedLinear gate(w.gate, rows), up(w.up, rows), down(w.down, rows);
  down.input_grad(be, dout_local, dact);  // [c,E] x [E,Fm] each
  be.swiglu_backward(dact, s.gate, s.up, dgate, dup);
  gate.input_grad(be, dgate, dx_local);  // [c,Fm] x [Fm,E]
  up.input_grad(be, dup, dx_local, 1.0);
  // Each expert's weight gradients from its own rows.
  down.weight_grad(be, dout_local, s.act, grads.down);  // [E,Fm] += dout^T act
  gate.weight_grad(be, dgate, s.x_local, grads.gate);   // [Fm,E] += dgate^T x
  up.weight_grad(be, dup, s.x_local, grads.up);
  const Tensor dx_perm = from_experts(be, experts, s.dispatch, dx_local);
  // Dispatch: x_perm[row] = x[token of row].
  be.fill(dx, 0.0);
  scatter_add_rows(be, dx_perm, s.token_of_row, dx);
  // Router: the combine weights and the balancing loss. Every tensor rank has the same dlogits;
  // each takes its own rows [r n, (r + 1) n), so the router's gradient and its share of dx are
  // summed once over the group (the optimizer sums the router's, the caller's reduce-scatter dx).
  const Tensor dlogits =
      from_double(be, route_backward(router, s.routing, dweight, daux), {N, X}, dt);
  const std::int64_t n = N / parallel.tensor.size(), first = parallel.tensor.rank() * n;
  const Tensor my_dlogits = rows_of(dlogits, first, n), my_x = rows_of(s.x, first, n);
  const Linear router_weight(w.router);
  router_weight.weight_grad(be, my_dlogits, my_x, grads.router);        // [X,E] += dlogits^T x
  router_weight.input_grad(be, my_dlogits, rows_of(dx, first, n), 1.0);  // [n,X] x [X,E]
}

}  // namespace carousel
