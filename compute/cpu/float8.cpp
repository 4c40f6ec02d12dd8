// float8.cpp — CpuBackend's float8 ops (backend.h: amax, quantize_float8) on the shared scalar
// code of compute/float8/float8.h, which the CUDA kernels use too: the same bits on both.
#include "compute/float8/float8.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "compute/cpu_backend.h"
#include "compute/dispatch.h"

namespace carousel {

// Fixed blocks of 4096 elements, each block's amax on one thread, then the blocks' in order:
// a max is exact, so this only keeps the work split independent of the thread count.
void CpuBackend::do_amax(const Tensor& x, const Tensor& out) {
  constexpr std::int64_t kBlock = 4096;
  const std::int64_t n = x.numel(), blocks = (n + kBlock - 1) / kBlock;
  std::vector<float> partial(std::size_t(blocks), 0.0f);
  dispatch(StorageTypes{}, "amax", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = x.data<T>();
#pragma omp parallel for schedule(static)
    for (std::int64_t blk = 0; blk < blocks; ++blk) {
      float m = 0.0f;
      const std::int64_t end = std::min(n, (blk + 1) * kBlock);
      for (std::int64_t i = blk * kBlock; i < end; ++i)
        m = math::amax_combine(m, float(std::fabs(math::Convert<double>::from(p[i]))));
      partial[std::size_t(blk)] = m;
    }
  });
  float m = 0.0f;
  for (const float v : partial) m = math::amax_combine(m, v);
  out.data<float>()[0] = m;
}

void CpuBackend::do_quantize_float8(const Tensor& x, Float8Format format, float scale,
                                    const Tensor& out) {
  dispatch(StorageTypes{}, "quantize_float8", x.dtype(), [&](auto from) {
    dispatch(StorageTypes{}, "quantize_float8", out.dtype(), [&](auto to) {
      using From = decltype(from);
      using To = decltype(to);
      const From* s = x.data<From>();
      To* d = out.data<To>();
      const std::int64_t n = x.numel();
#pragma omp parallel for schedule(static)
      for (std::int64_t i = 0; i < n; ++i) {
        const float v = math::float8_quantize(math::Convert<float>::from(s[i]), scale, format);
        d[i] = math::Convert<To>::from(v);  // exact: a float8 value is a bfloat16 value
      }
    });
  });
}

}  // namespace carousel
