// backend_experts.cpp — the Backend front end of the ops a mixture-of-experts layer needs beyond
// the dense ones (models/moe_mlp.h): each row scaled by its own factor, the dot product of two
// tensors' matching rows, and the experts' grouped GEMM (with its default: one GEMM per group).
// Arguments are checked here once for every backend, as in backend.cpp; bfloat16 is staged
// through float32 (bf16_staging.h) except in the GEMM, which takes it as gemm does.
#include "compute/backend_internal.h"
#include "compute/bf16_staging.h"
#include "compute/op_check.h"

namespace carousel {

using detail::check_gemm_dtypes;
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

namespace {
// Group offsets rise from 0 to the rows.
void check_offsets(const OpCheck& check, const std::vector<std::int64_t>& first,
                   std::int64_t rows) {
  bool ordered = !first.empty() && first.front() == 0 && first.back() == rows;
  for (std::size_t g = 1; g < first.size(); ++g) ordered = ordered && first[g - 1] <= first[g];
  check.that(ordered, fmt::format("the group offsets must rise from 0 to a's {} rows", rows));
}
}  // namespace

void Backend::grouped_gemm(bool trans_b, double alpha, const Tensor& a, const Tensor& b,
                           const std::vector<std::int64_t>& first, double beta, const Tensor& c) {
  const OpScope timed(*this, Op::grouped_gemm);
  OpCheck check(Op::grouped_gemm, *this);
  check_gemm_dtypes(check, a, b, c);
  check.rank("a", a, 2, "[rows, k]").rank("b", b, 3, "[groups, n, k] or [groups, k, n]");
  check.rank("c", c, 2, "[rows, n]");
  const std::int64_t groups = b.dim(0), k = a.cols(), n = c.cols();
  check.that(std::int64_t(first.size()) == groups + 1,
             fmt::format("'first' has {} offsets for {} groups (b {}): one more than the groups",
                         first.size(), groups, shape_str(b.shape())));
  check.that(
      b.dim(trans_b ? 2 : 1) == k && b.dim(trans_b ? 1 : 2) == n,
      fmt::format("b {} is not [groups, {}] for a {} and c {}{}", shape_str(b.shape()),
                  trans_b ? fmt::format("{}, {}", n, k) : fmt::format("{}, {}", k, n),
                  shape_str(a.shape()), shape_str(c.shape()), trans_b ? " (transposed)" : ""));
  check.that(c.rows() == a.rows(), fmt::format("c {} and a {} have different rows",
                                               shape_str(c.shape()), shape_str(a.shape())));
  check_offsets(check, first, a.rows());
  issue(&Backend::do_grouped_gemm, trans_b, alpha, a, b, first, beta, c);
}

void Backend::grouped_weight_gemm(double alpha, const Tensor& a, const Tensor& b,
                                  const std::vector<std::int64_t>& first, double beta,
                                  const Tensor& c) {
  const OpScope timed(*this, Op::grouped_weight_gemm);
  OpCheck check(Op::grouped_weight_gemm, *this);
  check_gemm_dtypes(check, a, b, c);
  check.rank("a", a, 2, "[rows, m]").rank("b", b, 2, "[rows, n]");
  check.rank("c", c, 3, "[groups, m, n]");
  check.that(b.rows() == a.rows(), fmt::format("a {} and b {} have different rows",
                                               shape_str(a.shape()), shape_str(b.shape())));
  check.that(c.dim(1) == a.cols() && c.dim(2) == b.cols(),
             fmt::format("c {} is not [groups, {}, {}] for a {} and b {}", shape_str(c.shape()),
                         a.cols(), b.cols(), shape_str(a.shape()), shape_str(b.shape())));
  check.that(std::int64_t(first.size()) == c.dim(0) + 1,
             fmt::format("'first' has {} offsets for {} groups (c {}): one more than the groups",
                         first.size(), c.dim(0), shape_str(c.shape())));
  check_offsets(check, first, a.rows());
  issue(&Backend::do_grouped_weight_gemm, alpha, a, b, first, beta, c);
}

void Backend::do_grouped_gemm(bool trans_b, double alpha, const Tensor& a, const Tensor& b,
                              const std::vector<std::int64_t>& first, double beta,
                              const Tensor& c) {
  const std::int64_t k = a.cols(), n = c.cols();
  for (std::size_t g = 0; g + 1 < first.size(); ++g) {
    const std::int64_t rows = first[g + 1] - first[g];
    if (rows == 0) continue;
    const Tensor bg = b.view(std::int64_t(g) * n * k, trans_b ? Shape{n, k} : Shape{k, n});
    do_gemm(false, trans_b, GemmDims{1, rows, n, k}, alpha, a.view(first[g] * k, {rows, k}), bg,
            beta, c.view(first[g] * n, {rows, n}));
  }
}

void Backend::do_grouped_weight_gemm(double alpha, const Tensor& a, const Tensor& b,
                                     const std::vector<std::int64_t>& first, double beta,
                                     const Tensor& c) {
  const std::int64_t m = a.cols(), n = b.cols();
  for (std::size_t g = 0; g + 1 < first.size(); ++g) {
    const std::int64_t rows = first[g + 1] - first[g];
    if (rows == 0 && beta == 1.0) continue;  // nothing to add
    do_gemm(true, false, GemmDims{1, m, n, rows}, alpha, a.view(first[g] * m, {rows, m}),
            b.view(first[g] * n, {rows, n}), beta, c.view(std::int64_t(g) * m * n, {m, n}));
  }
}

}  // namespace carousel
