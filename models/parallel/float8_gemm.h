// float8_gemm.h — the tensorwise float8 recipe of the projection GEMMs (quantization=fp8,
// fp8_recipe=tensorwise; docs/float8.md): how an operand is quantised before the GEMM pieces of
// linear.h multiply it.
//
// Transformer Engine's "hybrid" formats: activations and weights E4M3 in the forward, the output
// gradient E5M2 in the backward (for both the input and the weight gradient, which reuse the
// forward's E4M3 weight and input). Each operand gets one scale, s = float8 max / amax
// (float8_scale, compute/float8/float8.h), from the amax of the WHOLE logical tensor: an operand
// split over ranks has its amax max-reduced over the ranks holding its parts — the tensor ranks
// for a weight's rows or columns and a column-split activation or gradient, the context ranks for
// the tokens of an activation or a gradient — so every mesh quantises exactly as one device does
// (FSDP gathers whole weights before a layer runs; data replicas and pipeline microbatches are
// whole tensors each). The quantised values stay in the operand's dtype (exact: float8 values are
// bfloat16 and float32 values), and the GEMM multiplies them with alpha = 1 / (s_a s_b): the
// float8 GEMM with float32 accumulation, which cuBLASLt's float8 GEMM with scale pointers will
// replace on GPUs. Each quantisation reads its amax on the host (one value per operand): the GPU
// part keeps it on the device.
#pragma once

#include "compute/backend.h"
#include "models/parallel/context_parallel.h"
#include "models/parallel/tensor_parallel.h"

namespace carousel {

// A GEMM operand as the recipe feeds it: its values on the float8 grid, and the scale they were
// multiplied by (with float8 off: the tensor itself, scale 1).
struct Float8Operand {
  Tensor values;
  float scale = 1.0f;
};

// Which ranks hold parts of an operand (its amax is reduced over them).
enum class Spread {
  TensorRanks,   // split over the tensor ranks (a weight's rows or columns)
  ContextRanks,  // its tokens split over the context ranks (a gathered activation or gradient)
  Both,          // both (a row piece's input, a column piece's output gradient)
};

class Float8Gemm {
 public:
  Float8Gemm() = default;  // off: operands are their tensors, alpha 1
  Float8Gemm(bool on, const TensorGroup& tensor, const ContextGroup& context)
      : on_(on), tensor_(tensor.comm), context_(context.comm) {}

  bool on() const { return on_; }
  // x quantised to `format` with the scale of the whole tensor it is part of; off: x, scale 1.
  Float8Operand quantize(Backend& be, const Tensor& x, Float8Format format, Spread spread) const;
  // The GEMM's alpha for operands a and b: 1 / (s_a s_b).
  static double alpha(const Float8Operand& a, const Float8Operand& b) {
    return 1.0 / (double(a.scale) * double(b.scale));
  }

 private:
  bool on_ = false;
  Communicator* tensor_ = nullptr;   // the tensor group (nullptr: one rank)
  Communicator* context_ = nullptr;  // the context group (nullptr: one rank)
};

// Tests only (tests/parallel/test_pipeline_float8.cpp, tests/models/test_float8_gemm.cpp): each
// rank scales its part by its part's own amax, as a recipe without the reductions would; the
// tests show that a mesh then no longer equals one device.
void set_float8_shard_local_amax_for_tests(bool on);

}  // namespace carousel
