// vocab_parts.cu — the vocabulary-part ops' kernels and launches (vocab_parts.h).
#include <cstdint>
#include <type_traits>

#include "compute/dispatch.h"
#include "compute/error.h"
#include "cuda/reference_kernels.cuh"
#include "cuda/vocab_parts.h"

namespace carousel::gpu::vocab_parts {

namespace {

// T is float, double or bfloat16; S is the statistics' dtype (float beside bfloat16).
template <class T>
__device__ inline double wide(T x) {
  return math::Convert<double>::from(x);
}
template <class T>
__device__ inline T narrow(double v) {
  if constexpr (std::is_same_v<T, bf16>) {
    return math::to_bf16(float(v));
  } else {
    return T(v);
  }
}
// Forward: one thread per element, zeros outside the part.
template <class T>
__global__ void embedding_part_forward_kernel(const T* table, const std::int32_t* tokens, T* out,
                                              std::int64_t first, std::int64_t part, std::int64_t n,
                                              std::int64_t embed) {
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * embed) return;
  const std::int64_t r = std::int64_t(tokens[i / embed]) - first;
  out[i] = r >= 0 && r < part ? table[r * embed + i % embed] : T{};
}
// One thread per column walks the tokens in order: deterministic scatter-add.
template <class T>
__global__ void embedding_part_backward_kernel(const T* dout, const std::int32_t* tokens, T* dtable,
                                               std::int64_t first, std::int64_t part,
                                               std::int64_t n, std::int64_t embed) {
  const std::int64_t e = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= embed) return;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t r = std::int64_t(tokens[i]) - first;
    if (r >= 0 && r < part) dtable[r * embed + e] += dout[i * embed + e];
  }
}
// One block of kThreads per row: the part's max, then its sum of exponentials, each reduced over
// the block in a fixed tree (deterministic); its log-sum-exp and the target's logit (0 outside).
template <class T, class S>
__global__ void cross_entropy_part_forward_kernel(const T* logits, const std::int32_t* targets,
                                                  S* lse, S* target_logits, std::int64_t first,
                                                  std::int64_t part) {
  __shared__ double partial[kThreads];
  const std::int64_t r = blockIdx.x;
  const int tid = int(threadIdx.x);
  const T* row = logits + r * part;
  const auto reduce = [&](double mine, bool max) {
    partial[tid] = mine;
    __syncthreads();
    for (int half = kThreads / 2; half > 0; half /= 2) {
      if (tid < half)
        partial[tid] =
            max ? fmax(partial[tid], partial[tid + half]) : partial[tid] + partial[tid + half];
      __syncthreads();
    }
    const double all = partial[0];
    __syncthreads();
    return all;
  };
  double mx = -1e300;
  for (std::int64_t j = tid; j < part; j += kThreads) mx = fmax(mx, wide(row[j]));
  mx = reduce(mx, true);
  double sum = 0;
  for (std::int64_t j = tid; j < part; j += kThreads) sum += exp(wide(row[j]) - mx);
  sum = reduce(sum, false);
  if (tid != 0) return;
  lse[r] = S(mx + log(sum));
  const std::int64_t t = std::int64_t(targets[r]) - first;
  target_logits[r] = t >= 0 && t < part ? S(wide(row[t])) : S(0);
}
// One thread per token: the parts' statistics [parts, rows] combined in part order.
template <class T>
__global__ void cross_entropy_combine_kernel(const T* lse_parts, const T* target_parts, T* lse,
                                             T* losses, std::int64_t parts, std::int64_t rows) {
  const std::int64_t r = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  double mx = -1e300, target = 0;
  for (std::int64_t p = 0; p < parts; ++p) mx = fmax(mx, double(lse_parts[p * rows + r]));
  double sum = 0;
  for (std::int64_t p = 0; p < parts; ++p) {
    sum += exp(double(lse_parts[p * rows + r]) - mx);
    target += double(target_parts[p * rows + r]);
  }
  lse[r] = T(mx + log(sum));
  losses[r] = T(mx + log(sum) - target);
}
// One thread per element, with the whole vocabulary's lse of its row.
template <class T, class S>
__global__ void cross_entropy_part_backward_kernel(const T* logits, const std::int32_t* targets,
                                                   const S* lse, T* dlogits, double dloss,
                                                   std::int64_t first, std::int64_t rows,
                                                   std::int64_t part) {
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * part) return;
  const std::int64_t r = i / part, j = i % part;
  const double p = exp(wide(logits[i]) - double(lse[r]));
  dlogits[i] = narrow<T>(dloss * (p - (std::int64_t(targets[r]) - first == j ? 1.0 : 0.0)));
}

template <class Kernel, class... Args>
void run(const fast::Launch& l, Kernel kernel, std::int64_t threads, Args... args) {
  if (threads <= 0) return;
  CUDA_CHECK(cudaSetDevice(l.gpu));
  kernel<<<blocks_for(threads), kThreads, 0, l.stream>>>(args...);
  CUDA_CHECK(cudaGetLastError());
}

// Calls body(T{}, S{}) for the storage dtype: float, double, or bfloat16 with float statistics.
template <class Body>
void with_types(DType dt, const char* op, Body body) {
  if (dt == DType::BF16) return body(bf16{}, float{});
  dispatch(FloatTypes{}, op, dt, [&](auto tag) { body(tag, tag); });
}

}  // namespace

void embedding(const fast::Launch& l, const Tensor& table, const Tensor& tokens, std::int64_t first,
               const Tensor& rows, bool backward) {
  const std::int64_t n = tokens.numel(), e = table.dim(1), part = table.dim(0);
  if (backward) {  // float32 or float64 (bfloat16 gradients are staged)
    dispatch(FloatTypes{}, "embedding_part_backward", table.dtype(), [&](auto tag) {
      using T = decltype(tag);
      run(l, embedding_part_backward_kernel<T>, e, rows.data<T>(), tokens.data<std::int32_t>(),
          table.data<T>(), first, part, n, e);
    });
    return;
  }
  with_types(table.dtype(), "embedding_part_forward", [&](auto tag, auto) {
    using T = decltype(tag);
    run(l, embedding_part_forward_kernel<T>, n * e, table.data<T>(), tokens.data<std::int32_t>(),
        rows.data<T>(), first, part, n, e);
  });
}

void cross_entropy_forward(const fast::Launch& l, const Tensor& logits, const Tensor& targets,
                           std::int64_t first, const Tensor& lse, const Tensor& target_logits) {
  with_types(logits.dtype(), "cross_entropy_part_forward", [&](auto tag, auto stat) {
    using T = decltype(tag);
    using S = decltype(stat);
    run(l, cross_entropy_part_forward_kernel<T, S>, logits.dim(0) * kThreads,  // a block a row
        logits.data<T>(), targets.data<std::int32_t>(), lse.data<S>(), target_logits.data<S>(),
        first, logits.dim(1));
  });
}

void cross_entropy_combine(const fast::Launch& l, const Tensor& lse_parts,
                           const Tensor& target_logit_parts, const Tensor& lse,
                           const Tensor& losses) {
  dispatch(FloatTypes{}, "cross_entropy_combine", lse.dtype(), [&](auto tag) {
    using T = decltype(tag);
    run(l, cross_entropy_combine_kernel<T>, lse_parts.dim(1), lse_parts.data<T>(),
        target_logit_parts.data<T>(), lse.data<T>(), losses.data<T>(), lse_parts.dim(0),
        lse_parts.dim(1));
  });
}

void cross_entropy_backward(const fast::Launch& l, const Tensor& logits, const Tensor& targets,
                            std::int64_t first, const Tensor& lse, double dloss,
                            const Tensor& dlogits) {
  with_types(logits.dtype(), "cross_entropy_part_backward", [&](auto tag, auto stat) {
    using T = decltype(tag);
    using S = decltype(stat);
    run(l, cross_entropy_part_backward_kernel<T, S>, logits.numel(), logits.data<T>(),
        targets.data<std::int32_t>(), lse.data<S>(), dlogits.data<T>(), dloss, first, logits.dim(0),
        logits.dim(1));
  });
}

}  // namespace carousel::gpu::vocab_parts
