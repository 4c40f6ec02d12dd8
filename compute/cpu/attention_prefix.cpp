// attention_prefix.cpp — attention of Tq queries against Tk > Tq keys, causal from the bottom
// right: query i sits at position Tk - Tq + i and attends keys j <= Tk - Tq + i (a context
// parallel rank's chunk of queries against every key before and inside it); with packed
// documents only from each query's document start on.
//
// Plain GEMMs on whole [Tq, Tk] score blocks of one (batch, head): the chunks are a fraction of
// the sequence, so the block fits in memory (scratch: two [Tq, Tk] blocks per thread, passed in
// by the caller, which owns allocation). Forward: one task per (batch, head). Backward: one
// task per (batch, kv head), which owns that pair's dK and dV and its group's dQ and sums the
// group's heads in order — the decomposition depends on the shape alone, so the results do not
// depend on the thread count.
#include "compute/cpu/attention_prefix.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "compute/cpu/blas.h"
#include "compute/dispatch.h"

namespace carousel::cpu {

namespace {

struct PrefixDims {
  std::int64_t batch, tq, tk, heads, kv_heads, head_dim;
  std::int64_t offset() const { return tk - tq; }
  std::int64_t keys_of(std::int64_t i) const { return std::min(tk, offset() + i + 1); }
  std::int64_t ldq() const { return heads * head_dim; }
  std::int64_t ldk() const { return kv_heads * head_dim; }
  std::int64_t q_at(std::int64_t b, std::int64_t h) const { return b * tq * ldq() + h * head_dim; }
  std::int64_t k_at(std::int64_t b, std::int64_t kvh) const {
    return b * tk * ldk() + kvh * head_dim;
  }
};

PrefixDims dims_of(const Tensor& q, const Tensor& k) {
  return {q.dim(0), q.dim(1), k.dim(1), q.dim(2), k.dim(2), q.dim(3)};
}

// The first keys of sequence b's queries (packed documents), or null.
const std::int32_t* starts_of(const Tensor& doc_start, std::int64_t b, std::int64_t tq) {
  return doc_start.defined() ? doc_start.data<std::int32_t>() + b * tq : nullptr;
}

// s [Tq, Tk] = scale q k^T of one (batch, head), then P = exp(s - lse_i) with the masked keys
// zero (after the query, and before its document's first key `first[i]` when packed); lse
// given, or computed (and written) when `make_lse`.
template <class T>
void probabilities(const PrefixDims& d, const T* q, const T* k, T* s, T* lse, bool make_lse,
                   const std::int32_t* first) {
  const T scale = T(1.0 / std::sqrt(double(d.head_dim)));
  blas_gemm(false, true, d.tq, d.tk, d.head_dim, scale, q, d.ldq(), k, d.ldk(), T(0), s, d.tk);
  for (std::int64_t i = 0; i < d.tq; ++i) {
    T* row = s + i * d.tk;
    const std::int64_t n = d.keys_of(i), lo = first ? std::min<std::int64_t>(first[i], n) : 0;
    if (make_lse) {
      T mx = -std::numeric_limits<T>::infinity();
      for (std::int64_t j = lo; j < n; ++j) mx = std::max(mx, row[j]);
      double sum = 0;
      for (std::int64_t j = lo; j < n; ++j) sum += std::exp(double(row[j] - mx));
      lse[i] = T(double(mx) + std::log(sum));
    }
    for (std::int64_t j = lo; j < n; ++j) row[j] = T(std::exp(double(row[j]) - double(lse[i])));
    std::fill(row, row + lo, T(0));
    std::fill(row + n, row + d.tk, T(0));
  }
}

}  // namespace

void attention_prefix_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                              const Tensor& lse, const Tensor& scratch, const Tensor& doc_start) {
  const PrefixDims d = dims_of(q, k);
  dispatch(FloatTypes{}, "attention_forward", q.dtype(), [&](auto tag) {
    using T = decltype(tag);
#pragma omp parallel for schedule(dynamic, 1)
    for (std::int64_t bh = 0; bh < d.batch * d.heads; ++bh) {
      const std::int64_t b = bh / d.heads, h = bh % d.heads,
                         kv = d.k_at(b, h / (d.heads / d.kv_heads));
      T* p = scratch.data<T>() + std::int64_t(omp_get_thread_num()) * 2 * d.tq * d.tk;
      probabilities(d, q.data<T>() + d.q_at(b, h), k.data<T>() + kv, p, lse.data<T>() + bh * d.tq,
                    /*make_lse=*/true, starts_of(doc_start, b, d.tq));
      blas_gemm(false, false, d.tq, d.head_dim, d.tk, T(1), p, d.tk, v.data<T>() + kv, d.ldk(),
                T(0), out.data<T>() + d.q_at(b, h), d.ldq());
    }
  });
}

// With P as above and O = P v: dv = sum_h P^T dO; dP = dO v^T; dS = P (dP - rowsum(dO * O));
// dq = scale dS k; dk = sum_h scale dS^T q.
void attention_prefix_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                               const Tensor& v, const Tensor& out, const Tensor& lse,
                               const Tensor& dq, const Tensor& dk, const Tensor& dv,
                               const Tensor& scratch, const Tensor& doc_start) {
  const PrefixDims d = dims_of(q, k);
  const std::int64_t group = d.heads / d.kv_heads;
  dispatch(FloatTypes{}, "attention_backward", q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T scale = T(1.0 / std::sqrt(double(d.head_dim)));
#pragma omp parallel for schedule(dynamic, 1)
    for (std::int64_t bk = 0; bk < d.batch * d.kv_heads; ++bk) {
      const std::int64_t b = bk / d.kv_heads, kvh = bk % d.kv_heads, kv = d.k_at(b, kvh);
      T* p = scratch.data<T>() + std::int64_t(omp_get_thread_num()) * 2 * d.tq * d.tk;
      T* dp = p + d.tq * d.tk;
      for (std::int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        const std::int64_t qo = d.q_at(b, h);
        T* lse_row = lse.data<T>() + (b * d.heads + h) * d.tq;
        probabilities(d, q.data<T>() + qo, k.data<T>() + kv, p, lse_row, /*make_lse=*/false,
                      starts_of(doc_start, b, d.tq));
        blas_gemm(false, true, d.tq, d.tk, d.head_dim, T(1), dout.data<T>() + qo, d.ldq(),
                  v.data<T>() + kv, d.ldk(), T(0), dp, d.tk);
        for (std::int64_t i = 0; i < d.tq; ++i) {
          const T* o = out.data<T>() + qo + i * d.ldq();
          const T* g = dout.data<T>() + qo + i * d.ldq();
          double di = 0;
          for (std::int64_t e = 0; e < d.head_dim; ++e) di += double(g[e]) * double(o[e]);
          for (std::int64_t j = 0; j < d.tk; ++j)
            dp[i * d.tk + j] = p[i * d.tk + j] * (dp[i * d.tk + j] - T(di));
        }
        const T beta = h == kvh * group ? T(0) : T(1);
        blas_gemm(true, false, d.tk, d.head_dim, d.tq, T(1), p, d.tk, dout.data<T>() + qo, d.ldq(),
                  beta, dv.data<T>() + kv, d.ldk());
        blas_gemm(true, false, d.tk, d.head_dim, d.tq, scale, dp, d.tk, q.data<T>() + qo, d.ldq(),
                  beta, dk.data<T>() + kv, d.ldk());
        blas_gemm(false, false, d.tq, d.head_dim, d.tk, scale, dp, d.tk, k.data<T>() + kv, d.ldk(),
                  T(0), dq.data<T>() + qo, d.ldq());
      }
    }
  });
}

}  // namespace carousel::cpu
