// fast_ops.cu — launches the fast tier's kernels (see fast_ops.h). Each op: choose the element
// type (float32 or bfloat16), the pack width V the shapes and pointers allow, the launch plan;
// check the plan against the GPU's limits (an internal error names the op and the limit); launch
// on the backend's stream and check the launch.
#include <cub/device/device_radix_sort.cuh>
#include <type_traits>
#include <utility>

#include "compute/error.h"
#include "cuda/fast/fast_kernels.cuh"
#include "cuda/fast/fast_ops.h"
#include "cuda/plans/launch_plan.h"

namespace carousel::gpu::fast {

namespace {

// fn(T{}) for the storage type of `dtype`: float or bf16 (the backend routes float64 to the
// reference kernels).
template <class Fn>
void with_storage(DType dtype, const char* op, Fn&& fn) {
  if (dtype == DType::BF16) {
    fn(bf16{});
  } else {
    CAROUSEL_ASSERT(dtype == DType::F32, "fast {}: {} reached the fast tier (float32, bfloat16)",
                    op, dtype_name(dtype));
    fn(float{});
  }
}
// fn(TIn{}, TAcc{}) for the value and accumulator storage types an accumulating op takes
// (compute/op_check.h `accumulator`): the same type, or bfloat16 values into a float32
// accumulator (bfloat16 runs keep every parameter gradient in float32).
template <class Fn>
void with_accumulator(DType values, DType accumulator, const char* op, Fn&& fn) {
  with_storage(values, op, [&](auto in) {
    using TIn = decltype(in);
    if (accumulator == values) return fn(in, in);
    CAROUSEL_ASSERT(values == DType::BF16 && accumulator == DType::F32,
                    "fast {}: a {} accumulator beside {} values reached the fast tier (the same "
                    "dtype, or float32 beside bfloat16)",
                    op, dtype_name(accumulator), dtype_name(values));
    if constexpr (std::is_same_v<TIn, bf16>) fn(in, float{});
  });
}
// fn(std::integral_constant<int, V>{}) for V = vec.
template <class Fn>
void with_vec(int vec, Fn&& fn) {
  switch (vec) {
    case 8:
      return fn(std::integral_constant<int, 8>{});
    case 4:
      return fn(std::integral_constant<int, 4>{});
    case 2:
      return fn(std::integral_constant<int, 2>{});
    default:
      return fn(std::integral_constant<int, 1>{});
  }
}

template <class Kernel, class... Args>
void launch(const char* op, const LaunchPlan& plan, const Launch& l, Kernel kernel, Args... args) {
  if (plan.grid_x == 0) return;
  const std::string over = launch_violation(plan);
  CAROUSEL_ASSERT(over.empty(), "fast {}: launch exceeds the GPU's limits: {}", op, over);
  CUDA_CHECK(cudaSetDevice(l.gpu));  // this thread may have last used another GPU
  kernel<<<dim3(unsigned(plan.grid_x), unsigned(plan.grid_y)), plan.block, 0, l.stream>>>(args...);
  CUDA_CHECK(cudaGetLastError());
}

int vec_of(const Tensor& like, std::int64_t per_row, std::initializer_list<const void*> ptrs) {
  return vector_width(per_row, dtype_size(like.dtype()), ptrs);
}
// The widest pack every tensor allows with its own element size (tensors of different dtypes:
// each must be aligned to V of its elements, and V of each at most 16 bytes). The widths each
// allows are closed downwards (1, 2, 4, 8), so the smallest maximum is the widest common one.
int common_vec(std::int64_t per_row, std::initializer_list<const Tensor*> tensors) {
  int vec = 8;
  for (const Tensor* t : tensors)
    vec = std::min(vec, vector_width(per_row, dtype_size(t->dtype()), {t->raw()}));
  return vec;
}

}  // namespace

void cast(const Launch& l, const Tensor& src, const Tensor& dst) {
  const std::int64_t n = src.numel();
  const int vec = std::min(vector_width(n, dtype_size(src.dtype()), {src.raw()}),
                           vector_width(n, dtype_size(dst.dtype()), {dst.raw()}));
  auto run = [&](auto from, auto to) {
    using From = decltype(from);
    using To = decltype(to);
    with_vec(vec, [&](auto v) {
      constexpr int V = decltype(v)::value;
      launch("cast", plan_elementwise(n, V), l, cast<From, To, V>, src.data<From>(), dst.data<To>(),
             n / V);
    });
  };
  with_storage(src.dtype(), "cast", [&](auto from) {
    with_storage(dst.dtype(), "cast", [&](auto to) { run(from, to); });
  });
}

namespace {
// out = alpha_a * a + alpha_b * b over every element (b undefined: out = alpha_a * a).
void linear(const Launch& l, const char* op, const Tensor& a, double alpha_a, const Tensor* b,
            double alpha_b, const Tensor& out) {
  const std::int64_t n = a.numel();
  const int vec = vec_of(a, n, {a.raw(), b ? b->raw() : nullptr, out.raw()});
  with_storage(a.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    with_vec(vec, [&](auto v) {
      constexpr int V = decltype(v)::value;
      launch(op, plan_elementwise(n, V), l, linear_combination<T, V>, a.data<T>(), float(alpha_a),
             b ? b->data<T>() : static_cast<const T*>(nullptr), float(alpha_b), out.data<T>(),
             n / V);
    });
  });
}
}  // namespace

void scale(const Launch& l, const Tensor& x, double alpha) {
  linear(l, "scale", x, alpha, nullptr, 0, x);
}
void axpy(const Launch& l, double alpha, const Tensor& x, const Tensor& y) {
  linear(l, "axpy", y, 1.0, &x, alpha, y);
}
void add(const Launch& l, const Tensor& a, const Tensor& b, const Tensor& out) {
  linear(l, "add", a, 1.0, &b, 1.0, out);
}

void swiglu_forward(const Launch& l, const Tensor& gate, const Tensor& up, const Tensor& out) {
  const std::int64_t n = gate.numel();
  with_storage(gate.dtype(), "swiglu_forward", [&](auto tag) {
    using T = decltype(tag);
    with_vec(vec_of(gate, n, {gate.raw(), up.raw(), out.raw()}), [&](auto v) {
      constexpr int V = decltype(v)::value;
      launch("swiglu_forward", plan_elementwise(n, V), l, fast::swiglu_forward<T, V>,
             gate.data<T>(), up.data<T>(), out.data<T>(), n / V);
    });
  });
}

void swiglu_backward(const Launch& l, const Tensor& dout, const Tensor& gate, const Tensor& up,
                     const Tensor& dgate, const Tensor& dup) {
  const std::int64_t n = gate.numel();
  const int vec = vec_of(gate, n, {dout.raw(), gate.raw(), up.raw(), dgate.raw(), dup.raw()});
  with_storage(gate.dtype(), "swiglu_backward", [&](auto tag) {
    using T = decltype(tag);
    with_vec(vec, [&](auto v) {
      constexpr int V = decltype(v)::value;
      launch("swiglu_backward", plan_elementwise(n, V), l, fast::swiglu_backward<T, V>,
             dout.data<T>(), gate.data<T>(), up.data<T>(), dgate.data<T>(), dup.data<T>(), n / V);
    });
  });
}

void rope(const Launch& l, const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& out,
          bool backward) {
  const std::int64_t half = x.dim(3) / 2, rows = x.numel() / x.dim(3);
  const int vec = vec_of(x, half, {x.raw(), out.raw()});
  with_storage(x.dtype(), "rope", [&](auto tag) {
    using T = decltype(tag);
    with_vec(vec, [&](auto v) {
      constexpr int V = decltype(v)::value;
      launch("rope", plan_elementwise(rows * half, V), l, fast::rope<T, V>, x.data<T>(),
             cos.data<float>(), sin.data<float>(), out.data<T>(), rows, cos.dim(0), x.dim(2), half,
             backward);
    });
  });
}

void adamw(const Launch& l, const Tensor& param, const Tensor& grad, const Tensor& m,
           const Tensor& v, const math::AdamWScalars& h) {
  const std::int64_t n = param.numel();
  const int vec = vec_of(param, n, {param.raw(), grad.raw(), m.raw(), v.raw()});
  with_storage(param.dtype(), "adamw_update", [&](auto tag) {
    using T = decltype(tag);
    with_vec(vec, [&](auto w) {
      constexpr int V = decltype(w)::value;
      launch("adamw_update", plan_elementwise(n, V), l, fast::adamw<T, V>, param.data<T>(),
             grad.data<T>(), m.data<T>(), v.data<T>(), n / V, h);
    });
  });
}

void embedding_forward(const Launch& l, const Tensor& table, const Tensor& tokens,
                       const Tensor& out) {
  const std::int64_t n = tokens.numel(), embed = table.dim(1);
  with_storage(table.dtype(), "embedding_forward", [&](auto tag) {
    using T = decltype(tag);
    with_vec(vec_of(table, embed, {table.raw(), out.raw()}), [&](auto v) {
      constexpr int V = decltype(v)::value;
      launch("embedding_forward", plan_rowwise(n, embed, V, 0), l, fast::embedding_forward<T, V>,
             table.data<T>(), tokens.data<std::int32_t>(), out.data<T>(), embed);
    });
  });
}

void embedding_backward(const Launch& l, const Tensor& dout, const Tensor& tokens,
                        const Tensor& dtable) {
  const std::int64_t n = tokens.numel(), embed = dtable.dim(1), vocab = dtable.dim(0);
  if (n == 0) return;
  CAROUSEL_CHECK(n <= INT32_MAX, "embedding_backward: {} tokens in one call (at most {})", n,
                 INT32_MAX);
  Backend& be = l.backend;
  // Tokens sorted stably with their positions: equal tokens end up adjacent, in position order.
  Tensor positions = be.empty({n}, DType::I32), sorted = be.empty({n}, DType::I32),
         sorted_positions = be.empty({n}, DType::I32);
  launch("embedding_backward", plan_elementwise(n, 1), l, iota, positions.data<std::int32_t>(), n);
  int key_bits = 1;
  while (key_bits < 32 && (std::int64_t(1) << key_bits) < vocab) ++key_bits;
  const auto* keys_in = reinterpret_cast<const std::uint32_t*>(tokens.raw());
  auto* keys_out = reinterpret_cast<std::uint32_t*>(sorted.raw());
  std::size_t temp_bytes = 0;
  CUDA_CHECK(cudaSetDevice(l.gpu));
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, temp_bytes, keys_in, keys_out, positions.data<std::int32_t>(),
      sorted_positions.data<std::int32_t>(), int(n), 0, key_bits, l.stream));
  Tensor temp = be.empty({std::int64_t(temp_bytes) + 1}, DType::U8);
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      temp.raw(), temp_bytes, keys_in, keys_out, positions.data<std::int32_t>(),
      sorted_positions.data<std::int32_t>(), int(n), 0, key_bits, l.stream));
  with_accumulator(dout.dtype(), dtable.dtype(), "embedding_backward", [&](auto in, auto acc) {
    using TIn = decltype(in);
    using TOut = decltype(acc);
    with_vec(common_vec(embed, {&dout, &dtable}), [&](auto v) {
      constexpr int V = decltype(v)::value;
      launch("embedding_backward", plan_rowwise(n, embed, V, 0), l,
             fast::embedding_backward_runs<TIn, TOut, V>, dout.data<TIn>(), keys_out,
             sorted_positions.data<std::int32_t>(), dtable.data<TOut>(), n, embed);
    });
  });
}

void rmsnorm_forward(const Launch& l, const Tensor& x, const Tensor& weight, double eps,
                     const Tensor& out, const Tensor& rstd) {
  const std::int64_t rows = x.rows(), cols = x.cols();
  with_storage(x.dtype(), "rmsnorm_forward", [&](auto tag) {
    using T = decltype(tag);
    with_vec(vec_of(x, cols, {x.raw(), weight.raw(), out.raw()}), [&](auto v) {
      constexpr int V = decltype(v)::value;
      launch("rmsnorm_forward", plan_rowwise(rows, cols, V, sizeof(float)), l,
             fast::rmsnorm_forward<T, V>, x.data<T>(), weight.data<T>(), out.data<T>(),
             rstd.data<float>(), cols, float(eps));
    });
  });
}

void rmsnorm_backward(const Launch& l, const Tensor& dout, const Tensor& x, const Tensor& weight,
                      const Tensor& rstd, const Tensor& dx, const Tensor& dweight) {
  const std::int64_t rows = x.rows(), cols = x.cols();
  const LaunchPlan partials = plan_column_partials(rows, cols);
  with_storage(x.dtype(), "rmsnorm_backward", [&](auto tag) {
    using T = decltype(tag);
    with_vec(vec_of(x, cols, {dout.raw(), x.raw(), weight.raw(), dx.raw()}), [&](auto v) {
      constexpr int V = decltype(v)::value;
      launch("rmsnorm_backward", plan_rowwise(rows, cols, V, sizeof(float)), l,
             fast::rmsnorm_backward_dx<T, V>, dout.data<T>(), x.data<T>(), weight.data<T>(),
             rstd.data<float>(), dx.data<T>(), cols);
    });
    if (partials.grid_x == 0) return;
    Tensor partial = l.backend.empty({partials.grid_y, cols}, DType::F32);
    launch("rmsnorm_backward", partials, l, fast::rmsnorm_dweight_partials<T>, dout.data<T>(),
           x.data<T>(), rstd.data<float>(), partial.data<float>(), rows, cols,
           partials.rows_per_chunk);
    with_accumulator(x.dtype(), dweight.dtype(), "rmsnorm_backward", [&](auto, auto acc) {
      using TOut = decltype(acc);
      launch("rmsnorm_backward", plan_elementwise(cols, 1), l, fast::add_column_partials<TOut>,
             partial.data<float>(), partials.grid_y, cols, dweight.data<TOut>());
    });
  });
}

void cross_entropy(const Launch& l, const Tensor& logits, const Tensor& targets,
                   const Tensor& losses, double dloss, const Tensor& dlogits) {
  const std::int64_t rows = logits.dim(0), vocab = logits.dim(1);
  const int vec =
      vec_of(logits, vocab, {logits.raw(), dlogits.defined() ? dlogits.raw() : nullptr});
  with_storage(logits.dtype(), "cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    with_vec(vec, [&](auto v) {
      constexpr int V = decltype(v)::value;
      launch("cross_entropy", plan_rowwise(rows, vocab, V, 2 * sizeof(float)), l,
             fast::cross_entropy<T, V>, logits.data<T>(), targets.data<std::int32_t>(),
             losses.defined() ? losses.data<float>() : nullptr,
             dlogits.defined() ? dlogits.data<T>() : nullptr, float(dloss), vocab);
    });
  });
}

double sum(const Launch& l, const Tensor& x, bool squares) {
  const std::int64_t n = x.numel();
  if (n == 0) return 0.0;
  double total = 0.0;
  with_storage(x.dtype(), squares ? "sum_squares" : "sum", [&](auto tag) {
    using T = decltype(tag);
    with_vec(vec_of(x, n, {x.raw()}), [&](auto v) {
      constexpr int V = decltype(v)::value;
      const LaunchPlan plan = plan_block_sums(n, V);
      Tensor partial = l.backend.empty({plan.grid_x}, DType::F64);
      launch(squares ? "sum_squares" : "sum", plan, l, fast::block_partial_sums<T, V>, x.data<T>(),
             n / V, squares, partial.data<double>());
      for (double p : l.backend.to_host<double>(partial)) total += p;  // in block order
    });
  });
  return total;
}

}  // namespace carousel::gpu::fast
