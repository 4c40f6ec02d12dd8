// layer.cpp — the llama and simple decoder layers as sequences of Backend ops.
#include "models/layer.h"

#include "compute/error.h"

namespace carousel {

LayerWeights LayerWeights::from(const ParamSet& set, int layer) {
  LayerWeights w;
  w.layer = layer;
  if (set.has(ParamRole::SimpleW, layer)) {
    w.w = set.at(ParamRole::SimpleW, layer);
    return w;
  }
  w.attn_norm = set.at(ParamRole::AttnNorm, layer);
  w.wq = set.at(ParamRole::Wq, layer);
  w.wk = set.at(ParamRole::Wk, layer);
  w.wv = set.at(ParamRole::Wv, layer);
  w.wo = set.at(ParamRole::Wo, layer);
  w.mlp_norm = set.at(ParamRole::MlpNorm, layer);
  if (set.has(ParamRole::WGate, layer)) {  // dense, or an MoE layer's shared experts
    w.w_gate = set.at(ParamRole::WGate, layer);
    w.w_up = set.at(ParamRole::WUp, layer);
    w.w_down = set.at(ParamRole::WDown, layer);
  }
  if (set.has(ParamRole::Router, layer)) {
    w.moe = {set.at(ParamRole::Router, layer), set.stacked(ParamRole::ExpertGate, layer),
             set.stacked(ParamRole::ExpertUp, layer), set.stacked(ParamRole::ExpertDown, layer)};
  }
  return w;
}

void RouterStats::add(const ModelConfig& cfg, int layer, const Routing& routing) {
  const std::int64_t X = cfg.num_experts;
  CAROUSEL_ASSERT(layer >= 0 && layer < cfg.num_layers && routing.load.size() == std::size_t(X),
                  "routing of layer {} with {} experts", layer, routing.load.size());
  if (load.empty()) load.assign(std::size_t(cfg.num_layers * X), 0);
  for (std::int64_t e = 0; e < X; ++e)
    load[std::size_t(layer * X + e)] += routing.load[std::size_t(e)];
  // Each sequence's loss weighs like this rank's tokens of it (with context parallelism the ranks
  // holding a sequence add up to its whole length).
  aux_loss_sum += double(routing.group_tokens) * routing.aux_loss;
}

RouterBias initial_router_bias(const ModelConfig& cfg) {
  RouterBias bias(cfg.routed_bias ? std::size_t(cfg.num_layers) : 0);
  for (std::size_t l = 0; l < bias.size(); ++l) {
    if (cfg.is_moe_layer(std::int64_t(l))) bias[l].assign(std::size_t(cfg.num_experts), 0.0);
  }
  return bias;
}

void update_router_bias(const ModelConfig& cfg, RouterBias& bias,
                        const std::vector<std::int64_t>& load) {
  const std::size_t X = std::size_t(cfg.num_experts);
  for (std::size_t l = 0; l < bias.size(); ++l) {
    if (bias[l].empty()) continue;
    CAROUSEL_ASSERT(load.size() >= (l + 1) * X, "{} loads for layer {} of {} experts", load.size(),
                    l, X);
    update_router_bias(
        bias[l], {load.begin() + std::ptrdiff_t(l * X), load.begin() + std::ptrdiff_t((l + 1) * X)},
        cfg.routed_bias_update_rate);
  }
}

void check_router_bias(const ModelConfig& cfg, const RouterBias& bias, const std::string& where) {
  const RouterBias expected = initial_router_bias(cfg);
  bool same = bias.size() == expected.size();
  for (std::size_t l = 0; same && l < bias.size(); ++l) same = bias[l].size() == expected[l].size();
  CAROUSEL_CHECK(
      same,
      "{}: the router biases have {} layers, this model (routed_bias={}, num_experts={}, "
      "first_num_dense_layers={}) has {} with num_experts each",
      where, bias.size(), cfg.routed_bias, cfg.num_experts, cfg.first_num_dense_layers,
      expected.size());
}

void RouterStats::merge(const RouterStats& other) {
  aux_loss_sum += other.aux_loss_sum;
  if (load.empty()) load.assign(other.load.size(), 0);
  CAROUSEL_ASSERT(other.load.empty() || other.load.size() == load.size(),
                  "router loads of {} and {} entries", load.size(), other.load.size());
  for (std::size_t i = 0; i < other.load.size(); ++i) load[i] += other.load[i];
}

namespace {

// The tokens a layer computes on: x is the whole [b,T,E], or with tensor parallelism this
// rank's rows [n,E] of it (the sequence length then comes from the RoPE tables).
struct Tokens {
  std::int64_t b, T, N, E;  // whole microbatch: N = b * T tokens
};
Tokens tokens_of(const Tensor& x, const RopeTables& rope, const TensorGroup& tensor) {
  const std::int64_t E = x.cols(), N = x.numel() / E * tensor.size();
  const std::int64_t T = x.rank() == 3              ? x.dim(1)
                         : rope.doc_start.defined() ? rope.doc_start.dim(1)
                                                    : rope.cos.dim(0);
  CAROUSEL_ASSERT(N % T == 0, "{} tokens are not whole sequences of {}", N, T);
  return {N / T, T, N, E};
}

// Shapes for x [b,T,E] with N = b*T, on a tensor rank with Hl query heads, Hkvl KV heads and Fl
// MLP columns (all of them without tensor parallelism); "mine" marks this rank's rows [n,E],
// n = N / tensor ranks (= [b,T,E] with one rank). The forward (y defined, nothing kept) and a
// selective remat's recomputation (y undefined: what `kept` names is in s already, and its GEMMs
// are skipped) are the same ops in the same order.
void llama_forward(Backend& be, const ModelConfig& cfg, const LayerWeights& w,
                   const RopeTables& rope, const LayerParallel& parallel, const Tensor& x,
                   const Tensor& y, LayerSaved& s, const RematKeep& kept = {},
                   RouterStats* router = nullptr) {
  const TensorGroup& tensor = parallel.tensor;
  const Float8Gemm fp8(cfg.float8(), tensor, parallel.context);  // quantization=fp8
  const ColumnParallel column(tensor, fp8);
  const RowParallel row(tensor, fp8);
  const DType dt = x.dtype();
  const auto [b, T, N, E] = tokens_of(x, rope, tensor);
  const std::int64_t hd = cfg.head_dim(), Hl = w.wq.dim(0) / hd, Hkvl = w.wk.dim(0) / hd;
  const std::int64_t Fl = w.has_dense_mlp() ? w.w_gate.dim(0) : 0, n = N / tensor.size();
  s.x = x;
  // Attention block.
  Tensor xn1 = be.empty({n, E}, dt);  // mine
  s.rstd1 = be.empty({n}, stats_dtype(dt));
  be.rmsnorm_forward(x.reshape({n, E}), w.attn_norm, cfg.norm_eps, xn1, s.rstd1);
  s.xn1 = column.gather_input(be, xn1);  // [N,E]: q, k and v read every token
  if (!kept.qkv) {
    s.q = be.empty({b, T, Hl, hd}, dt);
    s.k = be.empty({b, T, Hkvl, hd}, dt);
    s.v = be.empty({b, T, Hkvl, hd}, dt);
    // GEMMs take tensors as [rows, last dim]: view the head layouts as [N, heads*hd].
    column.forward(be, s.xn1, w.wq, s.q.reshape({N, Hl * hd}));  // [N,E] x [Hl*hd,E]^T
    column.forward(be, s.xn1, w.wk, s.k.reshape({N, Hkvl * hd}));
    column.forward(be, s.xn1, w.wv, s.v.reshape({N, Hkvl * hd}));
    be.rope_forward(s.q, rope.cos, rope.sin, s.q);  // in place: the un-rotated q is not needed
    be.rope_forward(s.k, rope.cos, rope.sin, s.k);
  }
  if (!kept.context) {
    s.att = be.empty({b, T, Hl, hd}, dt);
    s.lse = be.empty({b, Hl, T}, stats_dtype(dt));
    context_attention_forward(be, parallel.context, s.q, s.k, s.v, s.att, s.lse, s.context,
                              rope.doc_start);
  }
  if (!kept.out_proj) {
    s.h = be.empty(x.shape(), dt);  // mine: h = x + att Wo^T
    row.forward(be, s.att.reshape({N, Hl * hd}), w.wo, x, s.h);
  }
  // MLP block.
  Tensor hn = be.empty({n, E}, dt);  // mine
  s.rstd2 = be.empty({n}, stats_dtype(dt));
  be.rmsnorm_forward(s.h.reshape({n, E}), w.mlp_norm, cfg.norm_eps, hn, s.rstd2);
  s.hn = column.gather_input(be, hn);  // [N,E]: gate, up and the routed experts read it
  Tensor routed;                      // [N,E] the routed experts' output (MoE layers)
  if (w.is_moe()) {
    if (y.defined()) routed = be.empty({N, E}, dt);  // a recomputation needs only `s.moe`
    moe_mlp_forward(be, cfg.router(), w.moe, s.hn, routed, s.moe, T, w.router_bias, parallel);
    if (router) router->add(cfg, w.layer, s.moe.routing);
  }
  if (w.has_dense_mlp()) {
    if (!kept.mlp_in) {
      s.gate = be.empty({N, Fl}, dt);
      s.up = be.empty({N, Fl}, dt);
      column.forward(be, s.hn, w.w_gate, s.gate);
      column.forward(be, s.hn, w.w_up, s.up);
    }
    s.act = be.empty({N, Fl}, dt);
    be.swiglu_forward(s.gate, s.up, s.act);
  }
  if (!y.defined()) return;
  // y = h + act Wd^T (+ the routed experts' output, like act Wd^T a partial sum over the ranks'
  // columns).
  row.forward(be, s.act, w.w_down, s.h, y, routed);
}

void llama_backward(Backend& be, const ModelConfig& cfg, const LayerWeights& w,
                    const LayerWeights& g, const RopeTables& rope, const LayerParallel& parallel,
                    const LayerSaved& s, const Tensor& dy, const Tensor& dx, double loss_scale,
                    std::vector<DeferredWeightGrad>* defer) {
  const TensorGroup& tensor = parallel.tensor;
  const DType dt = dy.dtype();
  const auto [b, T, N, E] = tokens_of(dy, rope, tensor);
  const std::int64_t hd = cfg.head_dim(), Hl = w.wq.dim(0) / hd, Hkvl = w.wk.dim(0) / hd;
  const std::int64_t n = N / tensor.size();
  const Float8Gemm fp8(cfg.float8(), tensor, parallel.context);
  const ColumnParallel column(tensor, fp8);
  const RowParallel row(tensor, fp8);
  // MLP block: y = h + act Wd^T (+ the routed experts' output).
  const Tensor dy_all = row.gather_output_grad(be, dy.reshape({n, E}));  // [N,E]
  Tensor dhn = be.empty({N, E}, dt);  // partial over the tensor ranks' columns
  if (w.is_moe()) {
    // The balancing loss enters the objective as the whole sequence's tokens x L (with context
    // parallelism every rank's share of the sequence adds T x L, and L depends on all of them).
    moe_mlp_backward(be, cfg.router(), w.moe, g.moe, s.moe, dy_all,
                     loss_scale * double(s.moe.routing.group_total), dhn, parallel);
  }
  Tensor dhn_rows;  // [n,E]: d rms(h, g2), this rank's rows
  if (w.has_dense_mlp()) {
    const std::int64_t Fl = w.w_gate.dim(0);
    Tensor dact = be.empty({N, Fl}, dt);
    row.backward(be, dy_all, s.act, {w.w_down, g.w_down}, dact, defer);  // [N,E] x [E,Fl]
    Tensor dgate = be.empty({N, Fl}, dt), dup = be.empty({N, Fl}, dt);
    be.swiglu_backward(dact, s.gate, s.up, dgate, dup);
    dact = Tensor();
    dhn_rows = column.backward(be, s.hn, {{w.w_gate, g.w_gate}, {w.w_up, g.w_up}}, {dgate, dup},
                               dhn, /*accumulate=*/w.is_moe(), defer);
  } else {
    dhn_rows = column.scatter_input_grad(be, dhn);
  }
  Tensor dh = be.empty(dy.shape(), dt);  // mine
  be.rmsnorm_backward(dhn_rows, s.h.reshape({n, E}), w.mlp_norm, s.rstd2, dh.reshape({n, E}),
                      g.mlp_norm);
  be.axpy(1.0, dy, dh);  // residual
  // Attention block: h = x + att Wo^T.
  const Tensor dh_all = row.gather_output_grad(be, dh.reshape({n, E}));  // [N,E]
  Tensor datt = be.empty(s.att.shape(), dt);
  row.backward(be, dh_all, s.att.reshape({N, Hl * hd}), {w.wo, g.wo}, datt.reshape({N, Hl * hd}),
               defer);
  Tensor dq = be.empty(s.q.shape(), dt), dk = be.empty(s.k.shape(), dt),
         dv = be.empty(s.v.shape(), dt);
  context_attention_backward(be, parallel.context, datt, s.q, s.k, s.v, s.att, s.lse, s.context, dq,
                             dk, dv, rope.doc_start);
  datt = Tensor();
  be.rope_backward(dq, rope.cos, rope.sin, dq);
  be.rope_backward(dk, rope.cos, rope.sin, dk);
  Tensor dxn1 = be.empty({N, E}, dt);  // partial over the tensor ranks' heads
  const Tensor dq2 = dq.reshape({N, Hl * hd}), dk2 = dk.reshape({N, Hkvl * hd}),
               dv2 = dv.reshape({N, Hkvl * hd});
  const Tensor dxn1_rows =
      column.backward(be, s.xn1, {{w.wq, g.wq}, {w.wk, g.wk}, {w.wv, g.wv}}, {dq2, dk2, dv2}, dxn1,
                      /*accumulate=*/false, defer);
  be.rmsnorm_backward(dxn1_rows, s.x.reshape({n, E}), w.attn_norm, s.rstd1, dx.reshape({n, E}),
                      g.attn_norm);
  be.axpy(1.0, dh, dx);  // residual
}

}  // namespace

void layer_forward(Backend& be, const ModelConfig& cfg, const LayerWeights& w,
                   const RopeTables& rope, const Tensor& x, const Tensor& y, LayerSaved* saved,
                   const LayerParallel& parallel, RouterStats* router) {
  if (!cfg.is_llama()) {
    Linear(w.w, Linear::Layout::InOut).forward(be, x, y);  // y = x W, [N,E] x [E,E]
    if (saved) saved->x = x;
    return;
  }
  LayerSaved local;
  llama_forward(be, cfg, w, rope, parallel, x, y, saved ? *saved : local, {}, router);
}

void keep_only(LayerSaved& s, const RematKeep& keep) {
  s.xn1 = s.rstd1 = s.hn = s.rstd2 = s.act = Tensor();  // cheap to recompute
  s.moe = MoeSaved{};  // the routed experts are recomputed (the same routing: same inputs)
  if (!keep.qkv) s.q = s.k = s.v = Tensor();
  if (!keep.context) {
    s.att = s.lse = Tensor();
    s.context = ContextSaved{};
  }
  if (!keep.out_proj) s.h = Tensor();
  if (!keep.mlp_in) s.gate = s.up = Tensor();
}

bool recompute_replays(LayerPiece piece, const RematKeep& keep) {
  switch (piece) {
    case LayerPiece::AttentionIn:
    case LayerPiece::MlpIn:
      return true;
    case LayerPiece::OutProj:
      return !keep.out_proj;
    case LayerPiece::MlpOut:
      return false;
  }
  return true;
}

void layer_recompute(Backend& be, const ModelConfig& cfg, const LayerWeights& w,
                     const RopeTables& rope, LayerSaved& s, const LayerParallel& parallel) {
  if (!cfg.is_llama()) return;  // the simple block's backward needs its input only
  const RematKeep kept{.qkv = s.q.defined(),
                       .context = s.att.defined(),
                       .out_proj = s.h.defined(),
                       .mlp_in = s.gate.defined()};
  llama_forward(be, cfg, w, rope, parallel, s.x, Tensor(), s, kept);
}

void layer_backward(Backend& be, const ModelConfig& cfg, const LayerWeights& w,
                    const LayerWeights& grads, const RopeTables& rope, const LayerSaved& saved,
                    const Tensor& dy, const Tensor& dx, double loss_scale,
                    std::vector<DeferredWeightGrad>* deferred, const LayerParallel& parallel) {
  if (!cfg.is_llama()) {
    const Linear simple(w.w, Linear::Layout::InOut);
    simple.input_grad(be, dy, dx);                          // dx = dy W^T
    simple.weight_grad(be, dy, saved.x, grads.w, deferred);  // dW += x^T dy
    return;
  }
  llama_backward(be, cfg, w, grads, rope, parallel, saved, dy, dx, loss_scale, deferred);
}

}  // namespace carousel
