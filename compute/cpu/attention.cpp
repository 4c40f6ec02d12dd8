// attention.cpp — CpuBackend: causal grouped-query attention, forward and backward, blocked
// (flash-style) on kTile x kTile tiles of queries x keys.
//
// Every product is a single-threaded BLAS GEMM on one tile (kTile = 128 rows of queries or keys,
// the head dimension D deep) on strided views of the [B,T,H,D] tensors; tiles above the causal
// diagonal are skipped, the diagonal tile is masked inside its softmax pass, and the only
// per-thread memory is two tiles. Nothing [T,T] is ever materialised.
//
// Forward, one task per (batch, head, query tile): an online softmax over the key tiles in order
// (running row max m and row sum l, rescaling the output rows when m grows); saves
// lse = m + log(l). Backward recomputes P = exp(S - lse) tile by tile, in two passes so that every
// output element is written by one task in a fixed order: (batch, kv head, key tile) tasks sum
// dK and dV over the query heads of the group and the query tiles below the diagonal, then
// (batch, head, query tile) tasks sum dQ over the key tiles. The decomposition depends on the
// shape alone, so results do not depend on the thread count (docs/reliability.md#determinism).
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "compute/cpu/blas.h"
#include "compute/cpu_backend.h"
#include "compute/dispatch.h"

namespace carousel {

namespace {

constexpr std::int64_t kTile = 128;  // queries and keys per tile (a GEMM-sized block)

struct AttnDims {
  std::int64_t batch, seq, heads, kv_heads, head_dim;
  std::int64_t group() const { return heads / kv_heads; }
  std::int64_t tiles() const { return (seq + kTile - 1) / kTile; }
  std::int64_t tile_len(std::int64_t t) const { return std::min(kTile, seq - t * kTile); }
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

// exp(x) for x <= 0 (or slightly above), branch-free so the row loops vectorise. float: in
// double after a reduction by ln 2 (degree-10 Taylor on |r| <= ln2/2, error ~1e-12) and rounded
// once, as glibc's expf does, so it equals std::exp to the bit for all but ~0.06 % of inputs
// (an earlier float polynomial with ~1 ulp errors moved a bf16 pipeline test over its 1e-4
// tolerance). Inputs below -87, -inf included, give 1.6e-38 instead of less. double (the
// gradient-check dtype): std::exp.
[[gnu::always_inline]] inline float exp_nonpositive(float xf) {
  // Clamp below at -87 on the bits: for x <= 0 (and +0) the unsigned order of the bits is the
  // order of -x. A float compare would not vectorise (GCC keeps it a branch); this does.
  xf = std::bit_cast<float>(
      std::min(std::bit_cast<std::uint32_t>(xf), std::bit_cast<std::uint32_t>(-87.0f)));
  const double x = xf;
  const double magic = 6755399441055744.0;  // 1.5 * 2^52: t's low bits hold round(x / ln 2)
  const double t = x * 1.4426950408889634 + magic;
  const double n = t - magic;
  const double r = x - n * 0.6931471805599453;
  // Horner, written out: a loop over the coefficients is not always unrolled (then nothing
  // vectorises, as in the AVX2 copy below).
  double p = 1.0 / 3628800;
  p = p * r + 1.0 / 362880;
  p = p * r + 1.0 / 40320;
  p = p * r + 1.0 / 5040;
  p = p * r + 1.0 / 720;
  p = p * r + 1.0 / 120;
  p = p * r + 1.0 / 24;
  p = p * r + 1.0 / 6;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  const std::int64_t ni = std::bit_cast<std::int64_t>(t) - std::bit_cast<std::int64_t>(magic);
  return float(p * std::bit_cast<double>((ni + 1023) << 52));
}
inline double exp_nonpositive(double x) { return std::exp(x); }

// Row helpers with eight fixed partial accumulators (vectorisable, and the same order for any
// thread count).
template <class T>
T row_max(const T* row, std::int64_t n) {
  T acc[8];
  std::fill_n(acc, 8, -std::numeric_limits<T>::infinity());
  std::int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    for (int u = 0; u < 8; ++u) acc[u] = row[j + u] > acc[u] ? row[j + u] : acc[u];
  }
  for (; j < n; ++j) acc[0] = row[j] > acc[0] ? row[j] : acc[0];
  T mx = acc[0];
  for (int u = 1; u < 8; ++u) mx = acc[u] > mx ? acc[u] : mx;
  return mx;
}

// row[j] = exp(row[j] - shift) for j < n, zero for n <= j < len; returns the sum (in double over
// the eight partial sums).
template <class T>
[[gnu::always_inline]] inline double exp_row_body(T* row, std::int64_t n, std::int64_t len,
                                                  T shift) {
  T acc[8] = {};
  std::int64_t j = 0;
  for (; j + 8 <= n; j += 8) {  // exp and sum in one pass over the row
    for (int u = 0; u < 8; ++u) {
      const T e = exp_nonpositive(row[j + u] - shift);
      row[j + u] = e;
      acc[u] += e;
    }
  }
  for (; j < n; ++j) {
    row[j] = exp_nonpositive(row[j] - shift);
    acc[0] += row[j];
  }
  for (j = n; j < len; ++j) row[j] = T(0);
  double sum = 0.0;
  for (int u = 0; u < 8; ++u) sum += double(acc[u]);
  return sum;
}

// P[r, :] = exp(S[r, :] - lse[r]) for the unmasked columns (key k0 + c <= query q0 + r), zero
// beyond; rows of length nk, leading dimension kTile.
template <class T>
[[gnu::always_inline]] inline void recompute_p_body(T* s, std::int64_t nq, std::int64_t nk,
                                                    bool diagonal, const T* lse) {
  for (std::int64_t r = 0; r < nq; ++r) {
    T* row = s + r * kTile;
    const std::int64_t n = diagonal ? std::min(r + 1, nk) : nk;
    const T shift = lse[r];  // a local, so the loop does not reload it through row's alias
    for (std::int64_t c = 0; c < n; ++c) row[c] = exp_nonpositive(row[c] - shift);
    for (std::int64_t c = n; c < nk; ++c) row[c] = T(0);
  }
}

// The exp loops above are most of attention's non-GEMM time at small head dims (D = 32: a tile
// GEMM does 64 FLOPs per exp). The build targets baseline x86-64 (SSE2: two doubles per
// instruction), so float32 gets an AVX2 copy of them (four), chosen once at run time. The
// copy's instructions are the same IEEE operations lane by lane (AVX2 without FMA: GCC contracts
// nothing), so both copies give the same bits and results never depend on the machine's ISA.
#if defined(__x86_64__) && defined(__GNUC__)
[[gnu::target("avx2")]] double exp_row_avx2(float* row, std::int64_t n, std::int64_t len,
                                            float shift) {
  return exp_row_body(row, n, len, shift);
}
[[gnu::target("avx2")]] void recompute_p_avx2(float* s, std::int64_t nq, std::int64_t nk,
                                              bool diagonal, const float* lse) {
  recompute_p_body(s, nq, nk, diagonal, lse);
}
bool has_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}
#endif

template <class T>
double exp_row(T* row, std::int64_t n, std::int64_t len, T shift) {
#if defined(__x86_64__) && defined(__GNUC__)
  if constexpr (std::is_same_v<T, float>) {
    if (has_avx2()) return exp_row_avx2(row, n, len, shift);
  }
#endif
  return exp_row_body(row, n, len, shift);
}

template <class T>
void recompute_p(T* s, std::int64_t nq, std::int64_t nk, bool diagonal, const T* lse) {
#if defined(__x86_64__) && defined(__GNUC__)
  if constexpr (std::is_same_v<T, float>) {
    if (has_avx2()) return recompute_p_avx2(s, nq, nk, diagonal, lse);
  }
#endif
  recompute_p_body(s, nq, nk, diagonal, lse);
}

// dS = P * (dP - D[r]) in place in dp, D[r] = rowsum(dO * O) of query row r.
template <class T>
void ds_from_dp(const T* p, T* dp, std::int64_t nq, std::int64_t nk, const T* drow) {
  for (std::int64_t r = 0; r < nq; ++r) {
    const T* pr = p + r * kTile;
    T* dr = dp + r * kTile;
    const T di = drow[r];
    for (std::int64_t c = 0; c < nk; ++c) dr[c] = pr[c] * (dr[c] - di);
  }
}

}  // namespace

void CpuBackend::do_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                      const Tensor& out, const Tensor& lse) {
  const AttnDims d = dims_of(q, k);
  const std::int64_t ldq = d.heads * d.head_dim, ldk = d.kv_heads * d.head_dim;
  const std::int64_t tiles = d.tiles(), D = d.head_dim;
  Tensor scratch = empty({omp_get_max_threads(), kTile, kTile}, q.dtype());  // S / P per thread
  dispatch(FloatTypes{}, "attention_forward", q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T scale = T(1.0 / std::sqrt(double(D)));
    // Tasks run longest first (query tile tiles-1 has the most key tiles) for balance; which
    // thread runs a task never changes its result.
#pragma omp parallel for schedule(dynamic, 1)
    for (std::int64_t job = 0; job < d.batch * d.heads * tiles; ++job) {
      const std::int64_t qt = tiles - 1 - job / (d.batch * d.heads);
      const std::int64_t bh = job % (d.batch * d.heads), b = bh / d.heads, h = bh % d.heads;
      T* s = scratch.data<T>() + std::int64_t(omp_get_thread_num()) * kTile * kTile;
      const std::int64_t q0 = qt * kTile, nq = d.tile_len(qt);
      const T* qp = q.data<T>() + d.q_offset(b, h) + q0 * ldq;
      T* op = out.data<T>() + d.q_offset(b, h) + q0 * ldq;
      const std::int64_t kv = d.kv_offset(b, h / d.group());
      T m[kTile];
      double l[kTile];
      for (std::int64_t kt = 0; kt <= qt; ++kt) {
        const std::int64_t k0 = kt * kTile, nk = d.tile_len(kt);
        const T* kp = k.data<T>() + kv + k0 * ldk;
        cpu::blas_gemm(false, true, nq, nk, D, scale, qp, ldq, kp, ldk, T(0), s, kTile);
        for (std::int64_t r = 0; r < nq; ++r) {
          T* row = s + r * kTile;
          const std::int64_t n = kt == qt ? std::min(r + 1, nk) : nk;  // causal mask
          const T mx = row_max(row, n);
          if (kt == 0) {
            m[r] = mx;
            l[r] = exp_row(row, n, nk, mx);
          } else {
            const T mnew = std::max(m[r], mx);
            const T alpha = exp_nonpositive(m[r] - mnew);
            l[r] = l[r] * double(alpha) + exp_row(row, n, nk, mnew);
            m[r] = mnew;
            if (alpha != T(1)) {
              for (std::int64_t e = 0; e < D; ++e) op[r * ldq + e] *= alpha;
            }
          }
        }
        cpu::blas_gemm(false, false, nq, D, nk, T(1), s, kTile, v.data<T>() + kv + k0 * ldk, ldk,
                       kt == 0 ? T(0) : T(1), op, ldq);
      }
      T* lp = lse.data<T>() + (b * d.heads + h) * d.seq + q0;
      for (std::int64_t r = 0; r < nq; ++r) {
        const T inv = T(1.0 / l[r]);
        for (std::int64_t e = 0; e < D; ++e) op[r * ldq + e] *= inv;
        lp[r] = T(double(m[r]) + std::log(l[r]));
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
  const std::int64_t ldq = d.heads * d.head_dim, ldk = d.kv_heads * d.head_dim;
  const std::int64_t tiles = d.tiles(), D = d.head_dim;
  Tensor scratch = empty({omp_get_max_threads(), 2, kTile, kTile}, q.dtype());  // P, dP
  Tensor drow = empty({d.batch, d.heads, d.seq}, q.dtype());  // rowsum(dO * O), like lse
  dispatch(FloatTypes{}, "attention_backward", q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T scale = T(1.0 / std::sqrt(double(D)));
    const T* lse_p = lse.data<T>();
    T* drow_p = drow.data<T>();
#pragma omp parallel for schedule(static)
    for (std::int64_t bht = 0; bht < d.batch * d.heads * d.seq; ++bht) {
      const std::int64_t b = bht / (d.heads * d.seq), h = bht / d.seq % d.heads, t = bht % d.seq;
      const T* o = out.data<T>() + d.q_offset(b, h) + t * ldq;
      const T* g = dout.data<T>() + d.q_offset(b, h) + t * ldq;
      double acc = 0.0;
      for (std::int64_t e = 0; e < D; ++e) acc += double(g[e]) * double(o[e]);
      drow_p[bht] = T(acc);
    }
    // P and dS of tile (query tile qt of head h, key tile kt) into the thread's scratch.
    auto tile_ds = [&](std::int64_t b, std::int64_t h, std::int64_t qt, std::int64_t kt, T* p,
                       T* dp) {
      const std::int64_t q0 = qt * kTile, nq = d.tile_len(qt), k0 = kt * kTile, nk = d.tile_len(kt);
      const std::int64_t kv = d.kv_offset(b, h / d.group()) + k0 * ldk;
      const std::int64_t qo = d.q_offset(b, h) + q0 * ldq, row = (b * d.heads + h) * d.seq + q0;
      cpu::blas_gemm(false, true, nq, nk, D, scale, q.data<T>() + qo, ldq, k.data<T>() + kv, ldk,
                     T(0), p, kTile);
      recompute_p(p, nq, nk, qt == kt, lse_p + row);
      cpu::blas_gemm(false, true, nq, nk, D, T(1), dout.data<T>() + qo, ldq, v.data<T>() + kv, ldk,
                     T(0), dp, kTile);
      ds_from_dp(p, dp, nq, nk, drow_p + row);
    };
    // dK, dV of key tile kt of (batch b, kv head kvh), summed over the group's heads and the
    // query tiles qt >= kt, in the thread's scratch; with_dq also adds each tile's share of dQ
    // (the one-pass path below).
    auto key_tile = [&](std::int64_t b, std::int64_t kvh, std::int64_t kt, bool with_dq) {
      T* p = scratch.data<T>() + std::int64_t(omp_get_thread_num()) * 2 * kTile * kTile;
      T* dp = p + kTile * kTile;
      const std::int64_t kv = d.kv_offset(b, kvh) + kt * kTile * ldk, nk = d.tile_len(kt);
      T* dkp = dk.data<T>() + kv;
      T* dvp = dv.data<T>() + kv;
      bool first = true;
      for (std::int64_t h = kvh * d.group(); h < (kvh + 1) * d.group(); ++h) {
        for (std::int64_t qt = kt; qt < tiles; ++qt) {
          const std::int64_t qo = d.q_offset(b, h) + qt * kTile * ldq, nq = d.tile_len(qt);
          tile_ds(b, h, qt, kt, p, dp);
          const T beta = first ? T(0) : T(1);
          cpu::blas_gemm(true, false, nk, D, nq, T(1), p, kTile, dout.data<T>() + qo, ldq, beta,
                         dvp, ldk);
          cpu::blas_gemm(true, false, nk, D, nq, scale, dp, kTile, q.data<T>() + qo, ldq, beta, dkp,
                         ldk);
          if (with_dq) {
            cpu::blas_gemm(false, false, nq, D, nk, scale, dp, kTile, k.data<T>() + kv, ldk,
                           kt == 0 ? T(0) : T(1), dq.data<T>() + qo, ldq);
          }
          first = false;
        }
      }
    };
    // One pass when the (batch, kv head) pairs keep every thread busy: each task owns its
    // pair's dK, dV and the group's dQ, and sums dQ over the key tiles in the same order as
    // pass 2 below with the same tile GEMMs, so both paths give the same bits (tested by
    // Attention.ResultsDoNotDependOnTheThreadCount, which runs both); it saves recomputing S
    // and dP, two of the seven tile GEMMs.
    const std::int64_t pairs = d.batch * d.kv_heads, threads = omp_get_max_threads();
    if (pairs % threads == 0 || pairs >= 4 * threads) {  // pairs are equal work: balanced
#pragma omp parallel for schedule(dynamic, 1)
      for (std::int64_t bk = 0; bk < pairs; ++bk) {
        for (std::int64_t kt = 0; kt < tiles; ++kt) {
          key_tile(bk / d.kv_heads, bk % d.kv_heads, kt, /*with_dq=*/true);
        }
      }
      return;
    }
    // Pass 1: dK, dV of one key tile, summed over the group's heads and query tiles qt >= kt.
#pragma omp parallel for schedule(dynamic, 1)
    for (std::int64_t job = 0; job < pairs * tiles; ++job) {
      const std::int64_t kt = job / pairs, bk = job % pairs;  // longest (kt = 0) first
      key_tile(bk / d.kv_heads, bk % d.kv_heads, kt, /*with_dq=*/false);
    }
    // Pass 2: dQ of one query tile, summed over the key tiles kt <= qt in order.
#pragma omp parallel for schedule(dynamic, 1)
    for (std::int64_t job = 0; job < d.batch * d.heads * tiles; ++job) {
      const std::int64_t qt = tiles - 1 - job / (d.batch * d.heads);
      const std::int64_t bh = job % (d.batch * d.heads), b = bh / d.heads, h = bh % d.heads;
      T* p = scratch.data<T>() + std::int64_t(omp_get_thread_num()) * 2 * kTile * kTile;
      T* dp = p + kTile * kTile;
      const std::int64_t nq = d.tile_len(qt);
      T* dqp = dq.data<T>() + d.q_offset(b, h) + qt * kTile * ldq;
      for (std::int64_t kt = 0; kt <= qt; ++kt) {
        tile_ds(b, h, qt, kt, p, dp);
        cpu::blas_gemm(false, false, nq, D, d.tile_len(kt), scale, dp, kTile,
                       k.data<T>() + d.kv_offset(b, h / d.group()) + kt * kTile * ldk, ldk,
                       kt == 0 ? T(0) : T(1), dqp, ldq);
      }
    }
  });
}

}  // namespace carousel
