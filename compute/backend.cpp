// backend.cpp — the Backend front end: argument validation shared by every backend, bfloat16
// staging, and backend-independent helpers.
//
// Each public op checks shapes, dtypes and devices (op_check.h) and then calls the backend's
// do_* implementation. An invalid call fails with one message naming the op, the argument and
// the shapes involved, before any memory is touched.
//
// bfloat16: an op with bf16 arguments first goes through stage_bf16() (bf16_staging.h), which
// marks each tensor argument In or Out. Unless the backend declares a native kernel for the op
// (has_native_bf16), the op runs on float32 copies of its bf16 arguments and each bf16 output is
// rounded once; with a native kernel the op is validated like float32 (bf16 allowed wherever
// float32 is, all floating arguments one dtype) and do_<op> receives the bf16 tensors.
#include "compute/backend.h"

#include <cmath>
#include <tuple>

#include "compute/backend_internal.h"
#include "compute/bf16_staging.h"
#include "compute/op_check.h"

namespace carousel {

using detail::check_gemm_dtypes;
using detail::check_token_range;
using detail::from;
using detail::In;
using detail::OpCheck;
using detail::Out;
using detail::stage_bf16;

const char* op_name(Backend::Op op) {
  switch (op) {
#define CAROUSEL_OP_NAME_(name) \
  case Backend::Op::name:       \
    return #name;
    CAROUSEL_BACKEND_OPS(CAROUSEL_OP_NAME_)
#undef CAROUSEL_OP_NAME_
  }
  return "?";
}

AdamWScalars AdamWParams::to_scalars() const {
  CAROUSEL_CHECK(step >= 1, "adamw: step must be >= 1 (1-based), got {}", step);
  return AdamWScalars{lr,
                      beta1,
                      beta2,
                      eps,
                      weight_decay,
                      grad_scale,
                      1.0 - std::pow(beta1, double(step)),
                      1.0 - std::pow(beta2, double(step))};
}

Backend::Backend(std::unique_ptr<DeviceAllocator> allocator) : allocator_(std::move(allocator)) {}

void Backend::start_op_timing() {
  CAROUSEL_ASSERT(op_depth_ == 0, "start_op_timing inside an op");
  if (!stopwatch_) stopwatch_ = make_op_stopwatch();
}

OpTimes Backend::stop_op_timing() {
  if (!stopwatch_) return {};
  synchronize();
  OpTimes times = stopwatch_->collect();
  stopwatch_.reset();
  return times;
}

std::unique_ptr<OpStopwatch> Backend::make_op_stopwatch() { return host_op_stopwatch(); }
Backend::~Backend() = default;

Tensor Backend::empty(Shape shape, DType dtype) {
  return Tensor::empty(*allocator_, std::move(shape), dtype);
}

Tensor Backend::zeros(Shape shape, DType dtype) {
  Tensor t = empty(std::move(shape), dtype);
  if (dtype != DType::F32 && dtype != DType::F64 && dtype != DType::BF16) {  // no fill for these
    std::vector<char> z(t.nbytes(), 0);
    upload(z.data(), t);
  } else {
    fill(t, 0.0);
  }
  return t;
}

void Backend::upload(const void* host, const Tensor& dst) {
  const OpScope timed(*this, Op::upload);
  OpCheck(Op::upload, *this).on_device("dst", dst);
  check_not_capturing(Op::upload);
  // Nothing to move: an empty vector's data() may be null, which memcpy must not get (an expert
  // rank that is sent no rows uploads an empty plan).
  if (dst.nbytes() == 0) return;
  do_upload(host, dst);
}

void Backend::download(const Tensor& src, void* host) {
  const OpScope timed(*this, Op::download);
  OpCheck(Op::download, *this).on_device("src", src);
  check_not_capturing(Op::download);
  if (src.nbytes() == 0) return;  // as upload
  do_download(src, host);
}

void Backend::fill(const Tensor& x, double value) {
  const OpScope timed(*this, Op::fill);
  OpCheck(Op::fill, *this).floating_or_bf16("x", x);
  issue(&Backend::do_fill, x, value);
}

void Backend::copy(const Tensor& src, const Tensor& dst) {
  const OpScope timed(*this, Op::copy);
  OpCheck c(Op::copy, *this);
  c.on_device("src", src);
  c.on_device("dst", dst);
  c.that(src.dtype() == dst.dtype() && src.shape() == dst.shape(),
         fmt::format("'src' {} and 'dst' {} must have the same dtype and shape", src.describe(),
                     dst.describe()));
  issue(&Backend::do_copy, src, dst);
}

void Backend::cast(const Tensor& src, const Tensor& dst) {
  const OpScope timed(*this, Op::cast);
  OpCheck c(Op::cast, *this);
  c.floating_or_bf16("src", src).floating_or_bf16("dst", dst);
  c.shape("dst", dst, src.shape(), "the shape of 'src'");
  issue(&Backend::do_cast, src, dst);
}

void Backend::scale(const Tensor& x, double alpha) {
  const OpScope timed(*this, Op::scale);
  if (stage_bf16(*this, Op::scale, &Backend::scale, Out{x}, alpha)) return;
  OpCheck(Op::scale, *this).floating("x", x);
  issue(&Backend::do_scale, x, alpha);
}

void Backend::axpy(double alpha, const Tensor& x, const Tensor& y) {
  const OpScope timed(*this, Op::axpy);
  if (stage_bf16(*this, Op::axpy, &Backend::axpy, alpha, In{x}, Out{y})) return;
  OpCheck(Op::axpy, *this).floating("x", x).like("y", y, "x", x);
  issue(&Backend::do_axpy, alpha, x, y);
}

void Backend::add(const Tensor& a, const Tensor& b, const Tensor& out) {
  const OpScope timed(*this, Op::add);
  if (stage_bf16(*this, Op::add, &Backend::add, In{a}, In{b}, Out{out})) return;
  OpCheck(Op::add, *this).floating("a", a).like("b", b, "a", a).like("out", out, "a", a);
  issue(&Backend::do_add, a, b, out);
}

double Backend::sum(const Tensor& x) {
  const OpScope timed(*this, Op::sum);
  if (auto staged = stage_bf16(*this, Op::sum, &Backend::sum, In{x})) return *staged;
  OpCheck(Op::sum, *this).floating("x", x);
  check_not_capturing(Op::sum);
  return do_sum(x, false);
}

double Backend::sum_squares(const Tensor& x) {
  const OpScope timed(*this, Op::sum_squares);
  if (auto staged = stage_bf16(*this, Op::sum_squares, &Backend::sum_squares, In{x}))
    return *staged;
  OpCheck(Op::sum_squares, *this).floating("x", x);
  check_not_capturing(Op::sum_squares);
  return do_sum(x, true);
}

void Backend::gemm(bool trans_a, bool trans_b, double alpha, const Tensor& a, const Tensor& b,
                   double beta, const Tensor& c) {
  const OpScope timed(*this, Op::gemm);
  OpCheck check(Op::gemm, *this);
  check_gemm_dtypes(check, a, b, c);
  const std::int64_t m = trans_a ? a.cols() : a.rows();
  const std::int64_t k = trans_a ? a.rows() : a.cols();
  const std::int64_t kb = trans_b ? b.cols() : b.rows();
  const std::int64_t n = trans_b ? b.rows() : b.cols();
  check.that(k == kb, fmt::format("inner dimensions differ: op(a) is [{},{}] (a {}{}) but op(b) "
                                  "is [{},{}] (b {}{})",
                                  m, k, shape_str(a.shape()), trans_a ? " transposed" : "", kb, n,
                                  shape_str(b.shape()), trans_b ? " transposed" : ""));
  check.that(c.rows() == m && c.cols() == n,
             fmt::format("argument 'c' has shape {} but op(a) op(b) is [{},{}] (a {}, b {})",
                         shape_str(c.shape()), m, n, shape_str(a.shape()), shape_str(b.shape())));
  issue(&Backend::do_gemm, trans_a, trans_b, GemmDims{1, m, n, k}, alpha, a, b, beta, c);
}

void Backend::gemm_strided_batched(bool trans_a, bool trans_b, double alpha, const Tensor& a,
                                   const Tensor& b, double beta, const Tensor& c) {
  const OpScope timed(*this, Op::gemm_strided_batched);
  OpCheck check(Op::gemm_strided_batched, *this);
  check_gemm_dtypes(check, a, b, c);
  check.rank("a", a, 3, "[batch, rows, cols]")
      .rank("b", b, 3, "[batch, rows, cols]")
      .rank("c", c, 3, "[batch, rows, cols]");
  const std::int64_t batch = a.dim(0);
  check.that(b.dim(0) == batch && c.dim(0) == batch,
             fmt::format("batch sizes differ: a {}, b {}, c {}", shape_str(a.shape()),
                         shape_str(b.shape()), shape_str(c.shape())));
  const std::int64_t m = trans_a ? a.dim(2) : a.dim(1);
  const std::int64_t k = trans_a ? a.dim(1) : a.dim(2);
  const std::int64_t kb = trans_b ? b.dim(2) : b.dim(1);
  const std::int64_t n = trans_b ? b.dim(1) : b.dim(2);
  check.that(k == kb, fmt::format("inner dimensions differ: a {}{} and b {}{}",
                                  shape_str(a.shape()), trans_a ? " transposed" : "",
                                  shape_str(b.shape()), trans_b ? " transposed" : ""));
  check.shape("c", c, {batch, m, n}, "batch x op(a) op(b)");
  issue(&Backend::do_gemm, trans_a, trans_b, GemmDims{batch, m, n, k}, alpha, a, b, beta, c);
}

void Backend::embedding_forward(const Tensor& table, const Tensor& tokens, const Tensor& out) {
  const OpScope timed(*this, Op::embedding_forward);
  if (stage_bf16(*this, Op::embedding_forward, &Backend::embedding_forward, In{table}, tokens,
                 Out{out}))
    return;
  OpCheck check(Op::embedding_forward, *this);
  check.floating("table", table).rank("table", table, 2, "[vocab, embed]").tokens("tokens", tokens);
  Shape expected = tokens.shape();
  expected.push_back(table.dim(1));
  check.same_dtype("out", out, "table", table)
      .shape("out", out, expected, "tokens shape + embed dim of 'table'");
  check_token_range(*this, op_name(Op::embedding_forward), "tokens", tokens, table.dim(0));
  issue(&Backend::do_embedding_forward, table, tokens, out);
}

void Backend::embedding_backward(const Tensor& dout, const Tensor& tokens, const Tensor& dtable) {
  const OpScope timed(*this, Op::embedding_backward);
  if (stage_bf16(*this, Op::embedding_backward, &Backend::embedding_backward, In{dout}, tokens,
                 Out{dtable}))
    return;
  OpCheck check(Op::embedding_backward, *this);
  check.floating("dout", dout).accumulator("dtable", dtable, "dout", dout);
  check.rank("dtable", dtable, 2, "[vocab, embed]").tokens("tokens", tokens);
  Shape expected = tokens.shape();
  expected.push_back(dtable.dim(1));
  check.shape("dout", dout, expected, "tokens shape + embed dim of 'dtable'");
  check_token_range(*this, op_name(Op::embedding_backward), "tokens", tokens, dtable.dim(0));
  issue(&Backend::do_embedding_backward, dout, tokens, dtable);
}

void Backend::rmsnorm_forward(const Tensor& x, const Tensor& weight, double eps, const Tensor& out,
                              const Tensor& rstd) {
  const OpScope timed(*this, Op::rmsnorm_forward);
  if (stage_bf16(*this, Op::rmsnorm_forward, &Backend::rmsnorm_forward, In{x}, In{weight}, eps,
                 Out{out}, Out{rstd}))
    return;
  OpCheck check(Op::rmsnorm_forward, *this);
  check.floating("x", x).same_dtype("weight", weight, "x", x);
  check.shape("weight", weight, {x.cols()}, from("the last dimension", "x", x));
  check.like("out", out, "x", x).stats("rstd", rstd, "x", x);
  check.shape("rstd", rstd, {x.rows()}, from("one per row", "x", x));
  check.that(eps > 0, fmt::format("eps must be > 0, got {}", eps));
  issue(&Backend::do_rmsnorm_forward, x, weight, eps, out, rstd);
}

void Backend::rmsnorm_backward(const Tensor& dout, const Tensor& x, const Tensor& weight,
                               const Tensor& rstd, const Tensor& dx, const Tensor& dweight) {
  const OpScope timed(*this, Op::rmsnorm_backward);
  if (stage_bf16(*this, Op::rmsnorm_backward, &Backend::rmsnorm_backward, In{dout}, In{x},
                 In{weight}, In{rstd}, Out{dx}, Out{dweight}))
    return;
  OpCheck check(Op::rmsnorm_backward, *this);
  check.floating("x", x).like("dout", dout, "x", x).like("dx", dx, "x", x);
  check.same_dtype("weight", weight, "x", x)
      .shape("weight", weight, {x.cols()}, from("the last dimension", "x", x));
  check.accumulator("dweight", dweight, "weight", weight)
      .shape("dweight", dweight, weight.shape(), "the shape of 'weight'");
  check.stats("rstd", rstd, "x", x);
  check.shape("rstd", rstd, {x.rows()}, from("one per row", "x", x));
  issue(&Backend::do_rmsnorm_backward, dout, x, weight, rstd, dx, dweight);
}

namespace {

void check_rope(Backend::Op op, const Backend& backend, const Tensor& x, const Tensor& cos,
                const Tensor& sin, const Tensor& out) {
  OpCheck check(op, backend);
  check.floating("x", x).rank("x", x, 4, "[batch, seq, heads, head_dim]");
  check.that(x.dim(3) % 2 == 0,
             fmt::format("head_dim must be even, 'x' has shape {}", shape_str(x.shape())));
  check.stats("cos", cos, "x", x);
  if (cos.rank() != 2 || cos.dim(0) != x.dim(0) * x.dim(1)) {  // else a row per token
    check.shape("cos", cos, {x.dim(1), x.dim(3) / 2}, from("[seq, head_dim/2]", "x", x));
  }
  check.that(cos.rank() == 2 && cos.dim(1) == x.dim(3) / 2,
             fmt::format("'cos' {} must be [seq or batch*seq, head_dim/2] for 'x' {}",
                         shape_str(cos.shape()), shape_str(x.shape())));
  check.like("sin", sin, "cos", cos).like("out", out, "x", x);
}
}  // namespace

void Backend::rope_forward(const Tensor& x, const Tensor& cos, const Tensor& sin,
                           const Tensor& out) {
  const OpScope timed(*this, Op::rope_forward);
  if (stage_bf16(*this, Op::rope_forward, &Backend::rope_forward, In{x}, In{cos}, In{sin},
                 Out{out}))
    return;
  check_rope(Op::rope_forward, *this, x, cos, sin, out);
  issue(&Backend::do_rope, x, cos, sin, out, /*backward=*/false);
}

void Backend::rope_backward(const Tensor& dout, const Tensor& cos, const Tensor& sin,
                            const Tensor& dx) {
  const OpScope timed(*this, Op::rope_backward);
  if (stage_bf16(*this, Op::rope_backward, &Backend::rope_backward, In{dout}, In{cos}, In{sin},
                 Out{dx}))
    return;
  check_rope(Op::rope_backward, *this, dout, cos, sin, dx);
  issue(&Backend::do_rope, dout, cos, sin, dx, /*backward=*/true);
}

namespace {

void check_attention(Backend::Op op, const Backend& backend, const Tensor& q, const Tensor& k,
                     const Tensor& v, const Tensor& out, const Tensor& lse,
                     const Tensor& doc_start) {
  OpCheck check(op, backend);
  check.floating("q", q).rank("q", q, 4, "[batch, seq, heads, head_dim]");
  check.same_dtype("k", k, "q", q).rank("k", k, 4, "[batch, seq, kv_heads, head_dim]");
  check.that(k.dim(0) == q.dim(0) && k.dim(1) >= q.dim(1) && k.dim(3) == q.dim(3),
             fmt::format("'k' {} must have the batch and head_dim of 'q' {} and at least its "
                         "seq (queries are the last positions of the keys' sequence)",
                         shape_str(k.shape()), shape_str(q.shape())));
  check.that(k.dim(2) > 0 && q.dim(2) % k.dim(2) == 0,
             fmt::format("query heads ({}, 'q' {}) must be a multiple of kv heads ({}, 'k' {})",
                         q.dim(2), shape_str(q.shape()), k.dim(2), shape_str(k.shape())));
  check.like("v", v, "k", k).like("out", out, "q", q).stats("lse", lse, "q", q);
  check.shape("lse", lse, {q.dim(0), q.dim(2), q.dim(1)}, from("[batch, heads, seq]", "q", q));
  if (doc_start.defined()) {
    check.that(doc_start.dtype() == DType::I32,
               fmt::format("'doc_start' must be int32, not {}", dtype_name(doc_start.dtype())));
    check.shape("doc_start", doc_start, {q.dim(0), q.dim(1)}, from("[batch, seq]", "q", q));
  }
}
}  // namespace

void Backend::attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& out, const Tensor& lse, const Tensor& doc_start) {
  const OpScope timed(*this, Op::attention_forward);
  if (stage_bf16(*this, Op::attention_forward, &Backend::attention_forward, In{q}, In{k}, In{v},
                 Out{out}, Out{lse}, doc_start))
    return;
  check_attention(Op::attention_forward, *this, q, k, v, out, lse, doc_start);
  issue(&Backend::do_attention_forward, q, k, v, out, lse, doc_start);
}

void Backend::attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                 const Tensor& v, const Tensor& out, const Tensor& lse,
                                 const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                 const Tensor& doc_start) {
  const OpScope timed(*this, Op::attention_backward);
  if (stage_bf16(*this, Op::attention_backward, &Backend::attention_backward, In{dout}, In{q},
                 In{k}, In{v}, In{out}, In{lse}, Out{dq}, Out{dk}, Out{dv}, doc_start))
    return;
  check_attention(Op::attention_backward, *this, q, k, v, out, lse, doc_start);
  OpCheck(Op::attention_backward, *this)
      .like("dout", dout, "q", q)
      .like("dq", dq, "q", q)
      .like("dk", dk, "k", k)
      .like("dv", dv, "v", v);
  issue(&Backend::do_attention_backward, dout, q, k, v, out, lse, dq, dk, dv, doc_start);
}

void Backend::swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& out) {
  const OpScope timed(*this, Op::swiglu_forward);
  if (stage_bf16(*this, Op::swiglu_forward, &Backend::swiglu_forward, In{gate}, In{up}, Out{out}))
    return;
  OpCheck(Op::swiglu_forward, *this)
      .floating("gate", gate)
      .like("up", up, "gate", gate)
      .like("out", out, "gate", gate);
  issue(&Backend::do_swiglu_forward, gate, up, out);
}

void Backend::swiglu_backward(const Tensor& dout, const Tensor& gate, const Tensor& up,
                              const Tensor& dgate, const Tensor& dup) {
  const OpScope timed(*this, Op::swiglu_backward);
  if (stage_bf16(*this, Op::swiglu_backward, &Backend::swiglu_backward, In{dout}, In{gate}, In{up},
                 Out{dgate}, Out{dup}))
    return;
  OpCheck(Op::swiglu_backward, *this)
      .floating("gate", gate)
      .like("dout", dout, "gate", gate)
      .like("up", up, "gate", gate)
      .like("dgate", dgate, "gate", gate)
      .like("dup", dup, "gate", gate);
  issue(&Backend::do_swiglu_backward, dout, gate, up, dgate, dup);
}

void Backend::gelu_forward(const Tensor& x, const Tensor& out) {
  const OpScope timed(*this, Op::gelu_forward);
  if (stage_bf16(*this, Op::gelu_forward, &Backend::gelu_forward, In{x}, Out{out})) return;
  OpCheck(Op::gelu_forward, *this).floating("x", x).like("out", out, "x", x);
  issue(&Backend::do_gelu_forward, x, out);
}

void Backend::gelu_backward(const Tensor& dout, const Tensor& x, const Tensor& dx) {
  const OpScope timed(*this, Op::gelu_backward);
  if (stage_bf16(*this, Op::gelu_backward, &Backend::gelu_backward, In{dout}, In{x}, Out{dx}))
    return;
  OpCheck(Op::gelu_backward, *this)
      .floating("x", x)
      .like("dout", dout, "x", x)
      .like("dx", dx, "x", x);
  issue(&Backend::do_gelu_backward, dout, x, dx);
}

namespace {

void check_cross_entropy(Backend::Op op, Backend& backend, const Tensor& logits,
                         const Tensor& targets) {
  OpCheck check(op, backend);
  check.floating("logits", logits).rank("logits", logits, 2, "[tokens, vocab]");
  check.tokens("targets", targets)
      .shape("targets", targets, {logits.dim(0)}, from("one per row", "logits", logits));
  check_token_range(backend, op_name(op), "targets", targets, logits.dim(1));
}
}  // namespace

void Backend::cross_entropy_forward(const Tensor& logits, const Tensor& targets,
                                    const Tensor& losses) {
  const OpScope timed(*this, Op::cross_entropy_forward);
  if (stage_bf16(*this, Op::cross_entropy_forward, &Backend::cross_entropy_forward, In{logits},
                 targets, Out{losses}))
    return;
  check_cross_entropy(Op::cross_entropy_forward, *this, logits, targets);
  OpCheck(Op::cross_entropy_forward, *this)
      .stats("losses", losses, "logits", logits)
      .shape("losses", losses, {logits.dim(0)}, from("one per row", "logits", logits));
  issue(&Backend::do_cross_entropy_forward, logits, targets, losses);
}

void Backend::cross_entropy_backward(const Tensor& logits, const Tensor& targets, double dloss,
                                     const Tensor& dlogits) {
  const OpScope timed(*this, Op::cross_entropy_backward);
  if (stage_bf16(*this, Op::cross_entropy_backward, &Backend::cross_entropy_backward, In{logits},
                 targets, dloss, Out{dlogits}))
    return;
  check_cross_entropy(Op::cross_entropy_backward, *this, logits, targets);
  OpCheck(Op::cross_entropy_backward, *this).like("dlogits", dlogits, "logits", logits);
  issue(&Backend::do_cross_entropy_backward, logits, targets, dloss, dlogits);
}

void Backend::adamw_update(const Tensor& param, const Tensor& grad, const Tensor& m,
                           const Tensor& v, const AdamWParams& params) {
  const OpScope timed(*this, Op::adamw_update);
  OpCheck(Op::adamw_update, *this)
      .floating("param", param)
      .like("grad", grad, "param", param)
      .like("m", m, "param", param)
      .like("v", v, "param", param);
  issue(&Backend::do_adamw_update, param, grad, m, v, params.to_scalars());
}

RopeTables make_rope_tables(Backend& backend, std::int64_t seq_len, std::int64_t head_dim,
                            double theta, DType dtype) {
  CAROUSEL_CHECK(head_dim > 0 && head_dim % 2 == 0, "rope: head_dim must be even, got {}",
                 head_dim);
  CAROUSEL_CHECK(theta > 0, "rope: rope_max_timescale must be > 0, got {}", theta);
  const std::int64_t half = head_dim / 2;
  std::vector<double> c(seq_len * half), s(seq_len * half);
  for (std::int64_t p = 0; p < seq_len; ++p) {
    for (std::int64_t j = 0; j < half; ++j) {
      const double angle = double(p) * std::pow(theta, -2.0 * double(j) / double(head_dim));
      c[p * half + j] = std::cos(angle);
      s[p * half + j] = std::sin(angle);
    }
  }
  RopeTables tables;
  if (dtype == DType::F64) {
    tables.cos = backend.from_host(c, {seq_len, half});
    tables.sin = backend.from_host(s, {seq_len, half});
  } else {
    CAROUSEL_CHECK(dtype == DType::F32,
                   "rope tables are float32 or float64 (bfloat16 "
                   "activations rotate by float32 tables), not {}",
                   dtype_name(dtype));
    tables.cos = backend.from_host(std::vector<float>(c.begin(), c.end()), {seq_len, half});
    tables.sin = backend.from_host(std::vector<float>(s.begin(), s.end()), {seq_len, half});
  }
  return tables;
}

double global_l2_norm(Backend& backend, const std::vector<Tensor>& tensors) {
  double total = 0.0;
  for (const Tensor& t : tensors) total += backend.sum_squares(t);
  return std::sqrt(total);
}

}  // namespace carousel
