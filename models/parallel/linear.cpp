// linear.cpp — the weight GEMMs and their tensor-axis collectives (linear.h). Each piece issues
// the same Backend ops in the same order as the layer did when it called them bare, so every
// layout's results are bitwise what they were; with float8 on, the column and row pieces multiply
// their operands as float8_gemm.h quantises them (off, an operand is its tensor and alpha is 1:
// the same ops as before).
#include "models/parallel/linear.h"

#include "compute/error.h"

namespace carousel {

namespace {
// grad += alpha a^T b, now or appended to `deferred` (the W of an I/W split).
void weight_gemm(Backend& be, const DeferredWeightGrad& d,
                 std::vector<DeferredWeightGrad>* deferred) {
  if (deferred) {
    deferred->push_back(d);
  } else {
    be.gemm(true, false, d.alpha, d.a, d.b, 1.0, d.grad);
  }
}

constexpr Float8Format kForward = Float8Format::E4M3;   // activations and weights
constexpr Float8Format kGradient = Float8Format::E5M2;  // output gradients
}  // namespace

void apply_weight_grads(Backend& be, const std::vector<DeferredWeightGrad>& deferred) {
  for (const auto& d : deferred) be.gemm(true, false, d.alpha, d.a, d.b, 1.0, d.grad);
}

void Linear::forward(Backend& be, const Tensor& x, const Tensor& y, double beta) const {
  be.gemm(false, layout_ == Layout::OutIn, 1.0, x, weight_, beta, y);
}

void Linear::input_grad(Backend& be, const Tensor& dy, const Tensor& dx, double beta) const {
  be.gemm(false, layout_ == Layout::InOut, 1.0, dy, weight_, beta, dx);
}

void Linear::weight_grad(Backend& be, const Tensor& dy, const Tensor& x, const Tensor& grad,
                         std::vector<DeferredWeightGrad>* deferred) const {
  weight_gemm(
      be,
      layout_ == Layout::OutIn ? DeferredWeightGrad{dy, x, grad} : DeferredWeightGrad{x, dy, grad},
      deferred);
}

Tensor ColumnParallel::gather_input(Backend& be, const Tensor& rows) const {
  return tensor_.gather_rows(be, rows);
}

// The gathered input holds every token of this rank's context part; the weight, this tensor
// rank's rows.
void ColumnParallel::forward(Backend& be, const Tensor& input, const Tensor& weight,
                             const Tensor& y) const {
  const Float8Operand x = fp8_.quantize(be, input, kForward, Spread::ContextRanks);
  const Float8Operand w = fp8_.quantize(be, weight, kForward, Spread::TensorRanks);
  be.gemm(false, true, Float8Gemm::alpha(x, w), x.values, w.values, 0.0, y);
}

Tensor ColumnParallel::backward(Backend& be, const Tensor& input,
                                std::initializer_list<WeightAndGrad> weights,
                                std::initializer_list<Tensor> dys, const Tensor& dinput,
                                bool accumulate, std::vector<DeferredWeightGrad>* deferred) const {
  CAROUSEL_ASSERT(weights.size() == dys.size() && weights.size() > 0,
                  "{} projections with {} output gradients", weights.size(), dys.size());
  // The output gradients [N, out/T] are split over the tensor ranks' columns and the context
  // ranks' tokens.
  std::vector<Float8Operand> w, dy;
  const Tensor* g = dys.begin();
  for (const WeightAndGrad& p : weights) {
    w.push_back(fp8_.quantize(be, p.weight, kForward, Spread::TensorRanks));
    dy.push_back(fp8_.quantize(be, *g++, kGradient, Spread::Both));
  }
  // Every input gradient first, then the weight gradients: the I of an I/W split comes before
  // its W, in the order the forward ran the projections.
  for (std::size_t i = 0; i < w.size(); ++i) {
    be.gemm(false, false, Float8Gemm::alpha(dy[i], w[i]), dy[i].values, w[i].values,
            i == 0 && !accumulate ? 0.0 : 1.0, dinput);
  }
  const Float8Operand x = fp8_.quantize(be, input, kForward, Spread::ContextRanks);
  std::size_t i = 0;
  for (const WeightAndGrad& p : weights) {
    weight_gemm(be, {dy[i].values, x.values, p.grad, Float8Gemm::alpha(dy[i], x)}, deferred);
    ++i;
  }
  return scatter_input_grad(be, dinput);
}

Tensor ColumnParallel::scatter_input_grad(Backend& be, const Tensor& partial) const {
  return tensor_.reduce_scatter_rows(be, partial);
}

// The input [N, k/T] is split over the tensor ranks' columns and the context ranks' tokens; the
// weight [E, k/T] over the tensor ranks.
void RowParallel::forward(Backend& be, const Tensor& a, const Tensor& weight,
                          const Tensor& residual, const Tensor& out, const Tensor& also) const {
  CAROUSEL_ASSERT(weight.defined() || also.defined(), "a row-parallel piece with nothing to add");
  Float8Operand x, w;
  if (weight.defined()) {
    x = fp8_.quantize(be, a, kForward, Spread::Both);
    w = fp8_.quantize(be, weight, kForward, Spread::TensorRanks);
  }
  const auto project = [&](const Tensor& y, double beta) {  // y = x W^T + beta y
    be.gemm(false, true, Float8Gemm::alpha(x, w), x.values, w.values, beta, y);
  };
  if (tensor_.size() == 1) {
    be.copy(residual, out);
    if (weight.defined()) project(out, 1.0);
    if (also.defined()) be.axpy(1.0, also.reshape(out.shape()), out);
    return;
  }
  Tensor partial = also;  // [N, E], summed over the group with a W^T
  if (!weight.defined()) {
  } else if (partial.defined()) {
    project(partial, 1.0);
  } else {
    partial = be.empty({a.rows(), weight.rows()}, out.dtype());
    project(partial, 0.0);
  }
  be.add(residual, tensor_.reduce_scatter_rows(be, partial).reshape(residual.shape()), out);
}

Tensor RowParallel::gather_output_grad(Backend& be, const Tensor& dout_rows) const {
  return tensor_.gather_rows(be, dout_rows);
}

// dout, gathered over the tensor ranks, holds this context rank's tokens.
void RowParallel::backward(Backend& be, const Tensor& dout, const Tensor& a, const WeightAndGrad& w,
                           const Tensor& da, std::vector<DeferredWeightGrad>* deferred) const {
  const Float8Operand dy = fp8_.quantize(be, dout, kGradient, Spread::ContextRanks);
  const Float8Operand wq = fp8_.quantize(be, w.weight, kForward, Spread::TensorRanks);
  be.gemm(false, false, Float8Gemm::alpha(dy, wq), dy.values, wq.values, 0.0, da);
  const Float8Operand x = fp8_.quantize(be, a, kForward, Spread::Both);
  weight_gemm(be, {dy.values, x.values, w.grad, Float8Gemm::alpha(dy, x)}, deferred);
}

void GroupedLinear::forward(Backend& be, const Tensor& x, const Tensor& y, double beta) const {
  be.grouped_gemm(true, 1.0, x, weights_, rows_, beta, y);
}

void GroupedLinear::input_grad(Backend& be, const Tensor& dy, const Tensor& dx, double beta) const {
  be.grouped_gemm(false, 1.0, dy, weights_, rows_, beta, dx);
}

void GroupedLinear::weight_grad(Backend& be, const Tensor& dy, const Tensor& x,
                                const Tensor& grad) const {
  be.grouped_weight_gemm(1.0, dy, x, rows_, 1.0, grad);
}

}  // namespace carousel
