// float8_gemm.cpp — an operand's whole-tensor amax and its quantisation (float8_gemm.h).
#include "models/parallel/float8_gemm.h"

#include <atomic>

namespace carousel {

namespace {
std::atomic<bool> shard_local_amax{false};

void max_over(Communicator* group, const Tensor& amax) {
  if (group && group->size() > 1) group->all_reduce(amax, amax, ReduceOp::Max).wait();
}
}  // namespace

void set_float8_shard_local_amax_for_tests(bool on) { shard_local_amax = on; }

Float8Operand Float8Gemm::quantize(Backend& be, const Tensor& x, Float8Format format,
                                   Spread spread) const {
  if (!on_) return {x, 1.0f};
  Tensor amax = be.empty({1}, DType::F32);
  be.amax(x, amax);
  if (!shard_local_amax) {
    if (spread == Spread::TensorRanks || spread == Spread::Both) max_over(tensor_, amax);
    if (spread == Spread::ContextRanks || spread == Spread::Both) max_over(context_, amax);
  }
  const float scale = float8_scale(format, be.to_host<float>(amax)[0]);
  Tensor q = be.empty(x.shape(), x.dtype());
  be.quantize_float8(x, format, scale, q);
  return {q, scale};
}

}  // namespace carousel
