// linear.cpp — the weight GEMMs and their tensor-axis collectives (linear.h). Each piece issues
// the same Backend ops in the same order as the layer did when it called them bare, so every
// layout's results are bitwise what they were.
#include "models/parallel/linear.h"

#include "compute/error.h"

namespace carousel {

void apply_weight_grads(Backend& be, const std::vector<DeferredWeightGrad>& deferred) {
  for (const auto& d : deferred) be.gemm(true, false, 1.0, d.a, d.b, 1.0, d.grad);
}

void Linear::forward(Backend& be, const Tensor& x, const Tensor& y, double beta) const {
  be.gemm(false, layout_ == Layout::OutIn, 1.0, x, weight_, beta, y);
}

void Linear::input_grad(Backend& be, const Tensor& dy, const Tensor& dx, double beta) const {
  be.gemm(false, layout_ == Layout::InOut, 1.0, dy, weight_, beta, dx);
}

void Linear::weight_grad(Backend& be, const Tensor& dy, const Tensor& x, const Tensor& grad,
                         std::vector<DeferredWeightGrad>* deferred) const {
  const DeferredWeightGrad d =
      layout_ == Layout::OutIn ? DeferredWeightGrad{dy, x, grad} : DeferredWeightGrad{x, dy, grad};
  if (deferred) {
    deferred->push_back(d);
  } else {
    be.gemm(true, false, 1.0, d.a, d.b, 1.0, d.grad);
  }
}

Tensor ColumnParallel::gather_input(Backend& be, const Tensor& rows) const {
  return tensor_.gather_rows(be, rows);
}

void ColumnParallel::forward(Backend& be, const Tensor& input, const Tensor& weight,
                             const Tensor& y) const {
  Linear(weight).forward(be, input, y);
}

Tensor ColumnParallel::backward(Backend& be, const Tensor& input,
                                std::initializer_list<WeightAndGrad> weights,
                                std::initializer_list<Tensor> dys, const Tensor& dinput,
                                bool accumulate, std::vector<DeferredWeightGrad>* deferred) const {
  CAROUSEL_ASSERT(weights.size() == dys.size() && weights.size() > 0,
                  "{} projections with {} output gradients", weights.size(), dys.size());
  // Every input gradient first, then the weight gradients: the I of an I/W split comes before
  // its W, in the order the forward ran the projections.
  const Tensor* dy = dys.begin();
  bool first = true;
  for (const WeightAndGrad& w : weights) {
    Linear(w.weight).input_grad(be, *dy++, dinput, first && !accumulate ? 0.0 : 1.0);
    first = false;
  }
  dy = dys.begin();
  for (const WeightAndGrad& w : weights) Linear(w.weight).weight_grad(be, *dy++, input, w.grad, deferred);
  return scatter_input_grad(be, dinput);
}

Tensor ColumnParallel::scatter_input_grad(Backend& be, const Tensor& partial) const {
  return tensor_.reduce_scatter_rows(be, partial);
}

void RowParallel::forward(Backend& be, const Tensor& a, const Tensor& weight,
                          const Tensor& residual, const Tensor& out, const Tensor& also) const {
  CAROUSEL_ASSERT(weight.defined() || also.defined(), "a row-parallel piece with nothing to add");
  const Linear w(weight);
  if (tensor_.size() == 1) {
    be.copy(residual, out);
    if (weight.defined()) w.forward(be, a, out, 1.0);
    if (also.defined()) be.axpy(1.0, also.reshape(out.shape()), out);
    return;
  }
  Tensor partial = also;  // [N, E], summed over the group with a W^T
  if (!weight.defined()) {
  } else if (partial.defined()) {
    w.forward(be, a, partial, 1.0);
  } else {
    partial = be.empty({a.rows(), weight.rows()}, out.dtype());
    w.forward(be, a, partial);
  }
  be.add(residual, tensor_.reduce_scatter_rows(be, partial).reshape(residual.shape()), out);
}

Tensor RowParallel::gather_output_grad(Backend& be, const Tensor& dout_rows) const {
  return tensor_.gather_rows(be, dout_rows);
}

void RowParallel::backward(Backend& be, const Tensor& dout, const Tensor& a,
                           const WeightAndGrad& w, const Tensor& da,
                           std::vector<DeferredWeightGrad>* deferred) const {
  const Linear linear(w.weight);
  linear.input_grad(be, dout, da);
  linear.weight_grad(be, dout, a, w.grad, deferred);
}

void GroupedLinear::forward(Backend& be, const Tensor& x, const Tensor& y, double beta) const {
  be.grouped_gemm(true, 1.0, x, weights_, rows_, beta, y);
}

void GroupedLinear::input_grad(Backend& be, const Tensor& dy, const Tensor& dx,
                               double beta) const {
  be.grouped_gemm(false, 1.0, dy, weights_, rows_, beta, dx);
}

void GroupedLinear::weight_grad(Backend& be, const Tensor& dy, const Tensor& x,
                                const Tensor& grad) const {
  be.grouped_weight_gemm(1.0, dy, x, rows_, 1.0, grad);
}

}  // namespace carousel
