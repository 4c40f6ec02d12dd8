// basic.cpp — CpuBackend: construction, host transfers, BLAS-1 ops, reductions and GEMM.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "compute/bfloat16.h"
#include "compute/cpu/blas.h"
#include "compute/cpu_backend.h"
#include "compute/dispatch.h"

namespace carousel {

CpuBackend::CpuBackend(int device_index, std::size_t memory_limit_bytes)
    : Backend(std::make_unique<CpuAllocator>(device_index, memory_limit_bytes)) {}

CpuBackend::CpuBackend(std::unique_ptr<DeviceAllocator> allocator)
    : Backend(std::move(allocator)) {}

std::string CpuBackend::name() const {
  return fmt::format("cpu (OpenBLAS {} threads, OpenMP {} threads)", openblas_get_num_threads(),
                     omp_get_max_threads());
}

void CpuBackend::do_upload(const void* host, const Tensor& dst) {
  std::memcpy(dst.raw(), host, dst.nbytes());
}

void CpuBackend::do_download(const Tensor& src, void* host) {
  std::memcpy(host, src.raw(), src.nbytes());
}

void CpuBackend::do_fill(const Tensor& x, double value) {
  if (x.dtype() == DType::BF16) {
    const bf16 v = math::to_bf16(float(value));
    std::fill_n(x.data<bf16>(), x.numel(), v);
    return;
  }
  dispatch(FloatTypes{}, "fill", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* p = x.data<T>();
    const std::int64_t n = x.numel();
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < n; ++i) p[i] = T(value);
  });
}

void CpuBackend::do_copy(const Tensor& src, const Tensor& dst) {
  if (src.raw() != dst.raw()) std::memmove(dst.raw(), src.raw(), src.nbytes());
}

void CpuBackend::do_cast(const Tensor& src, const Tensor& dst) {
  dispatch(StorageTypes{}, "cast", src.dtype(), [&](auto from) {
    dispatch(StorageTypes{}, "cast", dst.dtype(), [&](auto to) {
      using From = decltype(from);
      using To = decltype(to);
      const From* s = src.data<From>();
      To* d = dst.data<To>();
      const std::int64_t n = src.numel();
#pragma omp parallel for schedule(static)
      for (std::int64_t i = 0; i < n; ++i) d[i] = math::Convert<To>::from(s[i]);
    });
  });
}

void CpuBackend::do_scale(const Tensor& x, double alpha) {
  dispatch(FloatTypes{}, "scale", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* p = x.data<T>();
    const std::int64_t n = x.numel();
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < n; ++i) p[i] *= T(alpha);
  });
}

void CpuBackend::do_axpy(double alpha, const Tensor& x, const Tensor& y) {
  dispatch(FloatTypes{}, "axpy", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* py = y.data<T>();
    const std::int64_t n = x.numel();
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < n; ++i) py[i] += T(alpha) * px[i];
  });
}

void CpuBackend::do_add(const Tensor& a, const Tensor& b, const Tensor& out) {
  dispatch(FloatTypes{}, "add", a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* po = out.data<T>();
    const std::int64_t n = a.numel();
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < n; ++i) po[i] = pa[i] + pb[i];
  });
}

// Sum in double over fixed blocks of kBlock elements, then the block sums in order: the result
// depends only on the input, not on the number of threads.
double CpuBackend::do_sum(const Tensor& x, bool squares) {
  constexpr std::int64_t kBlock = 4096;
  const std::int64_t n = x.numel();
  const std::int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(blocks, 0.0);
  dispatch(FloatTypes{}, "sum", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = x.data<T>();
#pragma omp parallel for schedule(static)
    for (std::int64_t blk = 0; blk < blocks; ++blk) {
      double acc = 0.0;
      const std::int64_t end = std::min(n, (blk + 1) * kBlock);
      for (std::int64_t i = blk * kBlock; i < end; ++i) {
        const double v = double(p[i]);
        acc += squares ? v * v : v;
      }
      partial[blk] = acc;
    }
  });
  double total = 0.0;
  for (double v : partial) total += v;
  return total;
}

// bfloat16 inputs: widened to float32, multiplied by sgemm (float32 products and sums, as the
// GPU's tensor cores do with fp32 accumulation), the result rounded if c is bfloat16.
void CpuBackend::gemm_bf16(bool trans_a, bool trans_b, const GemmDims& d, double alpha,
                           const Tensor& a, const Tensor& b, double beta, const Tensor& c) {
  auto widened = [&](const Tensor& t) {
    Tensor f = empty(t.shape(), DType::F32);
    cast(t, f);
    return f;
  };
  const Tensor fa = widened(a), fb = widened(b);
  const Tensor fc = c.dtype() == DType::F32 ? c : widened(c);
  do_gemm(trans_a, trans_b, d, alpha, fa, fb, beta, fc);
  if (c.dtype() == DType::BF16) cast(fc, c);
}

namespace {
// Rows (or columns) of C per BLAS call: at least 128, about an eighth of the dimension (each
// tile repacks the whole other operand, so fewer, larger tiles for large matrices), at most 512.
// A function of the shape alone, never of the thread count.
std::int64_t gemm_tile(std::int64_t along) {
  const std::int64_t eighth = (along + 7) / 8;
  return std::clamp<std::int64_t>((eighth + 63) / 64 * 64, 128, 512);
}
}  // namespace

void CpuBackend::do_gemm(bool trans_a, bool trans_b, const GemmDims& d, double alpha,
                         const Tensor& a, const Tensor& b, double beta, const Tensor& c) {
  if (a.dtype() == DType::BF16) return gemm_bf16(trans_a, trans_b, d, alpha, a, b, beta, c);
  dispatch(FloatTypes{}, "gemm", a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    // BLAS requires leading dimensions >= 1 even for empty matrices.
    const std::int64_t lda = std::max<std::int64_t>(1, trans_a ? d.m : d.k);
    const std::int64_t ldb = std::max<std::int64_t>(1, trans_b ? d.k : d.n);
    const std::int64_t ldc = std::max<std::int64_t>(1, d.n);
    if (d.m == 0 || d.n == 0) return;
    if (d.k == 0) {  // op(a) op(b) is all zeros: C = beta C (OpenBLAS faults on k = 0)
      T* pc = c.data<T>();
      for (std::int64_t i = 0; i < d.batch * d.m * d.n; ++i)
        pc[i] = beta == 0 ? T(0) : T(beta) * pc[i];
      return;
    }
    // OpenBLAS's own threading is not used: on some cores (its Haswell and Zen kernels) a
    // threaded sgemm rounds differently from a single-threaded one, so results would depend on
    // the thread count. Instead C is cut into tiles of gemm_tile() rows (or columns, whichever
    // dimension is longer) that depend on the shape alone, and each tile is one single-threaded
    // BLAS call (OpenBLAS's OpenMP build runs single-threaded inside a parallel region) on our
    // OpenMP threads — one tile too: outside a parallel region OpenBLAS would thread it. Rate vs
    // OpenBLAS's own threading: op_bench BM_GemmLinear vs BM_GemmOpenBlasThreaded
    // (docs/backend.md).
    const bool by_rows = d.m >= d.n;
    const std::int64_t along = by_rows ? d.m : d.n;
    // As many tiles as gemm_tile() asks for, of equal length (the last at most one shorter):
    // 688 rows are 6 x 115, not 5 x 128 + 48, so two or three threads get equal work.
    const std::int64_t wanted = gemm_tile(along);
    const std::int64_t tiles = (along + wanted - 1) / wanted;
    const std::int64_t tile = (along + tiles - 1) / tiles;
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* pc = c.data<T>();
#pragma omp parallel for schedule(static)
    for (std::int64_t job = 0; job < d.batch * tiles; ++job) {
      const std::int64_t i = job / tiles, lo = job % tiles * tile;
      const std::int64_t len = std::min(tile, along - lo);
      const T* ai = pa + i * d.m * d.k;
      const T* bi = pb + i * d.k * d.n;
      T* ci = pc + i * d.m * d.n;
      if (by_rows) {  // rows [lo, lo + len) of op(A) and C
        cpu::blas_gemm(trans_a, trans_b, len, d.n, d.k, T(alpha), ai + (trans_a ? lo : lo * lda),
                       lda, bi, ldb, T(beta), ci + lo * ldc, ldc);
      } else {  // columns [lo, lo + len) of op(B) and C
        cpu::blas_gemm(trans_a, trans_b, d.m, len, d.k, T(alpha), ai, lda,
                       bi + (trans_b ? lo * ldb : lo), ldb, T(beta), ci + lo, ldc);
      }
    }
  });
}

}  // namespace carousel
