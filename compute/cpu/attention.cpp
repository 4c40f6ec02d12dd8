// attention.cpp — CpuBackend: causal grouped-query attention, forward and backward, blocked
// (flash-style) on kTile x kTile tiles of queries x keys. Queries against a longer key prefix
// (context parallelism's chunks) go to attention_prefix.cpp.
//
// Every product is a single-threaded BLAS GEMM on strided views of the [B,T,H,D] tensors, one
// tile deep in queries or keys (kTile = 128; the forward takes up to kKeyBlock = 512 keys at
// once) and the head dimension D deep. Tiles above the causal diagonal are skipped and the
// diagonal is masked inside the softmax pass. Per-thread memory: one kTile x kKeyBlock score
// block in the forward, two kTile x kTile tiles in the backward (fewer rows when the sequence is
// shorter than kTile); nothing [T,T] is materialised.
//
// Forward, one task per (batch, head, query tile): an online softmax over blocks of up to
// kKeyBlock keys in order (running row max m and row sum l, rescaling the output rows when m
// grows); saves lse = m + log(l). Backward recomputes P = exp(S - lse) tile by tile, in two
// passes so that every output element is written by one task in a fixed order: (batch, kv head,
// key tile) tasks sum dK and dV over the query heads of the group and the query tiles below the
// diagonal, then (batch, head, query tile) tasks sum dQ over the key tiles. The decomposition
// depends on the shape alone, so results do not depend on the thread count
// (docs/reliability.md#determinism). The exp loops: exp_loops.h.
//
// Packed documents (doc_start): each query row's keys before its document's first token are
// left out of its softmax — the forward's row max, exponentials and sum run over the row's own
// document's keys only, and the backward's recomputed P is zero before them — so a document's
// outputs and gradients do not depend on the tokens of the others.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "compute/cpu/attention_prefix.h"
#include "compute/cpu/blas.h"
#include "compute/cpu/exp_loops.h"
#include "compute/cpu_backend.h"
#include "compute/error.h"
#include "compute/dispatch.h"

namespace carousel {

namespace {

constexpr std::int64_t kTile = 128;  // queries and keys per tile (a GEMM-sized block)
// Keys per block of the forward's online softmax: one query tile's scores against up to 512 keys
// are one GEMM (the query tile packed once, K = D is small) and need no rescaling of the output
// within the block. A multiple of kTile, so no block starts inside a query tile.
constexpr std::int64_t kKeyBlock = 4 * kTile;

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
                                      const Tensor& out, const Tensor& lse,
                                      const Tensor& doc_start) {
  if (k.dim(1) != q.dim(1)) {  // queries against a longer key prefix: attention_prefix.cpp
    return cpu::attention_prefix_forward(
        q, k, v, out, lse, empty({omp_get_max_threads(), 2, q.dim(1), k.dim(1)}, q.dtype()),
        doc_start);
  }
  const AttnDims d = dims_of(q, k);
  const std::int64_t ldq = d.heads * d.head_dim, ldk = d.kv_heads * d.head_dim;
  const std::int64_t tiles = d.tiles(), D = d.head_dim;
  // S / P of one query tile against one key block, per thread: [rows, kKeyBlock], rows the
  // longest query tile (a short sequence needs no more).
  const std::int64_t rows = std::min<std::int64_t>(kTile, d.seq);
  Tensor scratch = empty({omp_get_max_threads(), rows, kKeyBlock}, q.dtype());
  dispatch(FloatTypes{}, "attention_forward", q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    // Named here so clang 14 (the fuzz build) captures them: it cannot capture, in a generic
    // lambda, a variable only a nested lambda uses.
    (void)k, (void)v, (void)ldk;
    const T scale = T(1.0 / std::sqrt(double(D)));
    // Tasks run longest first (query tile tiles-1 has the most keys) for balance; which thread
    // runs a task never changes its result.
#pragma omp parallel for schedule(dynamic, 1)
    for (std::int64_t job = 0; job < d.batch * d.heads * tiles; ++job) {
      const std::int64_t qt = tiles - 1 - job / (d.batch * d.heads);
      const std::int64_t bh = job % (d.batch * d.heads), b = bh / d.heads, h = bh % d.heads;
      T* s = scratch.data<T>() + std::int64_t(omp_get_thread_num()) * rows * kKeyBlock;
      const std::int64_t q0 = qt * kTile, nq = d.tile_len(qt);
      const T* qp = q.data<T>() + d.q_offset(b, h) + q0 * ldq;
      T* op = out.data<T>() + d.q_offset(b, h) + q0 * ldq;
      const std::int64_t kv = d.kv_offset(b, h / d.group());
      const std::int32_t* ds = doc_start.defined() ? doc_start.data<std::int32_t>() + b * d.seq + q0
                                                   : nullptr;  // of this tile's rows
      T m[kTile];
      double l[kTile];
      // Scores of rows [r0, r0 + rows) against keys [k0 + c0, k0 + c0 + cols) into columns c0..
      auto scores = [&](std::int64_t r0, std::int64_t rows, std::int64_t k0, std::int64_t c0,
                        std::int64_t cols) {
        cpu::blas_gemm(false, true, rows, cols, D, scale, qp + r0 * ldq, ldq,
                       k.data<T>() + kv + (k0 + c0) * ldk, ldk, T(0), s + r0 * kKeyBlock + c0,
                       kKeyBlock);
      };
      // O rows [r0, r0 + rows) (+)= P columns [c0, c0 + cols) times the values of those keys.
      auto accumulate = [&](std::int64_t r0, std::int64_t rows, std::int64_t k0, std::int64_t c0,
                            std::int64_t cols, bool first) {
        cpu::blas_gemm(false, false, rows, D, cols, T(1), s + r0 * kKeyBlock + c0, kKeyBlock,
                       v.data<T>() + kv + (k0 + c0) * ldk, ldk, first ? T(0) : T(1), op + r0 * ldq,
                       ldq);
      };
      // Rows [r0, r0 + rows) of the block's scores (the first `cols` columns computed) to
      // exponentials, with the online softmax's running max and sum; O rows rescaled when their
      // max grows.
      auto softmax_rows = [&](std::int64_t r0, std::int64_t rows, std::int64_t k0,
                              std::int64_t cols) {
        for (std::int64_t r = r0; r < r0 + rows; ++r) {
          // Unmasked keys of query q0 + r: causal, at least one, since blocks start at
          // multiples of kKeyBlock (a multiple of kTile) below q0 + nq, hence at or below q0;
          // with documents, from the row's document start on (`lo` keys of the block before it,
          // maybe all of them: the row then skips the block).
          const std::int64_t n = std::min(cols, q0 + r + 1 - k0);
          const std::int64_t lo = ds ? std::clamp<std::int64_t>(ds[r] - k0, 0, n) : 0;
          std::fill(s + r * kKeyBlock, s + r * kKeyBlock + lo, T(0));
          if (lo == n) {
            std::fill(s + r * kKeyBlock + lo, s + r * kKeyBlock + cols, T(0));
            if (k0 == 0) m[r] = -std::numeric_limits<T>::infinity(), l[r] = 0;
            continue;
          }
          T* row = s + r * kKeyBlock + lo;
          const T mx = row_max(row, n - lo);
          if (k0 == 0 || l[r] == 0) {  // the row's first block with keys of its document
            m[r] = mx;
            l[r] = cpu::exp_row(row, n - lo, cols - lo, mx);
          } else {
            const T mnew = std::max(m[r], mx);
            const T alpha = cpu::exp_nonpositive(m[r] - mnew);
            l[r] = l[r] * double(alpha) + cpu::exp_row(row, n - lo, cols - lo, mnew);
            m[r] = mnew;
            if (alpha != T(1)) {
              for (std::int64_t e = 0; e < D; ++e) op[r * ldq + e] *= alpha;
            }
          }
        }
      };
      // Keys 0 .. q0 + nq - 1 (causal), in blocks of kKeyBlock: an online softmax across blocks.
      for (std::int64_t k0 = 0; k0 < q0 + nq; k0 += kKeyBlock) {
        const std::int64_t nk = std::min(kKeyBlock, q0 + nq - k0);
        if (k0 + nk < q0 + nq) {  // below the diagonal: one GEMM each way, all rows
          scores(0, nq, k0, 0, nk);
          softmax_rows(0, nq, k0, nk);
          accumulate(0, nq, k0, 0, nk, k0 == 0);
          continue;
        }
        // The block that ends with the diagonal tile. Its keys before the tile (`before`, a
        // multiple of kTile, maybe 0) go in one GEMM for all rows each way; the tile's rows go
        // in four groups of 32, each against the tile's keys up to its own last row (a quarter
        // of the tile's masked half is multiplied instead of all of it: at T = 512, 15 % less
        // GEMM work than whole tiles), with the keys before the tile packed once, not per group.
        const std::int64_t before = q0 - k0, group = kTile / 4;
        if (before > 0) scores(0, nq, k0, 0, before);
        for (std::int64_t r0 = 0; r0 < nq; r0 += group) {
          const std::int64_t rows = std::min(group, nq - r0);
          scores(r0, rows, k0, before, r0 + rows);
          softmax_rows(r0, rows, k0, before + r0 + rows);
        }
        if (before > 0) accumulate(0, nq, k0, 0, before, k0 == 0);
        for (std::int64_t r0 = 0; r0 < nq; r0 += group) {
          const std::int64_t rows = std::min(group, nq - r0);
          accumulate(r0, rows, k0, before, r0 + rows, k0 == 0 && before == 0);
        }
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
                                       const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                       const Tensor& doc_start) {
  if (k.dim(1) != q.dim(1)) {
    return cpu::attention_prefix_backward(
        dout, q, k, v, out, lse, dq, dk, dv,
        empty({omp_get_max_threads(), 2, q.dim(1), k.dim(1)}, q.dtype()), doc_start);
  }
  const AttnDims d = dims_of(q, k);
  const std::int64_t ldq = d.heads * d.head_dim, ldk = d.kv_heads * d.head_dim;
  const std::int64_t tiles = d.tiles(), D = d.head_dim;
  const std::int64_t rows = std::min<std::int64_t>(kTile, d.seq);  // the longest query tile
  Tensor scratch = empty({omp_get_max_threads(), 2, rows, kTile}, q.dtype());  // P, dP
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
      cpu::recompute_p(p, nq, nk, kTile, qt == kt, lse_p + row);
      if (doc_start.defined()) {  // keys before each row's document: P = 0
        const std::int32_t* ds = doc_start.data<std::int32_t>() + b * d.seq + q0;
        for (std::int64_t r = 0; r < nq; ++r) {
          std::fill(p + r * kTile, p + r * kTile + std::clamp<std::int64_t>(ds[r] - k0, 0, nk),
                    T(0));
        }
      }
      cpu::blas_gemm(false, true, nq, nk, D, T(1), dout.data<T>() + qo, ldq, v.data<T>() + kv, ldk,
                     T(0), dp, kTile);
      ds_from_dp(p, dp, nq, nk, drow_p + row);
    };
    // dK, dV of key tile kt of (batch b, kv head kvh), summed over the group's heads and the
    // query tiles qt >= kt, in the thread's scratch; with_dq also adds each tile's share of dQ
    // (the one-pass path below).
    auto key_tile = [&](std::int64_t b, std::int64_t kvh, std::int64_t kt, bool with_dq) {
      T* p = scratch.data<T>() + std::int64_t(omp_get_thread_num()) * 2 * rows * kTile;
      T* dp = p + rows * kTile;
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
      T* p = scratch.data<T>() + std::int64_t(omp_get_thread_num()) * 2 * rows * kTile;
      T* dp = p + rows * kTile;
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
