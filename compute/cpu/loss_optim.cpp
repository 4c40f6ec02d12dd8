// loss_optim.cpp — CpuBackend: softmax cross-entropy (forward, backward) and the AdamW update.
#include <cmath>
#include <limits>
#include <vector>

#include "compute/cpu/blas.h"
#include "compute/cpu_backend.h"
#include "compute/dispatch.h"
#include "compute/elementwise.h"

namespace carousel {

namespace {
// Row log-sum-exp in double (max-shifted).
template <class T>
double row_logsumexp(const T* row, std::int64_t n) {
  double mx = -std::numeric_limits<double>::infinity();
  for (std::int64_t j = 0; j < n; ++j) mx = std::max(mx, double(row[j]));
  double sum = 0.0;
  for (std::int64_t j = 0; j < n; ++j) sum += std::exp(double(row[j]) - mx);
  return mx + std::log(sum);
}

}  // namespace

void CpuBackend::do_cross_entropy_forward(const Tensor& logits, const Tensor& targets,
                                          const Tensor& losses) {
  const std::int64_t rows = logits.dim(0), vocab = logits.dim(1);
  const std::int32_t* tgt = targets.data<std::int32_t>();
  dispatch(FloatTypes{}, "cross_entropy_forward", logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pl = logits.data<T>();
    T* out = losses.data<T>();
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < rows; ++i) {
      const T* row = pl + i * vocab;
      out[i] = T(row_logsumexp(row, vocab) - double(row[tgt[i]]));
    }
  });
}

void CpuBackend::do_cross_entropy_backward(const Tensor& logits, const Tensor& targets,
                                           double dloss, const Tensor& dlogits) {
  const std::int64_t rows = logits.dim(0), vocab = logits.dim(1);
  const std::int32_t* tgt = targets.data<std::int32_t>();
  dispatch(FloatTypes{}, "cross_entropy_backward", logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pl = logits.data<T>();
    T* pd = dlogits.data<T>();
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < rows; ++i) {
      const T* row = pl + i * vocab;
      const double lse = row_logsumexp(row, vocab);
      for (std::int64_t j = 0; j < vocab; ++j) {
        const double prob = std::exp(double(row[j]) - lse);
        pd[i * vocab + j] = T(dloss * (prob - (j == tgt[i] ? 1.0 : 0.0)));
      }
    }
  });
}

void CpuBackend::do_cross_entropy_part_forward(const Tensor& logits, const Tensor& targets,
                                               std::int64_t first, const Tensor& lse,
                                               const Tensor& target_logits) {
  const std::int64_t rows = logits.dim(0), part = logits.dim(1);
  const std::int32_t* tgt = targets.data<std::int32_t>();
  dispatch(FloatTypes{}, "cross_entropy_part_forward", logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pl = logits.data<T>();
    T* out_lse = lse.data<T>();
    T* out_target = target_logits.data<T>();
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < rows; ++i) {
      const T* row = pl + i * part;
      const std::int64_t j = std::int64_t(tgt[i]) - first;
      out_lse[i] = T(row_logsumexp(row, part));
      out_target[i] = j >= 0 && j < part ? row[j] : T(0);
    }
  });
}

void CpuBackend::do_cross_entropy_combine(const Tensor& lse_parts, const Tensor& target_logit_parts,
                                          const Tensor& lse, const Tensor& losses) {
  const std::int64_t parts = lse_parts.dim(0), rows = lse_parts.dim(1);
  dispatch(FloatTypes{}, "cross_entropy_combine", lse.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pl = lse_parts.data<T>();
    const T* pt = target_logit_parts.data<T>();
    T* out_lse = lse.data<T>();
    T* out_loss = losses.data<T>();
#pragma omp parallel
    {
      std::vector<double> column(std::size_t(parts), 0.0);  // a thread's scratch
#pragma omp for schedule(static)
      for (std::int64_t i = 0; i < rows; ++i) {
        double target = 0;  // parts in order: the same sum on every rank
        for (std::int64_t p = 0; p < parts; ++p) {
          column[std::size_t(p)] = double(pl[p * rows + i]);
          target += double(pt[p * rows + i]);
        }
        const double whole = row_logsumexp(column.data(), parts);
        out_lse[i] = T(whole);
        out_loss[i] = T(whole - target);
      }
    }
  });
}

void CpuBackend::do_cross_entropy_part_backward(const Tensor& logits, const Tensor& targets,
                                                std::int64_t first, const Tensor& lse, double dloss,
                                                const Tensor& dlogits) {
  const std::int64_t rows = logits.dim(0), part = logits.dim(1);
  const std::int32_t* tgt = targets.data<std::int32_t>();
  dispatch(FloatTypes{}, "cross_entropy_part_backward", logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pl = logits.data<T>();
    const T* pe = lse.data<T>();
    T* pd = dlogits.data<T>();
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < rows; ++i) {
      const std::int64_t t = std::int64_t(tgt[i]) - first;
      for (std::int64_t j = 0; j < part; ++j) {
        const double prob = std::exp(double(pl[i * part + j]) - double(pe[i]));
        pd[i * part + j] = T(dloss * (prob - (j == t ? 1.0 : 0.0)));
      }
    }
  });
}

void CpuBackend::do_adamw_update(const Tensor& param, const Tensor& grad, const Tensor& m,
                                 const Tensor& v, const AdamWScalars& scalars) {
  dispatch(FloatTypes{}, "adamw_update", param.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* pp = param.data<T>();
    const T* pg = grad.data<T>();
    T* pm = m.data<T>();
    T* pv = v.data<T>();
    const std::int64_t n = param.numel();
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < n; ++i) math::adamw(pp[i], pg[i], pm[i], pv[i], scalars);
  });
}

}  // namespace carousel
