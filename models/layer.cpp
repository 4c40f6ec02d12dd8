// layer.cpp — the llama and simple decoder layers as sequences of Backend ops.
#include "models/layer.h"

namespace carousel {

LayerWeights LayerWeights::from(const ParamSet& set, int layer) {
  LayerWeights w;
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
  w.w_gate = set.at(ParamRole::WGate, layer);
  w.w_up = set.at(ParamRole::WUp, layer);
  w.w_down = set.at(ParamRole::WDown, layer);
  return w;
}

namespace {

// grad += a^T b now, or later when deferring (I/W split).
void weight_grad(Backend& be, const Tensor& a, const Tensor& b, const Tensor& grad,
                 std::vector<DeferredWeightGrad>* deferred) {
  if (deferred) {
    deferred->push_back({a, b, grad});
  } else {
    be.gemm(true, false, 1.0, a, b, 1.0, grad);
  }
}

void llama_forward(Backend& be, const ModelConfig& cfg, const LayerWeights& w,
                   const RopeTables& rope, const Tensor& x, const Tensor& y, LayerSaved& s) {
  const DType dt = x.dtype();
  const std::int64_t b = x.dim(0), T = x.dim(1), E = x.dim(2), N = b * T;
  const std::int64_t H = cfg.num_query_heads, Hkv = cfg.num_kv_heads, hd = cfg.head_dim();
  const std::int64_t Fm = cfg.mlp_dim;
  s.x = x;
  // Attention block.
  s.xn1 = be.empty({N, E}, dt);
  s.rstd1 = be.empty({N}, stats_dtype(dt));
  be.rmsnorm_forward(x.reshape({N, E}), w.attn_norm, cfg.norm_eps, s.xn1, s.rstd1);
  s.q = be.empty({b, T, H, hd}, dt);
  s.k = be.empty({b, T, Hkv, hd}, dt);
  s.v = be.empty({b, T, Hkv, hd}, dt);
  // GEMMs take tensors as [rows, last dim]: view the head layouts as [N, heads*hd].
  be.gemm(false, true, 1.0, s.xn1, w.wq, 0.0, s.q.reshape({N, H * hd}));  // [N,E] x [H*hd,E]^T
  be.gemm(false, true, 1.0, s.xn1, w.wk, 0.0, s.k.reshape({N, Hkv * hd}));
  be.gemm(false, true, 1.0, s.xn1, w.wv, 0.0, s.v.reshape({N, Hkv * hd}));
  be.rope_forward(s.q, rope.cos, rope.sin, s.q);  // in place: the un-rotated q is not needed
  be.rope_forward(s.k, rope.cos, rope.sin, s.k);
  s.att = be.empty({b, T, H, hd}, dt);
  s.lse = be.empty({b, H, T}, stats_dtype(dt));
  be.attention_forward(s.q, s.k, s.v, s.att, s.lse);
  s.h = be.empty({b, T, E}, dt);
  be.copy(x, s.h);
  be.gemm(false, true, 1.0, s.att.reshape({N, H * hd}), w.wo, 1.0, s.h);  // h = x + att Wo^T
  // MLP block.
  s.hn = be.empty({N, E}, dt);
  s.rstd2 = be.empty({N}, stats_dtype(dt));
  be.rmsnorm_forward(s.h.reshape({N, E}), w.mlp_norm, cfg.norm_eps, s.hn, s.rstd2);
  s.gate = be.empty({N, Fm}, dt);
  s.up = be.empty({N, Fm}, dt);
  s.act = be.empty({N, Fm}, dt);
  be.gemm(false, true, 1.0, s.hn, w.w_gate, 0.0, s.gate);
  be.gemm(false, true, 1.0, s.hn, w.w_up, 0.0, s.up);
  be.swiglu_forward(s.gate, s.up, s.act);
  be.copy(s.h, y);
  be.gemm(false, true, 1.0, s.act, w.w_down, 1.0, y);  // y = h + act Wd^T
}

void llama_backward(Backend& be, const ModelConfig& cfg, const LayerWeights& w,
                    const LayerWeights& g, const RopeTables& rope, const LayerSaved& s,
                    const Tensor& dy, const Tensor& dx, std::vector<DeferredWeightGrad>* defer) {
  const DType dt = dy.dtype();
  const std::int64_t b = dy.dim(0), T = dy.dim(1), E = dy.dim(2), N = b * T;
  const std::int64_t H = cfg.num_query_heads, Hkv = cfg.num_kv_heads, hd = cfg.head_dim();
  const std::int64_t Fm = cfg.mlp_dim;
  // MLP block: y = h + act Wd^T.
  Tensor dact = be.empty({N, Fm}, dt);
  be.gemm(false, false, 1.0, dy, w.w_down, 0.0, dact);  // [N,E] x [E,Fm]
  weight_grad(be, dy, s.act, g.w_down, defer);          // dWd += dy^T act
  Tensor dgate = be.empty({N, Fm}, dt), dup = be.empty({N, Fm}, dt);
  be.swiglu_backward(dact, s.gate, s.up, dgate, dup);
  dact = Tensor();
  Tensor dhn = be.empty({N, E}, dt);
  be.gemm(false, false, 1.0, dgate, w.w_gate, 0.0, dhn);
  be.gemm(false, false, 1.0, dup, w.w_up, 1.0, dhn);
  weight_grad(be, dgate, s.hn, g.w_gate, defer);
  weight_grad(be, dup, s.hn, g.w_up, defer);
  Tensor dh = be.empty({b, T, E}, dt);
  be.rmsnorm_backward(dhn, s.h.reshape({N, E}), w.mlp_norm, s.rstd2, dh.reshape({N, E}),
                      g.mlp_norm);
  be.axpy(1.0, dy, dh);  // residual
  // Attention block: h = x + att Wo^T.
  Tensor datt = be.empty(s.att.shape(), dt);
  be.gemm(false, false, 1.0, dh, w.wo, 0.0, datt.reshape({N, H * hd}));
  weight_grad(be, dh, s.att.reshape({N, H * hd}), g.wo, defer);
  Tensor dq = be.empty(s.q.shape(), dt), dk = be.empty(s.k.shape(), dt),
         dv = be.empty(s.v.shape(), dt);
  be.attention_backward(datt, s.q, s.k, s.v, s.att, s.lse, dq, dk, dv);
  datt = Tensor();
  be.rope_backward(dq, rope.cos, rope.sin, dq);
  be.rope_backward(dk, rope.cos, rope.sin, dk);
  Tensor dxn1 = be.empty({N, E}, dt);
  const Tensor dq2 = dq.reshape({N, H * hd}), dk2 = dk.reshape({N, Hkv * hd}),
               dv2 = dv.reshape({N, Hkv * hd});
  be.gemm(false, false, 1.0, dq2, w.wq, 0.0, dxn1);
  be.gemm(false, false, 1.0, dk2, w.wk, 1.0, dxn1);
  be.gemm(false, false, 1.0, dv2, w.wv, 1.0, dxn1);
  weight_grad(be, dq2, s.xn1, g.wq, defer);
  weight_grad(be, dk2, s.xn1, g.wk, defer);
  weight_grad(be, dv2, s.xn1, g.wv, defer);
  be.rmsnorm_backward(dxn1, s.x.reshape({N, E}), w.attn_norm, s.rstd1, dx.reshape({N, E}),
                      g.attn_norm);
  be.axpy(1.0, dh, dx);  // residual
}

}  // namespace

void layer_forward(Backend& be, const ModelConfig& cfg, const LayerWeights& w,
                   const RopeTables& rope, const Tensor& x, const Tensor& y, LayerSaved* saved) {
  if (!cfg.is_llama()) {
    be.gemm(false, false, 1.0, x, w.w, 0.0, y);  // y = x W, [N,E] x [E,E]
    if (saved) saved->x = x;
    return;
  }
  LayerSaved local;
  llama_forward(be, cfg, w, rope, x, y, saved ? *saved : local);
}

void layer_backward(Backend& be, const ModelConfig& cfg, const LayerWeights& w,
                    const LayerWeights& grads, const RopeTables& rope, const LayerSaved& saved,
                    const Tensor& dy, const Tensor& dx, std::vector<DeferredWeightGrad>* deferred) {
  if (!cfg.is_llama()) {
    be.gemm(false, true, 1.0, dy, w.w, 0.0, dx);      // dx = dy W^T
    weight_grad(be, saved.x, dy, grads.w, deferred);  // dW += x^T dy
    return;
  }
  llama_backward(be, cfg, w, grads, rope, saved, dy, dx, deferred);
}

void apply_weight_grads(Backend& be, const std::vector<DeferredWeightGrad>& deferred) {
  for (const auto& d : deferred) be.gemm(true, false, 1.0, d.a, d.b, 1.0, d.grad);
}

}  // namespace carousel
