// layers.cpp — CpuBackend: embedding, RMSNorm, RoPE, SwiGLU and GELU, forward and backward.
//
// Row-wise ops parallelise over rows; ops that reduce over rows (weight gradients, embedding
// scatter-add) parallelise over column blocks and walk the rows in order, so each output element
// is summed by one thread in a fixed order (deterministic, race-free).
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "compute/cpu/blas.h"
#include "compute/cpu/exp_loops.h"
#include "compute/cpu_backend.h"
#include "compute/dispatch.h"
#include "compute/elementwise.h"

namespace carousel {

namespace {
constexpr std::int64_t kColumnBlock = 16;    // columns per task in row-reducing loops
constexpr std::int64_t kSwigluChunk = 4096;  // elements per call of the vectorised SwiGLU loops
}  // namespace

void CpuBackend::do_embedding_forward(const Tensor& table, const Tensor& tokens,
                                      const Tensor& out) {
  const std::int64_t embed = table.dim(1), n = tokens.numel();
  const std::int32_t* tok = tokens.data<std::int32_t>();
  dispatch(FloatTypes{}, "embedding_forward", table.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* w = table.data<T>();
    T* o = out.data<T>();
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < n; ++i) {
      const T* row = w + std::int64_t(tok[i]) * embed;
      for (std::int64_t e = 0; e < embed; ++e) o[i * embed + e] = row[e];
    }
  });
}

void CpuBackend::do_embedding_backward(const Tensor& dout, const Tensor& tokens,
                                       const Tensor& dtable) {
  const std::int64_t embed = dtable.dim(1), n = tokens.numel();
  const std::int32_t* tok = tokens.data<std::int32_t>();
  dispatch(FloatTypes{}, "embedding_backward", dtable.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* g = dout.data<T>();
    T* dw = dtable.data<T>();
    const std::int64_t blocks = (embed + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static)
    for (std::int64_t blk = 0; blk < blocks; ++blk) {
      const std::int64_t e0 = blk * kColumnBlock, e1 = std::min(embed, e0 + kColumnBlock);
      for (std::int64_t i = 0; i < n; ++i) {
        T* row = dw + std::int64_t(tok[i]) * embed;
        for (std::int64_t e = e0; e < e1; ++e) row[e] += g[i * embed + e];
      }
    }
  });
}

// A vocabulary part: rows [first, first + part) of the table. Forward writes every row (zeros
// for ids outside the part); backward adds the part's ids in token order per column block, as
// the whole-table backward does.
void CpuBackend::do_embedding_part(const Tensor& table, const Tensor& tokens, std::int64_t first,
                                   const Tensor& rows, bool backward) {
  const std::int64_t embed = table.dim(1), n = tokens.numel(), part = table.dim(0);
  const std::int32_t* tok = tokens.data<std::int32_t>();
  const auto local = [&](std::int64_t i) {  // the id's row in the part, or -1
    const std::int64_t r = std::int64_t(tok[i]) - first;
    return r >= 0 && r < part ? r : -1;
  };
  dispatch(FloatTypes{}, "embedding_part", table.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* w = table.data<T>();
    T* x = rows.data<T>();
    if (!backward) {
#pragma omp parallel for schedule(static)
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t r = local(i);
        for (std::int64_t e = 0; e < embed; ++e) x[i * embed + e] = r < 0 ? T(0) : w[r * embed + e];
      }
      return;
    }
    const std::int64_t blocks = (embed + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static)
    for (std::int64_t blk = 0; blk < blocks; ++blk) {
      const std::int64_t e0 = blk * kColumnBlock, e1 = std::min(embed, e0 + kColumnBlock);
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t r = local(i);
        if (r < 0) continue;
        for (std::int64_t e = e0; e < e1; ++e) w[r * embed + e] += x[i * embed + e];
      }
    }
  });
}

void CpuBackend::do_rmsnorm_forward(const Tensor& x, const Tensor& weight, double eps,
                                    const Tensor& out, const Tensor& rstd) {
  const std::int64_t rows = x.rows(), cols = x.cols();
  dispatch(FloatTypes{}, "rmsnorm_forward", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    const T* g = weight.data<T>();
    T* po = out.data<T>();
    T* pr = rstd.data<T>();
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < rows; ++i) {
      const T* xi = px + i * cols;
      double ss = 0.0;
      for (std::int64_t e = 0; e < cols; ++e) ss += double(xi[e]) * double(xi[e]);
      const T r = T(1.0 / std::sqrt(ss / double(cols) + eps));
      pr[i] = r;
      for (std::int64_t e = 0; e < cols; ++e) po[i * cols + e] = xi[e] * r * g[e];
    }
  });
}

// y = x r g with r = (mean(x^2) + eps)^-1/2:
//   dx = r (dy g) - x r^3 mean(dy g x);   dg += sum over rows of dy x r.
void CpuBackend::do_rmsnorm_backward(const Tensor& dout, const Tensor& x, const Tensor& weight,
                                     const Tensor& rstd, const Tensor& dx, const Tensor& dweight) {
  const std::int64_t rows = x.rows(), cols = x.cols();
  dispatch(FloatTypes{}, "rmsnorm_backward", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    const T* pdy = dout.data<T>();
    const T* g = weight.data<T>();
    const T* pr = rstd.data<T>();
    T* pdx = dx.data<T>();
    T* pdg = dweight.data<T>();
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < rows; ++i) {
      const T* xi = px + i * cols;
      const T* dyi = pdy + i * cols;
      const double r = double(pr[i]);
      double dot = 0.0;  // sum_e dy g x
      for (std::int64_t e = 0; e < cols; ++e) dot += double(dyi[e]) * double(g[e]) * double(xi[e]);
      const T coef = T(r * r * r * dot / double(cols));
      for (std::int64_t e = 0; e < cols; ++e) {
        pdx[i * cols + e] = T(r) * dyi[e] * g[e] - xi[e] * coef;
      }
    }
    const std::int64_t blocks = (cols + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static)
    for (std::int64_t blk = 0; blk < blocks; ++blk) {
      const std::int64_t e0 = blk * kColumnBlock, e1 = std::min(cols, e0 + kColumnBlock);
      // Rows outer, the block's columns inner: one pass over the rows (a column at a time
      // re-read every row's cache line kColumnBlock times); each column still sums its rows in
      // order, so the bits are those of a column-at-a-time loop.
      double acc[kColumnBlock] = {};
      for (std::int64_t i = 0; i < rows; ++i) {
        const double ri = double(pr[i]);
        const T* dyi = pdy + i * cols;
        const T* xi = px + i * cols;
        for (std::int64_t e = e0; e < e1; ++e) acc[e - e0] += double(dyi[e]) * double(xi[e]) * ri;
      }
      for (std::int64_t e = e0; e < e1; ++e) pdg[e] += T(acc[e - e0]);
    }
  });
}

void CpuBackend::do_rope(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& out,
                         bool backward) {
  const std::int64_t batch = x.dim(0), seq = x.dim(1), heads = x.dim(2), hd = x.dim(3);
  const std::int64_t half = hd / 2;
  const std::int64_t rows = cos.dim(0);  // seq (row t), or batch*seq (a row per token)
  dispatch(FloatTypes{}, "rope", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    const T* pc = cos.data<T>();
    const T* ps = sin.data<T>();
    T* po = out.data<T>();
#pragma omp parallel for collapse(2) schedule(static)
    for (std::int64_t b = 0; b < batch; ++b) {
      for (std::int64_t t = 0; t < seq; ++t) {
        for (std::int64_t h = 0; h < heads; ++h) {
          const std::int64_t base = ((b * seq + t) * heads + h) * hd;
          for (std::int64_t j = 0; j < half; ++j) {
            const std::int64_t row = (b * seq + t) % rows;
            const T c = pc[row * half + j], s = ps[row * half + j];
            T y1, y2;
            if (backward) {
              math::rope_rotate_back(px[base + j], px[base + j + half], c, s, y1, y2);
            } else {
              math::rope_rotate(px[base + j], px[base + j + half], c, s, y1, y2);
            }
            po[base + j] = y1;
            po[base + j + half] = y2;
          }
        }
      }
    }
  });
}

void CpuBackend::do_swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& out) {
  dispatch(FloatTypes{}, "swiglu_forward", gate.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pg = gate.data<T>();
    const T* pu = up.data<T>();
    T* po = out.data<T>();
    const std::int64_t n = gate.numel();
    if constexpr (std::is_same_v<T, float>) {  // the vectorised sigmoid (exp_loops.h)
#pragma omp parallel for schedule(static)
      for (std::int64_t i0 = 0; i0 < n; i0 += kSwigluChunk) {
        cpu::swiglu_forward(pg + i0, pu + i0, po + i0, std::min(kSwigluChunk, n - i0));
      }
    } else {
#pragma omp parallel for schedule(static)
      for (std::int64_t i = 0; i < n; ++i) po[i] = math::swiglu(pg[i], pu[i]);
    }
  });
}

void CpuBackend::do_swiglu_backward(const Tensor& dout, const Tensor& gate, const Tensor& up,
                                    const Tensor& dgate, const Tensor& dup) {
  dispatch(FloatTypes{}, "swiglu_backward", gate.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pdy = dout.data<T>();
    const T* pg = gate.data<T>();
    const T* pu = up.data<T>();
    T* pdg = dgate.data<T>();
    T* pdu = dup.data<T>();
    const std::int64_t n = gate.numel();
    if constexpr (std::is_same_v<T, float>) {
#pragma omp parallel for schedule(static)
      for (std::int64_t i0 = 0; i0 < n; i0 += kSwigluChunk) {
        const std::int64_t len = std::min(kSwigluChunk, n - i0);
        cpu::swiglu_backward(pdy + i0, pg + i0, pu + i0, pdg + i0, pdu + i0, len);
      }
    } else {
#pragma omp parallel for schedule(static)
      for (std::int64_t i = 0; i < n; ++i) {
        T dg, du;
        math::swiglu_grad(pdy[i], pg[i], pu[i], dg, du);
        pdg[i] = dg;
        pdu[i] = du;
      }
    }
  });
}

void CpuBackend::do_gelu_forward(const Tensor& x, const Tensor& out) {
  dispatch(FloatTypes{}, "gelu_forward", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* po = out.data<T>();
    const std::int64_t n = x.numel();
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < n; ++i) po[i] = math::gelu(px[i]);
  });
}

void CpuBackend::do_gelu_backward(const Tensor& dout, const Tensor& x, const Tensor& dx) {
  dispatch(FloatTypes{}, "gelu_backward", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pdy = dout.data<T>();
    const T* px = x.data<T>();
    T* pdx = dx.data<T>();
    const std::int64_t n = x.numel();
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < n; ++i) pdx[i] = pdy[i] * math::gelu_grad(px[i]);
  });
}

// Rows scaled by, or reduced to, one value each (the MoE combine); the dot in double, in order.
void CpuBackend::do_scale_rows(const Tensor& x, const Tensor& scale, const Tensor& out) {
  const std::int64_t rows = x.rows(), cols = x.cols();
  dispatch(FloatTypes{}, "scale_rows", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    const T* ps = scale.data<T>();
    T* po = out.data<T>();
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < rows; ++i) {
      for (std::int64_t e = 0; e < cols; ++e) po[i * cols + e] = px[i * cols + e] * ps[i];
    }
  });
}

void CpuBackend::do_row_dots(const Tensor& a, const Tensor& b, const Tensor& out) {
  const std::int64_t rows = a.rows(), cols = a.cols();
  dispatch(FloatTypes{}, "row_dots", a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* po = out.data<T>();
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < rows; ++i) {
      double dot = 0.0;
      for (std::int64_t e = 0; e < cols; ++e)
        dot += double(pa[i * cols + e]) * double(pb[i * cols + e]);
      po[i] = T(dot);
    }
  });
}

}  // namespace carousel
