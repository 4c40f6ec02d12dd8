// backend_rows.cpp — the Backend front end of the per-row ops a mixture-of-experts combine needs
// (models/moe_mlp.h): each row scaled by its own factor, and the dot product of two tensors'
// matching rows. Arguments are checked here once for every backend, as in backend.cpp; bfloat16
// is staged through float32 (bf16_staging.h).
#include "compute/backend_internal.h"
#include "compute/bf16_staging.h"
#include "compute/op_check.h"

namespace carousel {

using detail::from;
using detail::In;
using detail::OpCheck;
using detail::Out;
using detail::stage_bf16;

void Backend::scale_rows(const Tensor& x, const Tensor& scale, const Tensor& out) {
  const OpScope timed(*this, Op::scale_rows);
  if (stage_bf16(*this, Op::scale_rows, &Backend::scale_rows, In{x}, In{scale}, Out{out})) return;
  OpCheck check(Op::scale_rows, *this);
  check.floating("x", x).like("out", out, "x", x).stats("scale", scale, "x", x);
  check.shape("scale", scale, {x.rows()}, from("one per row", "x", x));
  issue(&Backend::do_scale_rows, x, scale, out);
}

void Backend::row_dots(const Tensor& a, const Tensor& b, const Tensor& out) {
  const OpScope timed(*this, Op::row_dots);
  if (stage_bf16(*this, Op::row_dots, &Backend::row_dots, In{a}, In{b}, Out{out})) return;
  OpCheck check(Op::row_dots, *this);
  check.floating("a", a).like("b", b, "a", a).stats("out", out, "a", a);
  check.shape("out", out, {a.rows()}, from("one per row", "a", a));
  issue(&Backend::do_row_dots, a, b, out);
}

}  // namespace carousel
