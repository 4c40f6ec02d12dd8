// attention.cpp — CpuBackend: causal grouped-query attention, forward and backward.
//
// One (batch, head) pair at a time: scores = q k^T / sqrt(D) as one GEMM on strided views of the
// [B,T,H,D] tensors (leading dimension H*D, so no transposes are materialised), a causal
// softmax saving the row log-sum-exp, then out = P v. The backward recomputes P from q, k and
// the log-sum-exp (nothing [T,T] is kept between forward and backward). It runs the query heads
// that share a kv head in order inside one task, so dk and dv accumulate without races.
#include <omp.h>

#include <cmath>

#include "compute/cpu/blas.h"
#include "compute/cpu_backend.h"
#include "compute/dispatch.h"

namespace carousel {

namespace {

struct AttnDims {
  std::int64_t batch, seq, heads, kv_heads, head_dim;
  std::int64_t group() const { return heads / kv_heads; }
  // Offsets of the [T,D] matrix of (b, h) inside q/out and of (b, kvh) inside k/v.
  std::int64_t q_offset(std::int64_t b, std::int64_t h) const {
    return b * seq * heads * head_dim + h * head_dim;
  }
  std::int64_t kv_offset(std::int64_t b, std::int64_t kvh) const {
    return b * seq * kv_heads * head_dim + kvh * head_dim;
  }
};

AttnDims dims_of(const Tensor& q, const Tensor& k) {
  return {q.dim(0), q.dim(1), q.dim(2), k.dim(2), q.dim(3)};
}

// Forward: turns the scores S (already scaled) into probabilities P in place, causal (zero above
// the diagonal), and writes each row's log-sum-exp to lse. One exp per element.
template <class T>
void causal_softmax_forward(T* s, std::int64_t seq, T* lse) {
  for (std::int64_t i = 0; i < seq; ++i) {
    T* row = s + i * seq;
    T mx = row[0];
    for (std::int64_t j = 1; j <= i; ++j) mx = std::max(mx, row[j]);
    double sum = 0.0;
    for (std::int64_t j = 0; j <= i; ++j) {
      row[j] = std::exp(row[j] - mx);
      sum += double(row[j]);
    }
    const T inv = T(1.0 / sum);
    for (std::int64_t j = 0; j <= i; ++j) row[j] *= inv;
    for (std::int64_t j = i + 1; j < seq; ++j) row[j] = T(0);
    lse[i] = T(double(mx) + std::log(sum));
  }
}

// Backward: recomputes P[i,j] = exp(S[i,j] - lse[i]) from the saved log-sum-exp, in place.
template <class T>
void causal_softmax_recompute(T* s, std::int64_t seq, const T* lse) {
  for (std::int64_t i = 0; i < seq; ++i) {
    T* row = s + i * seq;
    for (std::int64_t j = 0; j <= i; ++j) row[j] = std::exp(row[j] - lse[i]);
    for (std::int64_t j = i + 1; j < seq; ++j) row[j] = T(0);
  }
}

}  // namespace

void CpuBackend::do_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                      const Tensor& out, const Tensor& lse) {
  const AttnDims d = dims_of(q, k);
  const std::int64_t T_ = d.seq, ldq = d.heads * d.head_dim, ldk = d.kv_heads * d.head_dim;
  const int threads = omp_get_max_threads();
  Tensor scratch = empty({threads, T_, T_}, q.dtype());  // one [T,T] score matrix per thread
  dispatch(FloatTypes{}, "attention_forward", q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T scale = T(1.0 / std::sqrt(double(d.head_dim)));
#pragma omp parallel for collapse(2) schedule(static)
    for (std::int64_t b = 0; b < d.batch; ++b) {
      for (std::int64_t h = 0; h < d.heads; ++h) {
        T* s = scratch.data<T>() + std::int64_t(omp_get_thread_num()) * T_ * T_;
        const T* qp = q.data<T>() + d.q_offset(b, h);
        const std::int64_t kv = d.kv_offset(b, h / d.group());
        cpu::blas_gemm(false, true, T_, T_, d.head_dim, scale, qp, ldq, k.data<T>() + kv, ldk, T(0),
                       s, T_);
        causal_softmax_forward<T>(s, T_, lse.data<T>() + (b * d.heads + h) * T_);
        cpu::blas_gemm(false, false, T_, d.head_dim, T_, T(1), s, T_, v.data<T>() + kv, ldk, T(0),
                       out.data<T>() + d.q_offset(b, h), ldq);
      }
    }
  });
}

// With P = softmax(S), S = scale q k^T, O = P v:
//   dv += P^T dO;  dP = dO v^T;  dS = P (dP - rowsum(dO * O));  dq = scale dS k;  dk += scale dS^T
//   q
void CpuBackend::do_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                       const Tensor& v, const Tensor& out, const Tensor& lse,
                                       const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  const AttnDims d = dims_of(q, k);
  const std::int64_t T_ = d.seq, ldq = d.heads * d.head_dim, ldk = d.kv_heads * d.head_dim;
  const int threads = omp_get_max_threads();
  Tensor scratch = empty({threads, 2, T_, T_}, q.dtype());  // P and dP per thread
  dispatch(FloatTypes{}, "attention_backward", q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T scale = T(1.0 / std::sqrt(double(d.head_dim)));
#pragma omp parallel for collapse(2) schedule(static)
    for (std::int64_t b = 0; b < d.batch; ++b) {
      for (std::int64_t kvh = 0; kvh < d.kv_heads; ++kvh) {
        T* p = scratch.data<T>() + std::int64_t(omp_get_thread_num()) * 2 * T_ * T_;
        T* dp = p + T_ * T_;
        const std::int64_t kv = d.kv_offset(b, kvh);
        const T* kp = k.data<T>() + kv;
        const T* vp = v.data<T>() + kv;
        T* dkp = dk.data<T>() + kv;
        T* dvp = dv.data<T>() + kv;
        for (std::int64_t t = 0; t < T_; ++t) {
          for (std::int64_t e = 0; e < d.head_dim; ++e) dkp[t * ldk + e] = dvp[t * ldk + e] = T(0);
        }
        for (std::int64_t h = kvh * d.group(); h < (kvh + 1) * d.group(); ++h) {
          const T* qp = q.data<T>() + d.q_offset(b, h);
          const T* op = out.data<T>() + d.q_offset(b, h);
          const T* dop = dout.data<T>() + d.q_offset(b, h);
          cpu::blas_gemm(false, true, T_, T_, d.head_dim, scale, qp, ldq, kp, ldk, T(0), p, T_);
          causal_softmax_recompute<T>(p, T_, lse.data<T>() + (b * d.heads + h) * T_);
          cpu::blas_gemm(true, false, T_, d.head_dim, T_, T(1), p, T_, dop, ldq, T(1), dvp, ldk);
          cpu::blas_gemm(false, true, T_, T_, d.head_dim, T(1), dop, ldq, vp, ldk, T(0), dp, T_);
          for (std::int64_t i = 0; i < T_; ++i) {
            double di = 0.0;
            for (std::int64_t e = 0; e < d.head_dim; ++e) {
              di += double(dop[i * ldq + e]) * double(op[i * ldq + e]);
            }
            for (std::int64_t j = 0; j < T_; ++j) {
              dp[i * T_ + j] = p[i * T_ + j] * (dp[i * T_ + j] - T(di));  // dS
            }
          }
          cpu::blas_gemm(false, false, T_, d.head_dim, T_, scale, dp, T_, kp, ldk, T(0),
                         dq.data<T>() + d.q_offset(b, h), ldq);
          cpu::blas_gemm(true, false, T_, d.head_dim, T_, scale, dp, T_, qp, ldq, T(1), dkp, ldk);
        }
      }
    }
  });
}

}  // namespace carousel
