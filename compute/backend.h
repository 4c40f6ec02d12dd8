// backend.h — the one interface between model code and a compute device.
//
// A Backend owns one logical device (its allocator, and on GPUs its streams and handles) and
// runs every operation the Llama model needs, forward and backward. Model code is written once
// against this interface; CpuBackend (OpenBLAS + OpenMP) is always built and is the numerical
// oracle, CudaBackend (cuBLAS + kernels) runs the same ops on an NVIDIA GPU.
//
// Each public op validates its arguments here, once for all backends (shapes, dtypes, device),
// and throws carousel::Error naming the op, the argument and both shapes; then it calls the
// backend's do_* implementation, which may assume valid input. bfloat16 arguments are staged
// through float32 unless the backend has a native kernel for the op (has_native_bf16).
//
// Conventions (llm.c's, made explicit):
//   * "as a matrix" = [rows, cols] with cols = last dimension, rows = product of the others;
//   * parameter gradients ACCUMULATE (+=): gemm with beta = 1, embedding/rmsnorm dweight;
//   * input gradients OVERWRITE (dx =): callers add residual gradients explicitly;
//   * every floating argument of one op has the same dtype, with two exceptions beside
//     bfloat16 activations: statistics (rstd, lse, losses, RoPE tables) are float32, and so
//     may be an accumulated parameter gradient (rmsnorm_backward's dweight, embedding_backward's
//     dtable: bfloat16 runs keep every parameter gradient in float32); token ids are int32;
//   * reductions that return to the host (sum, sum_squares) use a fixed order, so a result is
//     bitwise reproducible for the same input on the same backend.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "compute/elementwise.h"
#include "compute/float8/float8.h"
#include "compute/memory.h"
#include "compute/recording/op_timing.h"
#include "compute/recording/step_graph.h"
#include "compute/tensor.h"

namespace carousel {

using AdamWScalars = math::AdamWScalars;

// Scalars of one AdamW step; to_scalars() folds the step count into the bias corrections.
struct AdamWParams {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;  // 0 for parameters that are not decayed (norm gains)
  double grad_scale = 1.0;    // multiplies the gradient (global-norm clipping)
  long step = 1;              // 1-based step number, for bias correction
  AdamWScalars to_scalars() const;
};

// Every public op of Backend, once: the Backend::Op enum and op_name() are made from this list.
// clang-format off
#define CAROUSEL_BACKEND_OPS(X)                                                                  \
  X(upload) X(download) X(fill) X(copy) X(cast) X(scale) X(axpy) X(add) X(sum) X(sum_squares)   \
  X(gemm) X(gemm_strided_batched) X(embedding_forward) X(embedding_backward) X(rmsnorm_forward) \
  X(rmsnorm_backward) X(rope_forward) X(rope_backward) X(attention_forward)                     \
  X(attention_backward) X(swiglu_forward) X(swiglu_backward) X(gelu_forward) X(gelu_backward)   \
  X(cross_entropy_forward) X(cross_entropy_backward) X(adamw_update)                            \
  X(embedding_part_forward) X(embedding_part_backward) X(cross_entropy_part_forward)          \
  X(cross_entropy_combine) X(cross_entropy_part_backward) X(scale_rows) X(row_dots)          \
  X(grouped_gemm) X(grouped_weight_gemm) X(amax) X(quantize_float8)
// clang-format on

class Backend {
 public:
#define CAROUSEL_OP_ENUM_(name) name,
  enum class Op { CAROUSEL_BACKEND_OPS(CAROUSEL_OP_ENUM_) };
#undef CAROUSEL_OP_ENUM_

  explicit Backend(std::unique_ptr<DeviceAllocator> allocator);
  virtual ~Backend();
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  virtual std::string name() const = 0;  // "cpu (OpenBLAS, 2 threads)"
  virtual void synchronize() {}          // wait for all queued work (GPU)
  DeviceKind kind() const { return allocator_->kind(); }
  DeviceAllocator& allocator() const { return *allocator_; }

  // Whether do_<op> takes bfloat16 tensors itself. false (the default): an op given bf16
  // tensors runs on float32 copies and rounds its bf16 outputs once (bf16 staging, see
  // backend.cpp). A backend that writes a native bf16 kernel returns true for that op and
  // handles DType::BF16 in its do_<op>; nothing else in Backend changes.
  virtual bool has_native_bf16(Op /*op*/) const { return false; }

  // ---- time by op kind (compute/recording/op_timing.h; the profiled steps) -------------------
  // While on, each outermost op's time is added to its kind. stop_op_timing() waits for the
  // queued work, returns the times and turns timing off.
  void start_op_timing();
  OpTimes stop_op_timing();

  // ---- captured steps (compute/recording/step_graph.h) ---------------------------------------
  // Why this backend cannot capture work into a graph ("" when it can).
  virtual std::string graph_blocker() const { return ""; }
  // Ops issued until end_capture() are recorded, not run; end_capture() returns them as a graph
  // to launch() (the first launch runs the captured step). Throws naming what the region did
  // that a replay could not repeat.
  void begin_capture();
  std::unique_ptr<StepGraph> end_capture();
  // After a failure inside or at the end of a capture: ends it if it is still open, discarding
  // what was recorded (nothing of it ran), and clears the device's error state.
  void abort_capture() noexcept;
  bool capturing() const { return capturing_; }

  // ---- memory -------------------------------------------------------------------------------
  Tensor empty(Shape shape, DType dtype = DType::F32);
  Tensor zeros(Shape shape, DType dtype = DType::F32);
  void upload(const void* host, const Tensor& dst);  // dst.nbytes() bytes from host
  void download(const Tensor& src, void* host);      // src.nbytes() bytes to host
  template <class T>
  Tensor from_host(const std::vector<T>& values, Shape shape) {
    Tensor t = empty(std::move(shape), dtype_of<T>());
    CAROUSEL_CHECK(static_cast<std::int64_t>(values.size()) == t.numel(),
                   "from_host: {} values for shape {}", values.size(), shape_str(t.shape()));
    upload(values.data(), t);
    return t;
  }
  template <class T>
  std::vector<T> to_host(const Tensor& t) {
    std::vector<T> out(t.numel());
    CAROUSEL_CHECK(t.dtype() == dtype_of<T>(), "to_host: tensor {} read as {}", t.describe(),
                   dtype_name(dtype_of<T>()));
    download(t, out.data());
    return out;
  }

  // ---- elementwise & BLAS-1 -----------------------------------------------------------------
  void fill(const Tensor& x, double value);         // x = value
  void copy(const Tensor& src, const Tensor& dst);  // dst = src (same shape)
  // dst = src converted to dst's dtype (float32, float64, bfloat16; same shape). To bfloat16:
  // round to nearest even (a float64 rounds to float32 first).
  void cast(const Tensor& src, const Tensor& dst);
  void scale(const Tensor& x, double alpha);                      // x *= alpha
  void axpy(double alpha, const Tensor& x, const Tensor& y);      // y += alpha * x
  void add(const Tensor& a, const Tensor& b, const Tensor& out);  // out = a + b (residual)
  double sum(const Tensor& x);                                    // fixed-order sum
  double sum_squares(const Tensor& x);                            // fixed-order sum of x^2

  // ---- GEMM ---------------------------------------------------------------------------------
  // c[m,n] = alpha * op(a)[m,k] * op(b)[k,n] + beta * c, tensors taken as matrices;
  // op(a) = a^T when trans_a (then a is [k,m]). beta = 1 accumulates (weight gradients).
  // dtypes: a, b and c alike, or a and b bfloat16 with c float32 or bfloat16 (products and sums
  // in float32: mixed precision).
  void gemm(bool trans_a, bool trans_b, double alpha, const Tensor& a, const Tensor& b, double beta,
            const Tensor& c);
  // The same for each index of the leading (batch) dimension: a [batch,.,.], b [batch,.,.],
  // c [batch,m,n], the last two dimensions of each are the matrix.
  void gemm_strided_batched(bool trans_a, bool trans_b, double alpha, const Tensor& a,
                            const Tensor& b, double beta, const Tensor& c);

  // ---- embedding ------------------------------------------------------------------------------
  // out[n,:] = table[tokens[n],:]; table [V,E], tokens int32 [...], out [..., E].
  // A token outside [0, V) is an error naming the token and its position.
  void embedding_forward(const Tensor& table, const Tensor& tokens, const Tensor& out);
  // dtable[tokens[n],:] += dout[n,:] (scatter-add, accumulates; dtable float32 or dout's dtype).
  void embedding_backward(const Tensor& dout, const Tensor& tokens, const Tensor& dtable);

  // ---- RMSNorm: out = x / sqrt(mean(x^2) + eps) * weight over the last dimension ------------
  // x, out [N,E]; weight [E]; rstd [N] saves 1/sqrt(mean(x^2)+eps) for the backward.
  void rmsnorm_forward(const Tensor& x, const Tensor& weight, double eps, const Tensor& out,
                       const Tensor& rstd);
  // dx = (overwrite), dweight += (accumulate; float32 or weight's dtype).
  void rmsnorm_backward(const Tensor& dout, const Tensor& x, const Tensor& weight,
                        const Tensor& rstd, const Tensor& dx, const Tensor& dweight);

  // ---- RoPE (Hugging Face rotate_half) ------------------------------------------------------
  // x, out [B,T,H,D]; cos, sin [T, D/2] from rope_tables() (token t at position t), or
  // [B*T, D/2] (a row per token: packed documents, whose positions restart). out may alias x.
  void rope_forward(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& out);
  void rope_backward(const Tensor& dout, const Tensor& cos, const Tensor& sin, const Tensor& dx);

  // ---- causal grouped-query attention -----------------------------------------------------------
  // q [B,T,H,D], k and v [B,T,Hkv,D] (H % Hkv == 0: query head h uses kv head h / (H/Hkv)),
  // out [B,T,H,D] = softmax(q k^T / sqrt(D), causal) v; lse [B,H,T] saves the row log-sum-exp.
  // k and v may be longer than q, [B,Tk,Hkv,D] with Tk > T: the queries are then the last T
  // positions of the keys' sequence (causal from the bottom right: query i attends keys
  // j <= Tk - T + i), as a context-parallel rank's chunk attends every key before it.
  // doc_start [B,T] int32 (packed documents): query i attends only keys j from doc_start[b][i]
  // (a position in the keys' sequence) on, the tokens of its own document.
  void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                         const Tensor& lse, const Tensor& doc_start = Tensor());
  // dq, dk, dv overwrite. Recomputes the probabilities from q, k and lse (no [T,T] saved).
  void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& out, const Tensor& lse, const Tensor& dq, const Tensor& dk,
                          const Tensor& dv, const Tensor& doc_start = Tensor());

  // ---- activations ----------------------------------------------------------------------------
  // SwiGLU: out = silu(gate) * up; all [N,F].
  void swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& out);
  void swiglu_backward(const Tensor& dout, const Tensor& gate, const Tensor& up,
                       const Tensor& dgate, const Tensor& dup);
  // GELU (tanh approximation).
  void gelu_forward(const Tensor& x, const Tensor& out);
  void gelu_backward(const Tensor& dout, const Tensor& x, const Tensor& dx);

  // ---- softmax cross-entropy --------------------------------------------------------------------
  // losses[n] = logsumexp(logits[n,:]) - logits[n, targets[n]]; logits [N,V], targets int32 [N].
  void cross_entropy_forward(const Tensor& logits, const Tensor& targets, const Tensor& losses);
  // dlogits[n,:] = dloss * (softmax(logits[n,:]) - onehot(targets[n])) (overwrite; dlogits may
  // alias logits, which saves a [N,V] buffer). For the mean
  // over all tokens of a global batch pass dloss = 1 / (number of tokens).
  void cross_entropy_backward(const Tensor& logits, const Tensor& targets, double dloss,
                              const Tensor& dlogits);

  // ---- vocabulary parts (vocabulary-parallel embedding and loss; backend_vocab_parts.cpp) ----
  // A part holds rows [first, first + part rows) of a [vocab, E] table or of the logits'
  // vocabulary; every id must lie in [0, vocab), ids outside the part contribute nothing. The
  // parts of every rank together give the whole op: embedding rows summed over the parts (one
  // part holds each id, the others give zeros), the loss combined from each part's statistics.
  // out[n,:] = table[tokens[n] - first,:] for ids in the part, else 0; table [Vp,E].
  void embedding_part_forward(const Tensor& table, const Tensor& tokens, std::int64_t first,
                              std::int64_t vocab, const Tensor& out);
  // dtable[tokens[n] - first,:] += dout[n,:] for ids in the part.
  void embedding_part_backward(const Tensor& dout, const Tensor& tokens, std::int64_t first,
                               std::int64_t vocab, const Tensor& dtable);
  // Per row of the part's logits [N,Vp]: lse[n] = logsumexp(logits[n,:]), target_logits[n] =
  // logits[n, targets[n] - first] when the target is in the part, else 0.
  void cross_entropy_part_forward(const Tensor& logits, const Tensor& targets, std::int64_t first,
                                  std::int64_t vocab, const Tensor& lse,
                                  const Tensor& target_logits);
  // Every part's statistics [P,N] (part order): lse[n] = logsumexp over the parts,
  // losses[n] = lse[n] - the sum of the target logits (one part holds the target).
  void cross_entropy_combine(const Tensor& lse_parts, const Tensor& target_logit_parts,
                             const Tensor& lse, const Tensor& losses);
  // dlogits[n,j] = dloss * (exp(logits[n,j] - lse[n]) - [targets[n] == first + j]) with the whole
  // vocabulary's lse (overwrite; dlogits may alias logits).
  void cross_entropy_part_backward(const Tensor& logits, const Tensor& targets, std::int64_t first,
                                   std::int64_t vocab, const Tensor& lse, double dloss,
                                   const Tensor& dlogits);

  // ---- mixture of experts (docs/moe.md): the combine's rows, the experts' GEMMs ---------------
  // out[m,:] = scale[m] * x[m,:]; x, out [M,E] (out may alias x), scale [M] in stats dtype.
  void scale_rows(const Tensor& x, const Tensor& scale, const Tensor& out);
  // out[m] = sum over e of a[m,e] * b[m,e], in a fixed order; a, b [M,E], out [M] in stats
  // dtype. With scale_rows, the backward of scale_rows: dx = scale_rows(dout, scale),
  // dscale = row_dots(dout, x).
  void row_dots(const Tensor& a, const Tensor& b, const Tensor& out);
  // An MoE layer's experts on their rows: for each group g (expert) with rows
  // [first[g], first[g + 1]) of a [R,k] and c [R,n],
  //   c[rows] = alpha a[rows] op(b[g]) + beta c[rows],
  // b [G,n,k] with trans_b (op = ^T), else [G,k,n].
  // `first` [G + 1] is on the host (the router's counts are). Dtypes as gemm. One grouped call
  // where the backend has one (cuBLAS on GPUs), else one GEMM per non-empty group.
  void grouped_gemm(bool trans_b, double alpha, const Tensor& a, const Tensor& b,
                    const std::vector<std::int64_t>& first, double beta, const Tensor& c);
  // The experts' weight gradients: for each group g, c[g] = alpha a[rows]^T b[rows] + beta c[g]
  // with a [R,m], b [R,n], c [G,m,n] (an empty group: c[g] = beta c[g]). As grouped_gemm.
  void grouped_weight_gemm(double alpha, const Tensor& a, const Tensor& b,
                           const std::vector<std::int64_t>& first, double beta, const Tensor& c);

  // ---- float8 (compute/float8/float8.h, docs/float8.md; front end: compute/float8/) ----------
  // out[0] = the largest |x| over every element of x (NaN when x holds a NaN, infinity when it
  // holds one, 0 for an empty x); x float32, float64 or bfloat16, out float32 [1] on the device
  // (a GPU reduces it over a group without the host; the caller reads it to make a scale). Exact,
  // so independent of the order and the thread count.
  void amax(const Tensor& x, const Tensor& out);
  // out = decode(encode(float32(x) * scale)) in `format`: x scaled into the format's range and
  // rounded to its grid (nearest even, saturating; float8.h), kept in out's dtype — every float8
  // value is exact in float32 and bfloat16, so a GEMM on `out` with alpha = 1 / (its scales'
  // product) is the float8 GEMM. x and out the same shape, each float32, bfloat16 or float64
  // (x rounded to float32 first); out may alias x. The product x * scale is one float32 multiply
  // on every backend (same bits).
  void quantize_float8(const Tensor& x, Float8Format format, float scale, const Tensor& out);

  // ---- optimizer --------------------------------------------------------------------------------
  // One AdamW step on param with grad, first moment m and second moment v (all same shape).
  void adamw_update(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                    const AdamWParams& params);

 protected:
  // How this backend times an op: the host clock around the call by default (work done when the
  // call returns); a GPU backend records events on its stream.
  virtual std::unique_ptr<OpStopwatch> make_op_stopwatch();
  // A backend that captures natively (CUDA stream capture) overrides both; by default each op's
  // call is recorded with its arguments (RecordedGraph).
  virtual void do_begin_capture();
  virtual std::unique_ptr<StepGraph> do_end_capture();
  virtual void do_abort_capture() noexcept {}

  virtual void do_upload(const void* host, const Tensor& dst) = 0;
  virtual void do_download(const Tensor& src, void* host) = 0;
  virtual void do_fill(const Tensor& x, double value) = 0;
  virtual void do_copy(const Tensor& src, const Tensor& dst) = 0;
  virtual void do_cast(const Tensor& src, const Tensor& dst) = 0;
  virtual void do_scale(const Tensor& x, double alpha) = 0;
  virtual void do_axpy(double alpha, const Tensor& x, const Tensor& y) = 0;
  virtual void do_add(const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  virtual double do_sum(const Tensor& x, bool squares) = 0;
  // Matrix sizes already resolved: op(a) [m,k], op(b) [k,n], c [m,n], `batch` of them.
  struct GemmDims {
    std::int64_t batch, m, n, k;
  };
  virtual void do_gemm(bool trans_a, bool trans_b, const GemmDims& dims, double alpha,
                       const Tensor& a, const Tensor& b, double beta, const Tensor& c) = 0;
  virtual void do_embedding_forward(const Tensor& table, const Tensor& tokens,
                                    const Tensor& out) = 0;
  virtual void do_embedding_backward(const Tensor& dout, const Tensor& tokens,
                                     const Tensor& dtable) = 0;
  virtual void do_rmsnorm_forward(const Tensor& x, const Tensor& weight, double eps,
                                  const Tensor& out, const Tensor& rstd) = 0;
  virtual void do_rmsnorm_backward(const Tensor& dout, const Tensor& x, const Tensor& weight,
                                   const Tensor& rstd, const Tensor& dx, const Tensor& dweight) = 0;
  virtual void do_rope(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& out,
                       bool backward) = 0;
  virtual void do_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& out, const Tensor& lse,
                                    const Tensor& doc_start) = 0;
  virtual void do_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                     const Tensor& v, const Tensor& out, const Tensor& lse,
                                     const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                     const Tensor& doc_start) = 0;
  virtual void do_swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& out) = 0;
  virtual void do_swiglu_backward(const Tensor& dout, const Tensor& gate, const Tensor& up,
                                  const Tensor& dgate, const Tensor& dup) = 0;
  virtual void do_gelu_forward(const Tensor& x, const Tensor& out) = 0;
  virtual void do_gelu_backward(const Tensor& dout, const Tensor& x, const Tensor& dx) = 0;
  virtual void do_cross_entropy_forward(const Tensor& logits, const Tensor& targets,
                                        const Tensor& losses) = 0;
  virtual void do_cross_entropy_backward(const Tensor& logits, const Tensor& targets, double dloss,
                                         const Tensor& dlogits) = 0;
  virtual void do_adamw_update(const Tensor& param, const Tensor& grad, const Tensor& m,
                               const Tensor& v, const AdamWScalars& scalars) = 0;
  virtual void do_embedding_part(const Tensor& table_or_dtable, const Tensor& tokens,
                                 std::int64_t first, const Tensor& out_or_dout,
                                 bool backward) = 0;
  virtual void do_cross_entropy_part_forward(const Tensor& logits, const Tensor& targets,
                                             std::int64_t first, const Tensor& lse,
                                             const Tensor& target_logits) = 0;
  virtual void do_cross_entropy_combine(const Tensor& lse_parts, const Tensor& target_logit_parts,
                                        const Tensor& lse, const Tensor& losses) = 0;
  virtual void do_scale_rows(const Tensor& x, const Tensor& scale, const Tensor& out) = 0;
  virtual void do_row_dots(const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  // Default: do_gemm on each non-empty group's rows (the CPU backend, the GPU's reference tier).
  virtual void do_grouped_gemm(bool trans_b, double alpha, const Tensor& a, const Tensor& b,
                               const std::vector<std::int64_t>& first, double beta,
                               const Tensor& c);
  virtual void do_grouped_weight_gemm(double alpha, const Tensor& a, const Tensor& b,
                                      const std::vector<std::int64_t>& first, double beta,
                                      const Tensor& c);
  virtual void do_cross_entropy_part_backward(const Tensor& logits, const Tensor& targets,
                                              std::int64_t first, const Tensor& lse, double dloss,
                                              const Tensor& dlogits) = 0;
  virtual void do_amax(const Tensor& x, const Tensor& out) = 0;
  virtual void do_quantize_float8(const Tensor& x, Float8Format format, float scale,
                                  const Tensor& out) = 0;

 private:
  class OpScope;
  // Runs `fn(args...)`, or records it while an emulated capture is on (tensors borrowed).
  template <class... P, class... A>
  void issue(void (Backend::*fn)(P...), const A&... args);
  void check_not_capturing(Op op) const;  // host transfers are errors inside a capture
  std::unique_ptr<DeviceAllocator> allocator_;
  std::unique_ptr<RecordedGraph> recording_;  // the emulated capture in progress
  bool capturing_ = false;
  std::unique_ptr<OpStopwatch> stopwatch_;  // set while timing ops
  int op_depth_ = 0;                        // ops in progress on this backend (nesting)
};

// "rmsnorm_forward": the name an op's error messages start with.
const char* op_name(Backend::Op op);

// RoPE cos and sin tables [T, head_dim/2] of `dtype` for positions 0..T-1. Angles are computed
// in double on the host, so every backend rotates by bit-identical values:
// angle(p, j) = p * theta^(-2j/head_dim).
// cos, sin [T, D/2] (position t for token t), or, for packed documents, [B*T, D/2] (each
// token at its position in its document) with doc_start [B, T] int32, the first position of
// each token's document (attention stays inside it).
struct RopeTables {
  Tensor cos, sin;
  Tensor doc_start;  // undefined: one document per sequence
};
RopeTables make_rope_tables(Backend& backend, std::int64_t seq_len, std::int64_t head_dim,
                            double theta, DType dtype = DType::F32);

// sqrt of the sum of squares of all tensors, in the order given (bitwise reproducible).
double global_l2_norm(Backend& backend, const std::vector<Tensor>& tensors);

}  // namespace carousel
