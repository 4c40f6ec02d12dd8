// linear.h — every weight GEMM of the model, as pieces that own their weight's place on the tensor
// axis and the collective it needs (picotron's ColumnParallelLinear / RowParallelLinear, for
// carousel's sequence-parallel layout: docs/parallelism.md#tensor-parallelism). models/ calls no
// GEMM outside this file's pieces (scripts/check_architecture.py keeps it so): one place for a
// numeric format to put its per-tensor scales, and one place the planner reads the tensor axis's
// collectives from (kLlamaTensorPieces below).
//
//   Linear          y = x W^T, W [out, in] as Hugging Face stores it (MaxText's simple layer keeps
//                   [in, out]: InOut); replicated on the tensor axis (the router, the simple
//                   layer, the heads without tensor parallelism).
//   ColumnParallel  projections that read one input, each weight a block of its rows on each
//                   tensor rank (q, k, v; gate, up; the vocabulary-parallel head): the input's
//                   rows are all-gathered once in the forward, and the input gradient, a partial
//                   sum over the ranks' blocks, reduce-scattered back to rows in the backward.
//   RowParallel     a projection whose weight is a block of its columns on each rank (o, down):
//                   its output is a partial sum, reduce-scattered to rows and added to the
//                   residual; the output gradient is all-gathered in the backward.
//   GroupedLinear   one GEMM per routed expert on its rows (the experts' stacked [X, out, in]).
// With one tensor rank every piece is the plain GEMM: no copy, no collective, the same bits.
// With quantization=fp8 the column and row pieces (the attention and MLP projections) quantise
// their operands first (float8_gemm.h: E4M3 forward, E5M2 output gradients, whole-tensor amax);
// Linear and GroupedLinear (router, simple layer, heads, routed experts) stay unquantised.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "compute/backend.h"
#include "models/parallel/float8_gemm.h"
#include "models/parallel/tensor_parallel.h"

namespace carousel {

// One weight-gradient GEMM, grad += alpha a^T b, kept for later: the zero-bubble schedules split
// the backward into I (input gradients, on the critical path) and W (these GEMMs). alpha: 1, or
// 1 / (s_a s_b) for float8 operands (a and b then hold the quantised values).
struct DeferredWeightGrad {
  Tensor a, b, grad;
  double alpha = 1.0;
};
// Runs deferred weight-gradient GEMMs (the W of an I/W split), in the order they were made.
void apply_weight_grads(Backend& be, const std::vector<DeferredWeightGrad>& deferred);

class Linear {
 public:
  enum class Layout { OutIn, InOut };  // W [out, in] (y = x W^T), or [in, out] (y = x W)
  explicit Linear(const Tensor& weight, Layout layout = Layout::OutIn)
      : weight_(weight), layout_(layout) {}

  // y = x W^T + beta y: [N, in] -> [N, out].
  void forward(Backend& be, const Tensor& x, const Tensor& y, double beta = 0) const;
  // dx = dy W + beta dx: [N, out] -> [N, in].
  void input_grad(Backend& be, const Tensor& dy, const Tensor& dx, double beta = 0) const;
  // grad += dy^T x ([out, in]; x^T dy for InOut), now or, with `deferred`, appended there.
  void weight_grad(Backend& be, const Tensor& dy, const Tensor& x, const Tensor& grad,
                   std::vector<DeferredWeightGrad>* deferred = nullptr) const;

 private:
  Tensor weight_;
  Layout layout_;
};

// A weight and its gradient: a projection as a backward sees it.
struct WeightAndGrad {
  Tensor weight, grad;
};

class ColumnParallel {
 public:
  explicit ColumnParallel(const TensorGroup& tensor, Float8Gemm fp8 = {})
      : tensor_(tensor), fp8_(fp8) {}

  // This rank's rows [n, in] -> every token [N, in], the input all the projections read (the
  // caller keeps it for the backward's weight gradients). One tensor rank: `rows` itself.
  Tensor gather_input(Backend& be, const Tensor& rows) const;
  // y = input W^T for one projection: [N, in] x [out/T, in]^T -> [N, out/T].
  void forward(Backend& be, const Tensor& input, const Tensor& weight, const Tensor& y) const;
  // The backward of the projections that read `input` [N, in], given their output gradients
  // `dys` (in the forward's order): their input gradients summed into `dinput` [N, in] (added to
  // what it holds when `accumulate`: an MoE layer's routed experts read the same input), each
  // weight's gradient += dy^T input (now, or deferred), and the sum, partial over the tensor
  // ranks, reduce-scattered back to this rank's rows [n, in], which is returned.
  Tensor backward(Backend& be, const Tensor& input, std::initializer_list<WeightAndGrad> weights,
                  std::initializer_list<Tensor> dys, const Tensor& dinput, bool accumulate,
                  std::vector<DeferredWeightGrad>* deferred = nullptr) const;
  // The reduce-scatter alone, for an input gradient summed elsewhere: [N, in] -> [n, in].
  Tensor scatter_input_grad(Backend& be, const Tensor& partial) const;

 private:
  const TensorGroup& tensor_;
  Float8Gemm fp8_;
};

class RowParallel {
 public:
  explicit RowParallel(const TensorGroup& tensor, Float8Gemm fp8 = {})
      : tensor_(tensor), fp8_(fp8) {}

  // out [n, E] = residual [n, E] + this rank's rows of (a W^T summed over the group), a [N, k/T]
  // and W [E, k/T] this rank's columns. `also` [N, E], when given, is a partial sum over the
  // group of the same shape added to a W^T before the sum (an MoE layer's routed experts' output:
  // one reduce-scatter for both); with one tensor rank it is added after the residual, as the
  // single-device layer does. An undefined `weight`: `also` alone (an MoE layer without shared
  // experts).
  void forward(Backend& be, const Tensor& a, const Tensor& weight, const Tensor& residual,
               const Tensor& out, const Tensor& also = {}) const;
  // The output gradient, this rank's rows [n, E], gathered to every token [N, E] (returned: the
  // caller passes it on to what else read the output's partial sums).
  Tensor gather_output_grad(Backend& be, const Tensor& dout_rows) const;
  // da = dout W ([N, E] x [E, k/T]) and grad += dout^T a (now, or deferred), dout gathered.
  void backward(Backend& be, const Tensor& dout, const Tensor& a, const WeightAndGrad& w,
                const Tensor& da, std::vector<DeferredWeightGrad>* deferred = nullptr) const;

 private:
  const TensorGroup& tensor_;
  Float8Gemm fp8_;
};

// The routed experts' GEMMs: weights [X, out, in] stacked, expert e on rows [rows[e], rows[e+1])
// of its input.
class GroupedLinear {
 public:
  GroupedLinear(const Tensor& weights, const std::vector<std::int64_t>& rows)
      : weights_(weights), rows_(rows) {}
  // y_e = x_e W_e^T + beta y_e.
  void forward(Backend& be, const Tensor& x, const Tensor& y, double beta = 0) const;
  // dx_e = dy_e W_e + beta dx_e.
  void input_grad(Backend& be, const Tensor& dy, const Tensor& dx, double beta = 0) const;
  // grad_e += dy_e^T x_e.
  void weight_grad(Backend& be, const Tensor& dy, const Tensor& x, const Tensor& grad) const;

 private:
  Tensor weights_;
  const std::vector<std::int64_t>& rows_;  // the caller's, alive while the piece is used
};

// The tensor-parallel pieces of a llama layer, in the order its forward runs them: each moves
// one [N, E] activation over the tensor group in the forward (the column pieces' input gather,
// the row pieces' output reduce-scatter) and one in the backward. The planner counts a layer's
// tensor traffic from this table (host/plan/plan_traffic.cpp).
enum class LayerPiece { AttentionIn, OutProj, MlpIn, MlpOut };
enum class PieceKind { Column, Row };
struct TensorPiece {
  LayerPiece piece;
  PieceKind kind;
  const char* weights;  // the projections it holds
};
inline constexpr TensorPiece kLlamaTensorPieces[] = {
    {LayerPiece::AttentionIn, PieceKind::Column, "wq, wk, wv"},
    {LayerPiece::OutProj, PieceKind::Row, "wo"},
    {LayerPiece::MlpIn, PieceKind::Column, "w_gate, w_up (an MoE layer: the experts' input too)"},
    {LayerPiece::MlpOut, PieceKind::Row, "w_down (an MoE layer: with the experts' output)"},
};

}  // namespace carousel
