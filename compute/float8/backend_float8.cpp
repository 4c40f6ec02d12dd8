// backend_float8.cpp — the Backend front end of the float8 ops (backend.h: amax,
// quantize_float8): their argument checks, once for every backend, as backend.cpp does for the
// others. Both take bfloat16 and float64 as they take float32 (no staging: amax is exact on bf16
// values, and quantize_float8 converts each element to float32 itself), so the kernels see the
// tensors as they are; float64 lets the layer tests' float64 oracle run the float8 recipe.
#include "compute/backend_internal.h"
#include "compute/op_check.h"

namespace carousel {

using detail::OpCheck;

void Backend::amax(const Tensor& x, const Tensor& out) {
  const OpScope timed(*this, Op::amax);
  OpCheck check(Op::amax, *this);
  check.floating_or_bf16("x", x).on_device("out", out);
  check.that(out.dtype() == DType::F32,
             fmt::format("'out' is {}, but the amax is float32 ('out' {})", dtype_name(out.dtype()),
                         out.describe()));
  check.shape("out", out, {1}, "one value");
  issue(&Backend::do_amax, x, out);
}

void Backend::quantize_float8(const Tensor& x, Float8Format format, float scale,
                              const Tensor& out) {
  const OpScope timed(*this, Op::quantize_float8);
  OpCheck check(Op::quantize_float8, *this);
  check.floating_or_bf16("x", x).floating_or_bf16("out", out);
  check.shape("out", out, x.shape(), "the shape of 'x'");
  // A NaN scale is how a non-finite amax reaches the step's loss (float8_scale); an infinite or
  // non-positive one is a caller's bug.
  check.that(scale > 0 ? scale <= 3.4028234663852886e38f : scale != scale,
             fmt::format("the scale must be a positive finite float32 (or NaN from a non-finite "
                         "amax), got {}",
                         scale));
  issue(&Backend::do_quantize_float8, x, format, scale, out);
}

}  // namespace carousel
