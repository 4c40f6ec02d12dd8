// fast_kernels.cuh — the fast tier's kernels (gpu_kernels=fast): float32 or native bfloat16 storage
// (T = float or bf16), float32 arithmetic in registers, V-element packs (16-byte loads where
// cuda/plans/launch_plan.h found the pointers aligned), and block reductions written so that every
// result is bitwise the same from run to run:
//   * a reduction's order depends only on the shape and the pack width (the block size comes
//     from them), and the width only on the shape and the views' offsets in their buffers
//     (pool allocations are 256-byte aligned): the same program gives the same order;
//   * warps reduce by butterfly shuffles (a + b == b + a exactly, so all lanes agree), warps
//     meet in shared memory in warp order — no atomics anywhere;
//   * column sums over rows go through fixed row chunks, then the chunks in order.
// Every kernel declares the largest block its launch plan gives (__launch_bounds__, the
// constants of cuda/plans/launch_plan.h; tests/compute/test_cuda_plans.cpp checks the plans stay
// within them), so the compiler keeps each thread's registers within what such a block can have
// and a 1024-thread row launch cannot fail with "too many resources requested".
// Accumulated parameter gradients may be float32 beside bfloat16 values (rmsnorm_backward's
// dweight, embedding_backward's dtable: compute/op_check.h `accumulator`), so those kernels take
// the accumulator's type apart from the values'.
// The per-element math is compute/elementwise.h's, shared with the CPU backend and the reference
// kernels (cuda/reference_kernels.cuh), which stay as this tier's oracle on the GPU.
#pragma once

#include <cstdint>

#include "compute/bfloat16.h"
#include "compute/elementwise.h"
#include "cuda/plans/launch_plan.h"

namespace carousel::gpu::fast {

using std::int64_t;

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(bf16 x) { return math::to_float(x); }
template <class T>
__device__ __forceinline__ T from_f(float x) {
  return math::Convert<T>::from(x);
}

// V elements loaded or stored by one instruction (alignment checked on the host).
template <class T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};
template <int V, class T>
__device__ __forceinline__ Pack<T, V> load(const T* base, int64_t pack) {
  return reinterpret_cast<const Pack<T, V>*>(base)[pack];
}
template <int V, class T>
__device__ __forceinline__ void store(T* base, int64_t pack, const Pack<T, V>& p) {
  reinterpret_cast<Pack<T, V>*>(base)[pack] = p;
}

__device__ __forceinline__ int64_t global_thread() {
  return int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
}

// ---- block reductions (blockDim.x a multiple of 32, at most 1024) ----------------------------
// A = float (the row kernels) or double (the sums returned to the host).
template <class A>
__device__ __forceinline__ A warp_sum(A v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
// The sum over the block, the same bits in every thread. `scratch`: 32 values of shared memory.
template <class A>
__device__ __forceinline__ A block_sum(A v, A* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read from a previous reduction
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  return warp_sum(lane < warps ? scratch[lane] : A(0));
}

// A running softmax normaliser: the maximum seen and the sum of exp(x - max).
struct MaxSum {
  float max, sum;
};
__device__ __forceinline__ MaxSum combine(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.max, b.max);
  if (m == -INFINITY) return {m, 0.f};
  return {m, a.sum * expf(a.max - m) + b.sum * expf(b.max - m)};  // symmetric in a and b
}
__device__ __forceinline__ MaxSum warp_combine(MaxSum v) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    v = combine(v, {__shfl_xor_sync(0xffffffffu, v.max, offset),
                    __shfl_xor_sync(0xffffffffu, v.sum, offset)});
  }
  return v;
}
__device__ __forceinline__ MaxSum block_combine(MaxSum v, float2* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_combine(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = make_float2(v.max, v.sum);
  __syncthreads();
  const float2 w = lane < warps ? scratch[lane] : make_float2(-INFINITY, 0.f);
  return warp_combine({w.x, w.y});
}

// ---- elementwise --------------------------------------------------------------------------
// Each thread one pack of V elements; n % V == 0 (the host chose V so).
template <class From, class To, int V>
__global__ void __launch_bounds__(kElementwiseThreads)
    cast(const From* src, To* dst, int64_t packs) {
  const int64_t i = global_thread();
  if (i >= packs) return;
  const Pack<From, V> a = load<V>(src, i);
  Pack<To, V> o;
  for (int e = 0; e < V; ++e) o.v[e] = math::Convert<To>::from(a.v[e]);
  store<V>(dst, i, o);
}

// out = alpha_a * a + alpha_b * b (b may be null: out = alpha_a * a). add, axpy and scale.
template <class T, int V>
__global__ void __launch_bounds__(kElementwiseThreads)
    linear_combination(const T* a, float alpha_a, const T* b, float alpha_b, T* out,
                       int64_t packs) {
  const int64_t i = global_thread();
  if (i >= packs) return;
  const Pack<T, V> x = load<V>(a, i);
  Pack<T, V> y;
  if (b) y = load<V>(b, i);
  Pack<T, V> o;
  for (int e = 0; e < V; ++e) {
    const float r = alpha_a * to_f(x.v[e]);
    o.v[e] = from_f<T>(b ? r + alpha_b * to_f(y.v[e]) : r);
  }
  store<V>(out, i, o);
}

template <class T, int V>
__global__ void __launch_bounds__(kElementwiseThreads)
    swiglu_forward(const T* gate, const T* up, T* out, int64_t packs) {
  const int64_t i = global_thread();
  if (i >= packs) return;
  const Pack<T, V> g = load<V>(gate, i), u = load<V>(up, i);
  Pack<T, V> o;
  for (int e = 0; e < V; ++e) o.v[e] = from_f<T>(math::swiglu(to_f(g.v[e]), to_f(u.v[e])));
  store<V>(out, i, o);
}
template <class T, int V>
__global__ void __launch_bounds__(kElementwiseThreads)
    swiglu_backward(const T* dout, const T* gate, const T* up, T* dgate, T* dup, int64_t packs) {
  const int64_t i = global_thread();
  if (i >= packs) return;
  const Pack<T, V> d = load<V>(dout, i), g = load<V>(gate, i), u = load<V>(up, i);
  Pack<T, V> dg, du;
  for (int e = 0; e < V; ++e) {
    float a, b;
    math::swiglu_grad(to_f(d.v[e]), to_f(g.v[e]), to_f(u.v[e]), a, b);
    dg.v[e] = from_f<T>(a);
    du.v[e] = from_f<T>(b);
  }
  store<V>(dgate, i, dg);
  store<V>(dup, i, du);
}

// x, out [rows = B*T*H, 2*half]; cos, sin [table_rows, half] float32: T rows (token (b, t) at
// position t) or B*T (a row per token, packed documents). One thread per V pairs.
template <class T, int V>
__global__ void __launch_bounds__(kElementwiseThreads)
    rope(const T* x, const float* cosv, const float* sinv, T* out, int64_t rows, int64_t table_rows,
         int64_t heads, int64_t half, bool backward) {
  const int64_t i = global_thread(), packs_per_row = half / V;
  if (i >= rows * packs_per_row) return;
  const int64_t row = i / packs_per_row, p = i % packs_per_row, t = (row / heads) % table_rows;
  const T* xr = x + row * 2 * half;
  T* outr = out + row * 2 * half;
  const Pack<T, V> a = load<V>(xr, p), b = load<V>(xr + half, p);
  Pack<T, V> y1, y2;
  for (int e = 0; e < V; ++e) {
    const float c = cosv[t * half + p * V + e], s = sinv[t * half + p * V + e];
    float r1, r2;
    if (backward)
      math::rope_rotate_back(to_f(a.v[e]), to_f(b.v[e]), c, s, r1, r2);
    else
      math::rope_rotate(to_f(a.v[e]), to_f(b.v[e]), c, s, r1, r2);
    y1.v[e] = from_f<T>(r1);
    y2.v[e] = from_f<T>(r2);
  }
  store<V>(outr, p, y1);  // out may alias x: this thread read these packs above
  store<V>(outr + half, p, y2);
}

template <class T, int V>
__global__ void __launch_bounds__(kElementwiseThreads)
    adamw(T* param, const T* grad, T* m, T* v, int64_t packs, math::AdamWScalars h) {
  const int64_t i = global_thread();
  if (i >= packs) return;
  Pack<T, V> p = load<V>(param, i), mm = load<V>(m, i), vv = load<V>(v, i);
  const Pack<T, V> g = load<V>(grad, i);
  for (int e = 0; e < V; ++e) {
    float pf = to_f(p.v[e]), mf = to_f(mm.v[e]), vf = to_f(vv.v[e]);
    math::adamw(pf, to_f(g.v[e]), mf, vf, h);
    p.v[e] = from_f<T>(pf);
    mm.v[e] = from_f<T>(mf);
    vv.v[e] = from_f<T>(vf);
  }
  store<V>(param, i, p);
  store<V>(m, i, mm);
  store<V>(v, i, vv);
}

// ---- one block per row --------------------------------------------------------------------
// out[row] = table[tokens[row]]: [n, embed] from [vocab, embed].
template <class T, int V>
__global__ void __launch_bounds__(kMaxReduceThreads)
    embedding_forward(const T* table, const std::int32_t* tokens, T* out, int64_t embed) {
  const int64_t row = blockIdx.x;
  const T* src = table + int64_t(tokens[row]) * embed;
  for (int64_t p = threadIdx.x; p < embed / V; p += blockDim.x)
    store<V>(out + row * embed, p, load<V>(src, p));
}

// dtable[tok] += sum of dout rows of the positions holding tok, in position order. `sorted` and
// `positions` are the tokens and their positions sorted stably by token (CUB radix sort), so one
// block per run of equal tokens owns its table row: no atomics, a fixed order. TIn: dout's
// storage; TOut: dtable's (TIn, or float32 beside bfloat16: the sum is float32 either way, rounded
// once into the row).
template <class TIn, class TOut, int V>
__global__ void __launch_bounds__(kMaxReduceThreads)
    embedding_backward_runs(const TIn* dout, const std::uint32_t* sorted,
                            const std::int32_t* positions, TOut* dtable, int64_t n, int64_t embed) {
  const int64_t first = blockIdx.x;
  const std::uint32_t token = sorted[first];
  if (first > 0 && sorted[first - 1] == token) return;  // not the start of a run
  int64_t end = first + 1;
  while (end < n && sorted[end] == token) ++end;
  TOut* row = dtable + int64_t(token) * embed;
  for (int64_t p = threadIdx.x; p < embed / V; p += blockDim.x) {
    float acc[V] = {};
    for (int64_t j = first; j < end; ++j) {
      const Pack<TIn, V> d = load<V>(dout + int64_t(positions[j]) * embed, p);
      for (int e = 0; e < V; ++e) acc[e] += to_f(d.v[e]);
    }
    Pack<TOut, V> o = load<V>(row, p);
    for (int e = 0; e < V; ++e) o.v[e] = from_f<TOut>(to_f(o.v[e]) + acc[e]);
    store<V>(row, p, o);
  }
}

__global__ void __launch_bounds__(kElementwiseThreads) iota(std::int32_t* out, int64_t n) {
  const int64_t i = global_thread();
  if (i < n) out[i] = std::int32_t(i);
}

// RMSNorm over rows of [rows, cols]; rstd [rows] float32.
template <class T, int V>
__global__ void __launch_bounds__(kMaxReduceThreads)
    rmsnorm_forward(const T* x, const T* weight, T* out, float* rstd, int64_t cols, float eps) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x, packs = cols / V;
  const T* xr = x + row * cols;
  float ss = 0.f;
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    const Pack<T, V> a = load<V>(xr, p);
    for (int e = 0; e < V; ++e) ss += to_f(a.v[e]) * to_f(a.v[e]);
  }
  const float s = 1.0f / sqrtf(block_sum(ss, scratch) / float(cols) + eps);
  if (threadIdx.x == 0) rstd[row] = s;
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    const Pack<T, V> a = load<V>(xr, p), g = load<V>(weight, p);
    Pack<T, V> o;
    for (int e = 0; e < V; ++e) o.v[e] = from_f<T>(to_f(a.v[e]) * s * to_f(g.v[e]));
    store<V>(out + row * cols, p, o);
  }
}

// dx = s * dy * w - x * s^3 * (sum dy * w * x) / cols, s = rstd of the row.
template <class T, int V>
__global__ void __launch_bounds__(kMaxReduceThreads)
    rmsnorm_backward_dx(const T* dy, const T* x, const T* weight, const float* rstd, T* dx,
                        int64_t cols) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x, packs = cols / V;
  const T *dyr = dy + row * cols, *xr = x + row * cols;
  float dot = 0.f;
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    const Pack<T, V> d = load<V>(dyr, p), a = load<V>(xr, p), g = load<V>(weight, p);
    for (int e = 0; e < V; ++e) dot += to_f(d.v[e]) * to_f(g.v[e]) * to_f(a.v[e]);
  }
  const float s = rstd[row];
  const float coef = s * s * s * block_sum(dot, scratch) / float(cols);
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    const Pack<T, V> d = load<V>(dyr, p), a = load<V>(xr, p), g = load<V>(weight, p);
    Pack<T, V> o;
    for (int e = 0; e < V; ++e)
      o.v[e] = from_f<T>(s * to_f(d.v[e]) * to_f(g.v[e]) - to_f(a.v[e]) * coef);
    store<V>(dx + row * cols, p, o);
  }
}

// partial[chunk, c] = sum over the chunk's rows r of dy[r,c] * x[r,c] * rstd[r] (grid.y = chunk).
template <class T>
__global__ void __launch_bounds__(kElementwiseThreads)
    rmsnorm_dweight_partials(const T* dy, const T* x, const float* rstd, float* partial,
                             int64_t rows, int64_t cols, int64_t rows_per_chunk) {
  const int64_t c = global_thread();
  if (c >= cols) return;
  const int64_t first = int64_t(blockIdx.y) * rows_per_chunk;
  const int64_t last = first + rows_per_chunk < rows ? first + rows_per_chunk : rows;
  float acc = 0.f;
  for (int64_t r = first; r < last; ++r)
    acc += to_f(dy[r * cols + c]) * to_f(x[r * cols + c]) * rstd[r];
  partial[int64_t(blockIdx.y) * cols + c] = acc;
}
// out[c] += sum over chunks, in chunk order. TOut: the accumulator's storage (the values' type,
// or float32 beside bfloat16 values: the partials are float32 already).
template <class TOut>
__global__ void __launch_bounds__(kElementwiseThreads)
    add_column_partials(const float* partial, int64_t chunks, int64_t cols, TOut* out) {
  const int64_t c = global_thread();
  if (c >= cols) return;
  float acc = 0.f;
  for (int64_t k = 0; k < chunks; ++k) acc += partial[k * cols + c];
  out[c] = from_f<TOut>(to_f(out[c]) + acc);
}

// Softmax cross-entropy over a row of `vocab` logits, one block per row, the row read in packs
// with a running (max, sum) — no [rows, vocab] float32 copy. losses (if set) = lse - logit of the
// target; dlogits (if set, may alias logits) = dloss * (softmax - onehot).
template <class T, int V>
__global__ void __launch_bounds__(kMaxReduceThreads)
    cross_entropy(const T* logits, const std::int32_t* targets, float* losses, T* dlogits,
                  float dloss, int64_t vocab) {
  __shared__ float2 scratch[32];
  const int64_t row = blockIdx.x, packs = vocab / V;
  const T* lr = logits + row * vocab;
  MaxSum ms{-INFINITY, 0.f};
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    const Pack<T, V> a = load<V>(lr, p);
    float m = ms.max;
    for (int e = 0; e < V; ++e) m = fmaxf(m, to_f(a.v[e]));
    if (m == -INFINITY) continue;  // only masked logits so far: exp(-inf - -inf) would be NaN
    float s = ms.max == -INFINITY ? 0.f : ms.sum * expf(ms.max - m);
    for (int e = 0; e < V; ++e) s += expf(to_f(a.v[e]) - m);
    ms = {m, s};
  }
  const std::int32_t target = targets[row];
  // Read before the barriers below: dlogits may alias logits and be written right after them.
  const float target_logit = losses && threadIdx.x == 0 ? to_f(lr[target]) : 0.f;
  ms = block_combine(ms, scratch);  // its barriers also order every read above before the writes
  const float lse = ms.max + logf(ms.sum);
  if (losses && threadIdx.x == 0) losses[row] = lse - target_logit;
  if (!dlogits) return;
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    const Pack<T, V> a = load<V>(lr, p);
    Pack<T, V> o;
    for (int e = 0; e < V; ++e) {
      const float onehot = p * V + e == target ? 1.f : 0.f;
      o.v[e] = from_f<T>(dloss * (expf(to_f(a.v[e]) - lse) - onehot));
    }
    store<V>(dlogits + row * vocab, p, o);
  }
}

// ---- sums returned to the host --------------------------------------------------------------
// partial[block] = the sum of the block's packs (of their squares with `squares`), in double.
// Thread t of block b takes packs b * blockDim + t, then every gridDim * blockDim further; the
// grid comes from the size alone (plan_block_sums), so the order of every addition depends only
// on the size and the pack width, and the host adds the partials in block order: the sum is
// bitwise the same from run to run. Double because a gradient norm sums billions of squares.
template <class T, int V>
__global__ void __launch_bounds__(kElementwiseThreads)
    block_partial_sums(const T* x, int64_t packs, bool squares, double* partial) {
  __shared__ double scratch[32];
  double acc = 0.0;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t p = global_thread(); p < packs; p += stride) {
    const Pack<T, V> a = load<V>(x, p);
    for (int e = 0; e < V; ++e) {
      const double v = to_f(a.v[e]);
      acc += squares ? v * v : v;
    }
  }
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

}  // namespace carousel::gpu::fast
