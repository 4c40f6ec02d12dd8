// reference_kernels.cuh — the reference tier of CUDA kernels (gpu_kernels=reference), simple
// enough to check by eye: one thread per element, row or query. They are the fast tier's oracle on
// the GPU (tests/compute/test_cuda_backend.cpp) and run float64. Elementwise kernels call the same
// carousel::math functions as the CPU loops; reductions are written so every output element is
// produced by one thread (or one block) in a fixed order: results are deterministic.
#pragma once

#include <cstdint>

#include "compute/bfloat16.h"
#include "compute/elementwise.h"

namespace carousel::gpu {

constexpr int kThreads = 256;
inline int blocks_for(std::int64_t n) { return int((n + kThreads - 1) / kThreads); }

template <class T>
__global__ void fill_kernel(T* x, std::int64_t n, T value) {
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = value;
}

// dst[i] = src[i] converted (bfloat16 rounding shared with the CPU backend: compute/bfloat16.h).
template <class From, class To>
__global__ void cast_kernel(const From* src, To* dst, std::int64_t n) {
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = math::Convert<To>::from(src[i]);
}

template <class T>
__global__ void scale_kernel(T* x, std::int64_t n, T alpha) {
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= alpha;
}
template <class T>
__global__ void axpy_kernel(const T* x, T* y, std::int64_t n, T alpha) {
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] += alpha * x[i];
}
template <class T>
__global__ void add_kernel(const T* a, const T* b, T* out, std::int64_t n) {
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

// Partial sums over fixed 4096-element blocks (one thread each, in order), summed on the host.
template <class T>
__global__ void block_sum_kernel(const T* x, std::int64_t n, bool squares, double* partial,
                                 std::int64_t blocks) {
  const std::int64_t blk = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (blk >= blocks) return;
  double acc = 0;
  const std::int64_t end = n < (blk + 1) * 4096 ? n : (blk + 1) * 4096;
  for (std::int64_t i = blk * 4096; i < end; ++i) {
    const double v = double(x[i]);
    acc += squares ? v * v : v;
  }
  partial[blk] = acc;
}

template <class T>
__global__ void embedding_forward_kernel(const T* table, const std::int32_t* tokens, T* out,
                                         std::int64_t n, std::int64_t embed) {
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * embed) return;
  const std::int64_t row = i / embed, e = i % embed;
  out[i] = table[std::int64_t(tokens[row]) * embed + e];
}
// One thread per embedding column walks the tokens in order: deterministic scatter-add.
template <class T>
__global__ void embedding_backward_kernel(const T* dout, const std::int32_t* tokens, T* dtable,
                                          std::int64_t n, std::int64_t embed) {
  const std::int64_t e = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= embed) return;
  for (std::int64_t i = 0; i < n; ++i)
    dtable[std::int64_t(tokens[i]) * embed + e] += dout[i * embed + e];
}

// One thread per row.
template <class T>
__global__ void rmsnorm_forward_kernel(const T* x, const T* g, T* out, T* rstd, std::int64_t rows,
                                       std::int64_t cols, double eps) {
  const std::int64_t r = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const T* xi = x + r * cols;
  double ss = 0;
  for (std::int64_t e = 0; e < cols; ++e) ss += double(xi[e]) * double(xi[e]);
  const T s = T(1.0 / sqrt(ss / double(cols) + eps));
  rstd[r] = s;
  for (std::int64_t e = 0; e < cols; ++e) out[r * cols + e] = xi[e] * s * g[e];
}
template <class T>
__global__ void rmsnorm_backward_dx_kernel(const T* dy, const T* x, const T* g, const T* rstd,
                                           T* dx, std::int64_t rows, std::int64_t cols) {
  const std::int64_t r = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const double s = double(rstd[r]);
  double dot = 0;
  for (std::int64_t e = 0; e < cols; ++e) {
    dot += double(dy[r * cols + e]) * double(g[e]) * double(x[r * cols + e]);
  }
  const T coef = T(s * s * s * dot / double(cols));
  for (std::int64_t e = 0; e < cols; ++e) {
    dx[r * cols + e] = T(s) * dy[r * cols + e] * g[e] - x[r * cols + e] * coef;
  }
}
// One thread per column, rows in order.
template <class T>
__global__ void rmsnorm_backward_dg_kernel(const T* dy, const T* x, const T* rstd, T* dg,
                                           std::int64_t rows, std::int64_t cols) {
  const std::int64_t e = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= cols) return;
  double acc = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    acc += double(dy[r * cols + e]) * double(x[r * cols + e]) * double(rstd[r]);
  }
  dg[e] += T(acc);
}

template <class T>
__global__ void rope_kernel(const T* x, const T* cosv, const T* sinv, T* out, std::int64_t batch,
                            std::int64_t seq, std::int64_t heads, std::int64_t hd,
                            std::int64_t table_rows, bool backward) {
  const std::int64_t half = hd / 2;
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= batch * seq * heads * half) return;
  // The table row of token (b, t): t for [T, half] tables, b*T + t for a row per token.
  const std::int64_t j = i % half, bth = i / half, t = (bth / heads) % table_rows;
  const std::int64_t base = bth * hd;
  const T c = cosv[t * half + j], s = sinv[t * half + j];
  T y1, y2;
  if (backward)
    math::rope_rotate_back(x[base + j], x[base + j + half], c, s, y1, y2);
  else
    math::rope_rotate(x[base + j], x[base + j + half], c, s, y1, y2);
  out[base + j] = y1;
  out[base + j + half] = y2;
}

// The shape of one attention call: B, Tq queries, Tk keys, H, Hkv, D.
struct AttnShape {
  std::int64_t B, Tq, Tk, H, Hkv, D;
};

// Causal GQA attention, one thread per (batch, head, query position): two passes over the keys
// (max and log-sum-exp, then the weighted sum of values). q has Tq positions, k and v Tk >= Tq:
// query i is position Tk - Tq + i and attends keys j <= Tk - Tq + i (backend.h); with packed
// documents (doc_start [B, Tq], positions of the keys' sequence) only keys j >= doc_start[b][i].
template <class T>
__global__ void attention_forward_kernel(const T* q, const T* k, const T* v, T* out, T* lse,
                                         AttnShape a, const std::int32_t* doc_start) {
  const std::int64_t B = a.B, Tq = a.Tq, Tk = a.Tk, H = a.H, Hkv = a.Hkv, D = a.D;
  const std::int64_t idx = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= B * H * Tq) return;
  const std::int64_t i = idx % Tq, h = (idx / Tq) % H, b = idx / (Tq * H);
  const std::int64_t kvh = h / (H / Hkv), last = Tk - Tq + i;
  const std::int64_t first = doc_start ? doc_start[b * Tq + i] : 0;
  const double scale = 1.0 / sqrt(double(D));
  const T* qi = q + ((b * Tq + i) * H + h) * D;
  double mx = -1e300;
  for (std::int64_t j = first; j <= last; ++j) {
    const T* kj = k + ((b * Tk + j) * Hkv + kvh) * D;
    double s = 0;
    for (std::int64_t e = 0; e < D; ++e) s += double(qi[e]) * double(kj[e]);
    mx = fmax(mx, s * scale);
  }
  double sum = 0;
  for (std::int64_t j = first; j <= last; ++j) {
    const T* kj = k + ((b * Tk + j) * Hkv + kvh) * D;
    double s = 0;
    for (std::int64_t e = 0; e < D; ++e) s += double(qi[e]) * double(kj[e]);
    sum += exp(s * scale - mx);
  }
  const double l = mx + log(sum);
  lse[(b * H + h) * Tq + i] = T(l);
  T* oi = out + ((b * Tq + i) * H + h) * D;
  for (std::int64_t e = 0; e < D; ++e) oi[e] = T(0);
  for (std::int64_t j = first; j <= last; ++j) {
    const T* kj = k + ((b * Tk + j) * Hkv + kvh) * D;
    const T* vj = v + ((b * Tk + j) * Hkv + kvh) * D;
    double s = 0;
    for (std::int64_t e = 0; e < D; ++e) s += double(qi[e]) * double(kj[e]);
    const T p = T(exp(s * scale - l));
    for (std::int64_t e = 0; e < D; ++e) oi[e] += p * vj[e];
  }
}

// dS[i,j] = P[i,j] (dO_i . v_j - dO_i . O_i) for query i, key j of one (batch, head).
template <class T>
__device__ double attention_ds(const T* q, const T* k, const T* v, const T* out, const T* dout,
                               const T* lse, std::int64_t b, std::int64_t h, std::int64_t i,
                               std::int64_t j, const AttnShape& a) {
  const std::int64_t kvh = h / (a.H / a.Hkv);
  const double scale = 1.0 / sqrt(double(a.D));
  const T* qi = q + ((b * a.Tq + i) * a.H + h) * a.D;
  const T* kj = k + ((b * a.Tk + j) * a.Hkv + kvh) * a.D;
  const T* vj = v + ((b * a.Tk + j) * a.Hkv + kvh) * a.D;
  const T* oi = out + ((b * a.Tq + i) * a.H + h) * a.D;
  const T* doi = dout + ((b * a.Tq + i) * a.H + h) * a.D;
  double s = 0, dpv = 0, di = 0;
  for (std::int64_t e = 0; e < a.D; ++e) {
    s += double(qi[e]) * double(kj[e]);
    dpv += double(doi[e]) * double(vj[e]);
    di += double(doi[e]) * double(oi[e]);
  }
  const double p = exp(s * scale - double(lse[(b * a.H + h) * a.Tq + i]));
  return p * (dpv - di);
}

// dq: one thread per (batch, head, query i), keys j <= Tk - Tq + i in order.
template <class T>
__global__ void attention_dq_kernel(const T* q, const T* k, const T* v, const T* out, const T* dout,
                                    const T* lse, T* dq, AttnShape a,
                                    const std::int32_t* doc_start) {
  const std::int64_t idx = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= a.B * a.H * a.Tq) return;
  const std::int64_t i = idx % a.Tq, h = (idx / a.Tq) % a.H, b = idx / (a.Tq * a.H);
  const std::int64_t kvh = h / (a.H / a.Hkv);
  const double scale = 1.0 / sqrt(double(a.D));
  T* dqi = dq + ((b * a.Tq + i) * a.H + h) * a.D;
  for (std::int64_t e = 0; e < a.D; ++e) dqi[e] = T(0);
  for (std::int64_t j = doc_start ? doc_start[b * a.Tq + i] : 0; j <= a.Tk - a.Tq + i; ++j) {
    const T ds = T(scale * attention_ds(q, k, v, out, dout, lse, b, h, i, j, a));
    const T* kj = k + ((b * a.Tk + j) * a.Hkv + kvh) * a.D;
    for (std::int64_t e = 0; e < a.D; ++e) dqi[e] += ds * kj[e];
  }
}

// dk, dv: one thread per (batch, kv head, key j); query heads of the group and the queries that
// see key j (position Tk - Tq + i >= j) in order.
template <class T>
__global__ void attention_dkv_kernel(const T* q, const T* k, const T* v, const T* out,
                                     const T* dout, const T* lse, T* dk, T* dv, AttnShape a,
                                     const std::int32_t* doc_start) {
  const std::int64_t idx = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= a.B * a.Hkv * a.Tk) return;
  const std::int64_t j = idx % a.Tk, kvh = (idx / a.Tk) % a.Hkv, b = idx / (a.Tk * a.Hkv);
  const std::int64_t group = a.H / a.Hkv, first = j - (a.Tk - a.Tq) > 0 ? j - (a.Tk - a.Tq) : 0;
  const double scale = 1.0 / sqrt(double(a.D));
  T* dkj = dk + ((b * a.Tk + j) * a.Hkv + kvh) * a.D;
  T* dvj = dv + ((b * a.Tk + j) * a.Hkv + kvh) * a.D;
  for (std::int64_t e = 0; e < a.D; ++e) dkj[e] = dvj[e] = T(0);
  for (std::int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
    for (std::int64_t i = first; i < a.Tq; ++i) {
      if (doc_start && doc_start[b * a.Tq + i] > j) continue;  // key j is in an earlier document
      const T* qi = q + ((b * a.Tq + i) * a.H + h) * a.D;
      const T* doi = dout + ((b * a.Tq + i) * a.H + h) * a.D;
      const T* kj = k + ((b * a.Tk + j) * a.Hkv + kvh) * a.D;
      double s = 0;
      for (std::int64_t e = 0; e < a.D; ++e) s += double(qi[e]) * double(kj[e]);
      const T p = T(exp(s * scale - double(lse[(b * a.H + h) * a.Tq + i])));
      const T ds = T(scale * attention_ds(q, k, v, out, dout, lse, b, h, i, j, a));
      for (std::int64_t e = 0; e < a.D; ++e) {
        dvj[e] += p * doi[e];
        dkj[e] += ds * qi[e];
      }
    }
  }
}

template <class T>
__global__ void swiglu_forward_kernel(const T* g, const T* u, T* out, std::int64_t n) {
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = math::swiglu(g[i], u[i]);
}
template <class T>
__global__ void swiglu_backward_kernel(const T* dy, const T* g, const T* u, T* dg, T* du,
                                       std::int64_t n) {
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  T a, b;
  math::swiglu_grad(dy[i], g[i], u[i], a, b);
  dg[i] = a;
  du[i] = b;
}
// out[i] = x[i] * scale[row of i]: one thread per element.
template <class T>
__global__ void scale_rows_kernel(const T* x, const T* scale, T* out, std::int64_t cols,
                                  std::int64_t n) {
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] * scale[i / cols];
}

// out[r] = the dot of rows r of a and b, in double and in order (the CPU's bits): one thread per
// row.
template <class T>
__global__ void row_dots_kernel(const T* a, const T* b, T* out, std::int64_t rows,
                                std::int64_t cols) {
  const std::int64_t r = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  double dot = 0.0;
  for (std::int64_t e = 0; e < cols; ++e) dot += double(a[r * cols + e]) * double(b[r * cols + e]);
  out[r] = T(dot);
}

template <class T>
__global__ void gelu_forward_kernel(const T* x, T* out, std::int64_t n) {
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = math::gelu(x[i]);
}
template <class T>
__global__ void gelu_backward_kernel(const T* dy, const T* x, T* dx, std::int64_t n) {
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dx[i] = dy[i] * math::gelu_grad(x[i]);
}

// One thread per row (token).
template <class T>
__global__ void cross_entropy_kernel(const T* logits, const std::int32_t* targets, T* losses,
                                     T* dlogits, double dloss, std::int64_t rows,
                                     std::int64_t vocab) {
  const std::int64_t r = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const T* row = logits + r * vocab;
  double mx = -1e300;
  for (std::int64_t j = 0; j < vocab; ++j) mx = fmax(mx, double(row[j]));
  double sum = 0;
  for (std::int64_t j = 0; j < vocab; ++j) sum += exp(double(row[j]) - mx);
  const double lse = mx + log(sum);
  if (losses) losses[r] = T(lse - double(row[targets[r]]));
  if (dlogits) {
    for (std::int64_t j = 0; j < vocab; ++j) {
      const double p = exp(double(row[j]) - lse);
      dlogits[r * vocab + j] = T(dloss * (p - (j == targets[r] ? 1.0 : 0.0)));
    }
  }
}

template <class T>
__global__ void adamw_kernel(T* p, const T* g, T* m, T* v, std::int64_t n, math::AdamWScalars h) {
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) math::adamw(p[i], g[i], m[i], v[i], h);
}

}  // namespace carousel::gpu
