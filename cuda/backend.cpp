// backend.cpp — argument validation shared by every backend, and backend-independent helpers.
//
// Each public Backend op checks shapes, dtypes and devices here and then calls the backend's
// do_* implementation. An invalid call fails with one message naming the op, the argument and
// the shapes involved, before any memory is touched.
#include "cuda/backend.h"

#include <cmath>

namespace carousel {

namespace {

// Collects the checks of one op call; every failure message starts with the op name.
class OpCheck {
 public:
  OpCheck(const char* op, const Backend& backend) : op_(op), backend_(backend) {}

  // Defined, on this backend's device, float32 or float64 (every op computes in these).
  const OpCheck& floating(const char* name, const Tensor& t) const {
    on_device(name, t);
    CAROUSEL_CHECK(
        t.dtype() == DType::F32 || t.dtype() == DType::F64,
        "{}: argument '{}' is {}, but {} runs in float32 or float64{}", op_, name,
        dtype_name(t.dtype()), op_,
        t.dtype() == DType::BF16 ? " (bfloat16 here: parameters and moments stay float32)" : "");
    return *this;
  }
  // Like floating(), bfloat16 allowed too (ops that load bf16 and compute in float32).
  const OpCheck& floating_or_bf16(const char* name, const Tensor& t) const {
    on_device(name, t);
    CAROUSEL_CHECK(is_floating(t.dtype()), "{}: argument '{}' is {}, not a floating dtype", op_,
                   name, dtype_name(t.dtype()));
    return *this;
  }
  const OpCheck& tokens(const char* name, const Tensor& t) const {
    on_device(name, t);
    CAROUSEL_CHECK(t.dtype() == DType::I32, "{}: argument '{}' must be int32 token ids, got {}",
                   op_, name, t.describe());
    return *this;
  }
  void on_device(const char* name, const Tensor& t) const {
    CAROUSEL_CHECK(t.defined(), "{}: argument '{}' is an undefined tensor", op_, name);
    CAROUSEL_CHECK(&t.device() == &backend_.allocator(),
                   "{}: argument '{}' lives on {} but this backend runs on {}", op_, name,
                   t.device().name(), backend_.allocator().name());
  }
  // `t` has the same dtype as `ref` (which was checked already).
  const OpCheck& same_dtype(const char* name, const Tensor& t, const char* ref_name,
                            const Tensor& ref) const {
    on_device(name, t);
    CAROUSEL_CHECK(t.dtype() == ref.dtype(), "{}: argument '{}' is {} but must be {} like '{}'",
                   op_, name, dtype_name(t.dtype()), dtype_name(ref.dtype()), ref_name);
    return *this;
  }
  // `t` has the same shape and dtype as `ref`.
  const OpCheck& like(const char* name, const Tensor& t, const char* ref_name,
                      const Tensor& ref) const {
    same_dtype(name, t, ref_name, ref);
    CAROUSEL_CHECK(t.shape() == ref.shape(),
                   "{}: argument '{}' has shape {} but must match '{}' {}", op_, name,
                   shape_str(t.shape()), ref_name, shape_str(ref.shape()));
    return *this;
  }
  // `t` has exactly `expected`; `why` says where the expectation comes from.
  const OpCheck& shape(const char* name, const Tensor& t, const Shape& expected,
                       const std::string& why) const {
    CAROUSEL_CHECK(t.shape() == expected, "{}: argument '{}' has shape {} but must be {} ({})", op_,
                   name, shape_str(t.shape()), shape_str(expected), why);
    return *this;
  }
  const OpCheck& rank(const char* name, const Tensor& t, int rank, const char* layout) const {
    CAROUSEL_CHECK(t.rank() == rank, "{}: argument '{}' has shape {} but must have rank {} ({})",
                   op_, name, shape_str(t.shape()), rank, layout);
    return *this;
  }
  const OpCheck& that(bool ok, const std::string& message) const {
    CAROUSEL_CHECK(ok, "{}: {}", op_, message);
    return *this;
  }

 private:
  const char* op_;
  const Backend& backend_;
};

// Ids index tables: every id must be in [0, vocab) before any backend reads with it. Checked
// on the host (a copy of the ids), once for all backends.
void check_token_range(Backend& be, const char* op, const char* arg, const Tensor& tokens,
                       std::int64_t vocab) {
  const auto ids = be.to_host<std::int32_t>(tokens);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    CAROUSEL_CHECK(ids[i] >= 0 && ids[i] < vocab,
                   "{}: {} {} at position {} of '{}' {} is outside the vocabulary [0, {})", op,
                   std::string_view(arg) == "targets" ? "target" : "token", ids[i], i, arg,
                   shape_str(tokens.shape()), vocab);
  }
}

// a, b, c alike (float32 or float64), or a, b bfloat16 with c float32 or bfloat16.
void check_gemm_dtypes(const OpCheck& check, const Tensor& a, const Tensor& b, const Tensor& c) {
  check.floating_or_bf16("a", a).same_dtype("b", b, "a", a);
  if (a.dtype() == DType::BF16) {
    check.floating_or_bf16("c", c).that(
        c.dtype() == DType::BF16 || c.dtype() == DType::F32,
        fmt::format("bfloat16 inputs accumulate into float32 or bfloat16, not {} ('c' {})",
                    dtype_name(c.dtype()), c.describe()));
  } else {
    check.same_dtype("c", c, "a", a);
  }
}

// Float32 stand-ins for the bfloat16 arguments of one op call. Ops without a bfloat16 kernel
// run in float32 on widened copies (exact: every bf16 value is a float32), then finish() rounds
// each bf16 output once. That is what a bf16 kernel computing in float32 registers does, so
// the CPU backend (the oracle) and the CUDA backend agree, and native kernels can replace this
// op by op. A tensor passed twice (in place) gets one stand-in.
class Float32Staging {
 public:
  Float32Staging(Backend& be, std::initializer_list<Tensor> outputs) : be_(be), outputs_(outputs) {}
  Tensor operator()(const Tensor& t) {
    if (t.dtype() != DType::BF16) return t;
    for (const auto& [original, wide] : staged_) {
      if (original.raw() == t.raw() && original.numel() == t.numel()) return wide;
    }
    Tensor wide = be_.empty(t.shape(), DType::F32);
    be_.cast(t, wide);
    staged_.push_back({t, wide});
    return wide;
  }
  void finish() {
    for (const Tensor& out : outputs_) {
      if (out.dtype() == DType::BF16) be_.cast((*this)(out), out);
    }
  }

 private:
  Backend& be_;
  std::vector<Tensor> outputs_;
  std::vector<std::pair<Tensor, Tensor>> staged_;  // (bf16 argument, float32 stand-in)
};

bool any_bf16(std::initializer_list<Tensor> tensors) {
  for (const Tensor& t : tensors) {
    if (t.defined() && t.dtype() == DType::BF16) return true;
  }
  return false;
}

// "the last dimension of x [3,64]"
std::string from(const char* what, const char* name, const Tensor& t) {
  return fmt::format("{} of '{}' {}", what, name, shape_str(t.shape()));
}

}  // namespace

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
Backend::~Backend() = default;

Tensor Backend::empty(Shape shape, DType dtype) {
  return Tensor::empty(*allocator_, std::move(shape), dtype);
}

Tensor Backend::zeros(Shape shape, DType dtype) {
  Tensor t = empty(std::move(shape), dtype);
  if (dtype == DType::I32) {
    std::vector<std::int32_t> z(t.numel(), 0);
    upload(z.data(), t);
  } else {
    fill(t, 0.0);
  }
  return t;
}

void Backend::upload(const void* host, const Tensor& dst) {
  OpCheck("upload", *this).on_device("dst", dst);
  do_upload(host, dst);
}

void Backend::download(const Tensor& src, void* host) {
  OpCheck("download", *this).on_device("src", src);
  do_download(src, host);
}

void Backend::fill(const Tensor& x, double value) {
  OpCheck("fill", *this).floating_or_bf16("x", x);
  do_fill(x, value);
}

void Backend::copy(const Tensor& src, const Tensor& dst) {
  OpCheck c("copy", *this);
  c.on_device("src", src);
  c.on_device("dst", dst);
  c.that(src.dtype() == dst.dtype() && src.shape() == dst.shape(),
         fmt::format("'src' {} and 'dst' {} must have the same dtype and shape", src.describe(),
                     dst.describe()));
  do_copy(src, dst);
}

void Backend::cast(const Tensor& src, const Tensor& dst) {
  OpCheck c("cast", *this);
  c.floating_or_bf16("src", src).floating_or_bf16("dst", dst);
  c.shape("dst", dst, src.shape(), "the shape of 'src'");
  do_cast(src, dst);
}

void Backend::scale(const Tensor& x, double alpha) {
  if (any_bf16({x})) {
    Float32Staging f(*this, {x});
    scale(f(x), alpha);
    return f.finish();
  }
  OpCheck("scale", *this).floating("x", x);
  do_scale(x, alpha);
}

void Backend::axpy(double alpha, const Tensor& x, const Tensor& y) {
  if (any_bf16({x, y})) {
    Float32Staging f(*this, {y});
    axpy(alpha, f(x), f(y));
    return f.finish();
  }
  OpCheck("axpy", *this).floating("x", x).like("y", y, "x", x);
  do_axpy(alpha, x, y);
}

void Backend::add(const Tensor& a, const Tensor& b, const Tensor& out) {
  if (any_bf16({a, b, out})) {
    Float32Staging f(*this, {out});
    add(f(a), f(b), f(out));
    return f.finish();
  }
  OpCheck("add", *this).floating("a", a).like("b", b, "a", a).like("out", out, "a", a);
  do_add(a, b, out);
}

double Backend::sum(const Tensor& x) {
  if (any_bf16({x})) {
    Float32Staging f(*this, {});
    return sum(f(x));
  }
  OpCheck("sum", *this).floating("x", x);
  return do_sum(x, false);
}

double Backend::sum_squares(const Tensor& x) {
  if (any_bf16({x})) {
    Float32Staging f(*this, {});
    return sum_squares(f(x));
  }
  OpCheck("sum_squares", *this).floating("x", x);
  return do_sum(x, true);
}

void Backend::gemm(bool trans_a, bool trans_b, double alpha, const Tensor& a, const Tensor& b,
                   double beta, const Tensor& c) {
  OpCheck check("gemm", *this);
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
  do_gemm(trans_a, trans_b, GemmDims{1, m, n, k}, alpha, a, b, beta, c);
}

void Backend::gemm_strided_batched(bool trans_a, bool trans_b, double alpha, const Tensor& a,
                                   const Tensor& b, double beta, const Tensor& c) {
  OpCheck check("gemm_strided_batched", *this);
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
  do_gemm(trans_a, trans_b, GemmDims{batch, m, n, k}, alpha, a, b, beta, c);
}

void Backend::embedding_forward(const Tensor& table, const Tensor& tokens, const Tensor& out) {
  if (any_bf16({table, out})) {
    Float32Staging f(*this, {out});
    embedding_forward(f(table), tokens, f(out));
    return f.finish();
  }
  OpCheck check("embedding_forward", *this);
  check.floating("table", table).rank("table", table, 2, "[vocab, embed]").tokens("tokens", tokens);
  Shape expected = tokens.shape();
  expected.push_back(table.dim(1));
  check.same_dtype("out", out, "table", table)
      .shape("out", out, expected, "tokens shape + embed dim of 'table'");
  check_token_range(*this, "embedding_forward", "tokens", tokens, table.dim(0));
  do_embedding_forward(table, tokens, out);
}

void Backend::embedding_backward(const Tensor& dout, const Tensor& tokens, const Tensor& dtable) {
  if (any_bf16({dout, dtable})) {
    Float32Staging f(*this, {dtable});
    embedding_backward(f(dout), tokens, f(dtable));
    return f.finish();
  }
  OpCheck check("embedding_backward", *this);
  check.floating("dtable", dtable)
      .rank("dtable", dtable, 2, "[vocab, embed]")
      .tokens("tokens", tokens);
  Shape expected = tokens.shape();
  expected.push_back(dtable.dim(1));
  check.same_dtype("dout", dout, "dtable", dtable)
      .shape("dout", dout, expected, "tokens shape + embed dim of 'dtable'");
  check_token_range(*this, "embedding_backward", "tokens", tokens, dtable.dim(0));
  do_embedding_backward(dout, tokens, dtable);
}

void Backend::rmsnorm_forward(const Tensor& x, const Tensor& weight, double eps, const Tensor& out,
                              const Tensor& rstd) {
  if (any_bf16({x, weight, out, rstd})) {
    Float32Staging f(*this, {out, rstd});
    rmsnorm_forward(f(x), f(weight), eps, f(out), f(rstd));
    return f.finish();
  }
  OpCheck check("rmsnorm_forward", *this);
  check.floating("x", x).same_dtype("weight", weight, "x", x);
  check.shape("weight", weight, {x.cols()}, from("the last dimension", "x", x));
  check.like("out", out, "x", x).same_dtype("rstd", rstd, "x", x);
  check.shape("rstd", rstd, {x.rows()}, from("one per row", "x", x));
  check.that(eps > 0, fmt::format("eps must be > 0, got {}", eps));
  do_rmsnorm_forward(x, weight, eps, out, rstd);
}

void Backend::rmsnorm_backward(const Tensor& dout, const Tensor& x, const Tensor& weight,
                               const Tensor& rstd, const Tensor& dx, const Tensor& dweight) {
  if (any_bf16({dout, x, weight, rstd, dx, dweight})) {
    Float32Staging f(*this, {dx, dweight});
    rmsnorm_backward(f(dout), f(x), f(weight), f(rstd), f(dx), f(dweight));
    return f.finish();
  }
  OpCheck check("rmsnorm_backward", *this);
  check.floating("x", x).like("dout", dout, "x", x).like("dx", dx, "x", x);
  check.same_dtype("weight", weight, "x", x)
      .shape("weight", weight, {x.cols()}, from("the last dimension", "x", x));
  check.like("dweight", dweight, "weight", weight).same_dtype("rstd", rstd, "x", x);
  check.shape("rstd", rstd, {x.rows()}, from("one per row", "x", x));
  do_rmsnorm_backward(dout, x, weight, rstd, dx, dweight);
}

namespace {
void check_rope(const char* op, const Backend& backend, const Tensor& x, const Tensor& cos,
                const Tensor& sin, const Tensor& out) {
  OpCheck check(op, backend);
  check.floating("x", x).rank("x", x, 4, "[batch, seq, heads, head_dim]");
  check.that(x.dim(3) % 2 == 0,
             fmt::format("head_dim must be even, 'x' has shape {}", shape_str(x.shape())));
  check.same_dtype("cos", cos, "x", x)
      .shape("cos", cos, {x.dim(1), x.dim(3) / 2}, from("[seq, head_dim/2]", "x", x));
  check.like("sin", sin, "cos", cos).like("out", out, "x", x);
}
}  // namespace

void Backend::rope_forward(const Tensor& x, const Tensor& cos, const Tensor& sin,
                           const Tensor& out) {
  if (any_bf16({x, cos, sin, out})) {
    Float32Staging f(*this, {out});
    rope_forward(f(x), f(cos), f(sin), f(out));
    return f.finish();
  }
  check_rope("rope_forward", *this, x, cos, sin, out);
  do_rope(x, cos, sin, out, /*backward=*/false);
}

void Backend::rope_backward(const Tensor& dout, const Tensor& cos, const Tensor& sin,
                            const Tensor& dx) {
  if (any_bf16({dout, cos, sin, dx})) {
    Float32Staging f(*this, {dx});
    rope_backward(f(dout), f(cos), f(sin), f(dx));
    return f.finish();
  }
  check_rope("rope_backward", *this, dout, cos, sin, dx);
  do_rope(dout, cos, sin, dx, /*backward=*/true);
}

namespace {
void check_attention(const char* op, const Backend& backend, const Tensor& q, const Tensor& k,
                     const Tensor& v, const Tensor& out, const Tensor& lse) {
  OpCheck check(op, backend);
  check.floating("q", q).rank("q", q, 4, "[batch, seq, heads, head_dim]");
  check.same_dtype("k", k, "q", q).rank("k", k, 4, "[batch, seq, kv_heads, head_dim]");
  check.that(k.dim(0) == q.dim(0) && k.dim(1) == q.dim(1) && k.dim(3) == q.dim(3),
             fmt::format("'k' {} must have the batch, seq and head_dim of 'q' {}",
                         shape_str(k.shape()), shape_str(q.shape())));
  check.that(k.dim(2) > 0 && q.dim(2) % k.dim(2) == 0,
             fmt::format("query heads ({}, 'q' {}) must be a multiple of kv heads ({}, 'k' {})",
                         q.dim(2), shape_str(q.shape()), k.dim(2), shape_str(k.shape())));
  check.like("v", v, "k", k).like("out", out, "q", q).same_dtype("lse", lse, "q", q);
  check.shape("lse", lse, {q.dim(0), q.dim(2), q.dim(1)}, from("[batch, heads, seq]", "q", q));
}
}  // namespace

void Backend::attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& out, const Tensor& lse) {
  if (any_bf16({q, k, v, out, lse})) {
    Float32Staging f(*this, {out, lse});
    attention_forward(f(q), f(k), f(v), f(out), f(lse));
    return f.finish();
  }
  check_attention("attention_forward", *this, q, k, v, out, lse);
  do_attention_forward(q, k, v, out, lse);
}

void Backend::attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                 const Tensor& v, const Tensor& out, const Tensor& lse,
                                 const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  if (any_bf16({dout, q, k, v, out, lse, dq, dk, dv})) {
    Float32Staging f(*this, {dq, dk, dv});
    attention_backward(f(dout), f(q), f(k), f(v), f(out), f(lse), f(dq), f(dk), f(dv));
    return f.finish();
  }
  check_attention("attention_backward", *this, q, k, v, out, lse);
  OpCheck("attention_backward", *this)
      .like("dout", dout, "q", q)
      .like("dq", dq, "q", q)
      .like("dk", dk, "k", k)
      .like("dv", dv, "v", v);
  do_attention_backward(dout, q, k, v, out, lse, dq, dk, dv);
}

void Backend::swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& out) {
  if (any_bf16({gate, up, out})) {
    Float32Staging f(*this, {out});
    swiglu_forward(f(gate), f(up), f(out));
    return f.finish();
  }
  OpCheck("swiglu_forward", *this)
      .floating("gate", gate)
      .like("up", up, "gate", gate)
      .like("out", out, "gate", gate);
  do_swiglu_forward(gate, up, out);
}

void Backend::swiglu_backward(const Tensor& dout, const Tensor& gate, const Tensor& up,
                              const Tensor& dgate, const Tensor& dup) {
  if (any_bf16({dout, gate, up, dgate, dup})) {
    Float32Staging f(*this, {dgate, dup});
    swiglu_backward(f(dout), f(gate), f(up), f(dgate), f(dup));
    return f.finish();
  }
  OpCheck("swiglu_backward", *this)
      .floating("gate", gate)
      .like("dout", dout, "gate", gate)
      .like("up", up, "gate", gate)
      .like("dgate", dgate, "gate", gate)
      .like("dup", dup, "gate", gate);
  do_swiglu_backward(dout, gate, up, dgate, dup);
}

void Backend::gelu_forward(const Tensor& x, const Tensor& out) {
  if (any_bf16({x, out})) {
    Float32Staging f(*this, {out});
    gelu_forward(f(x), f(out));
    return f.finish();
  }
  OpCheck("gelu_forward", *this).floating("x", x).like("out", out, "x", x);
  do_gelu_forward(x, out);
}

void Backend::gelu_backward(const Tensor& dout, const Tensor& x, const Tensor& dx) {
  if (any_bf16({dout, x, dx})) {
    Float32Staging f(*this, {dx});
    gelu_backward(f(dout), f(x), f(dx));
    return f.finish();
  }
  OpCheck("gelu_backward", *this)
      .floating("x", x)
      .like("dout", dout, "x", x)
      .like("dx", dx, "x", x);
  do_gelu_backward(dout, x, dx);
}

namespace {
void check_cross_entropy(const char* op, Backend& backend, const Tensor& logits,
                         const Tensor& targets) {
  OpCheck check(op, backend);
  check.floating("logits", logits).rank("logits", logits, 2, "[tokens, vocab]");
  check.tokens("targets", targets)
      .shape("targets", targets, {logits.dim(0)}, from("one per row", "logits", logits));
  check_token_range(backend, op, "targets", targets, logits.dim(1));
}
}  // namespace

void Backend::cross_entropy_forward(const Tensor& logits, const Tensor& targets,
                                    const Tensor& losses) {
  if (any_bf16({logits, losses})) {
    Float32Staging f(*this, {losses});
    cross_entropy_forward(f(logits), targets, f(losses));
    return f.finish();
  }
  check_cross_entropy("cross_entropy_forward", *this, logits, targets);
  OpCheck("cross_entropy_forward", *this)
      .same_dtype("losses", losses, "logits", logits)
      .shape("losses", losses, {logits.dim(0)}, from("one per row", "logits", logits));
  do_cross_entropy_forward(logits, targets, losses);
}

void Backend::cross_entropy_backward(const Tensor& logits, const Tensor& targets, double dloss,
                                     const Tensor& dlogits) {
  if (any_bf16({logits, dlogits})) {
    Float32Staging f(*this, {dlogits});
    cross_entropy_backward(f(logits), targets, dloss, f(dlogits));
    return f.finish();
  }
  check_cross_entropy("cross_entropy_backward", *this, logits, targets);
  OpCheck("cross_entropy_backward", *this).like("dlogits", dlogits, "logits", logits);
  do_cross_entropy_backward(logits, targets, dloss, dlogits);
}

void Backend::adamw_update(const Tensor& param, const Tensor& grad, const Tensor& m,
                           const Tensor& v, const AdamWParams& params) {
  OpCheck("adamw_update", *this)
      .floating("param", param)
      .like("grad", grad, "param", param)
      .like("m", m, "param", param)
      .like("v", v, "param", param);
  do_adamw_update(param, grad, m, v, params.to_scalars());
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
