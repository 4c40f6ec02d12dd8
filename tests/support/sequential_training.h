// sequential_training.h — the numerical oracle for training runs: the whole model on one CPU
// device, microbatch after microbatch through model_forward_backward, then the global norm,
// clipping and AdamW over whole parameter sets. It shares no code with the executor (the mesh,
// sharded parameters, the lowered program), only the model, the data order and the optimizer's
// arithmetic, so a run of `train()` on any mesh can be compared with it.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "compute/cpu_backend.h"
#include "host/config/config.h"
#include "host/data/data.h"
#include "host/runtime/optimizer.h"
#include "host/run/step_report.h"
#include "host/run/trainer.h"
#include "models/model.h"
#include "models/packing.h"

namespace carousel {

// Losses and gradient norms of cfg.steps steps from the initial values (no checkpoints), and
// with eval_interval the held-out loss (mean token loss of the eval batches, forward only).
inline std::vector<StepMetrics> train_sequentially(const Config& cfg) {
  CpuBackend be;
  const auto specs = param_table(cfg.model);
  const ParamSet params = ParamSet::allocate(be, specs, DType::F32);
  const ParamSet grads = ParamSet::allocate(be, specs, DType::F32);
  const AdamW opt = AdamW::create(be, specs);
  init_params(be, params, std::uint64_t(cfg.init_weights_seed));
  const bool bf16 = cfg.dtype == "bfloat16";  // compute on bf16 copies of the float32 masters
  const ParamSet compute = bf16 ? ParamSet::allocate(be, specs, DType::BF16) : params;
  const auto data = make_data_loader(cfg);
  const auto whole_rope = make_rope_tables(be, cfg.model.max_target_length, cfg.model.head_dim(),
                                           cfg.model.rope_max_timescale);
  // packing: each microbatch's document starts and RoPE rows (models/packing.h).
  const std::vector<float> cos_f = be.to_host<float>(whole_rope.cos),
                           sin_f = be.to_host<float>(whole_rope.sin);
  RopeTables packed;
  const auto rope_for = [&](const TokenBatch& tokens) -> const RopeTables& {
    if (!cfg.packing) return whole_rope;
    packed = {};
    upload_packed_rope(be, cos_f, sin_f, cfg.model.head_dim() / 2,
                       document_starts(tokens.inputs, tokens.seq_len, cfg.eos_id), tokens.seq_len,
                       packed);
    return packed;
  };
  const std::int64_t B = cfg.global_batch(), M = cfg.microbatches(), b = B / M;
  const std::int64_t T = cfg.model.max_target_length;
  const auto eval = cfg.eval_interval > 0 ? make_eval_data_loader(cfg) : nullptr;
  const ParamSet scratch = ParamSet::allocate(be, specs, DType::F32);  // eval's unused gradients
  std::vector<StepMetrics> out;
  RouterBias bias = initial_router_bias(cfg.model);  // routed_bias: moved by each step's loads
  for (std::int64_t step = 0; step < cfg.steps; ++step) {
    if (bf16) be.cast(params.flat, compute.flat);
    be.fill(grads.flat, 0.0);
    double loss_sum = 0;
    RouterStats router;  // mixture of experts: the balancing loss
    for (std::int64_t m = 0; m < M; ++m) {
      const TokenBatch tokens = data->batch(step, B, m * b, b);
      const Microbatch mb{be.from_host(tokens.inputs, {b, T}),
                          be.from_host(tokens.targets, {b, T})};
      loss_sum += model_forward_backward(be, cfg.model, compute, grads, rope_for(tokens), mb,
                                         1.0 / double(B * T), parse_remat_policy(cfg.remat_policy),
                                         &router, bias);
    }
    const double norm = global_l2_norm(be, {grads.flat});
    opt.update(be, cfg, params, grads, step, learning_rate_at(cfg, step),
               clip_scale(norm, cfg.gradient_clipping_threshold));
    update_router_bias(cfg.model, bias, router.load);
    out.push_back({.step = step,
                   .loss = loss_sum / double(B * T),
                   .grad_norm = norm,
                   .moe_lb_loss = router.aux_loss_sum / double(B * T)});
    if (const auto load = summarize_expert_load(cfg.model, {.expert_load = router.load})) {
      out.back().expert_load_min = load->min;
      out.back().expert_load_max = load->max;
    }
    if (eval && ((step + 1) % cfg.eval_interval == 0 || step + 1 == cfg.steps)) {
      if (bf16) be.cast(params.flat, compute.flat);
      const std::int64_t batches = eval_batches(cfg, *eval);
      double sum = 0;
      for (std::int64_t i = 0; i < batches; ++i) {
        for (std::int64_t m = 0; m < M; ++m) {
          const TokenBatch tokens = eval->batch(i, B, m * b, b);
          const Microbatch mb{be.from_host(tokens.inputs, {b, T}),
                              be.from_host(tokens.targets, {b, T})};
          sum += model_forward_backward(be, cfg.model, compute, scratch, rope_for(tokens), mb, 1.0,
                                        parse_remat_policy(cfg.remat_policy)) /
                 double(B * T);
        }
      }
      out.back().eval_loss = sum / double(batches);
    }
  }
  return out;
}

// A distributed run `pipe` equals the sequential run `single` of the same config: step 0's loss
// bitwise (first_rtol = 0, where the summation order allows) or within first_rtol, its gradient
// norm within max(first_rtol, 1e-6), every later loss (and with later_norms every later
// gradient norm) within 1e-4 relative; and the run trains (its last loss below its first). A
// mixture-of-experts model's balancing loss agrees like the loss (step 0 to 1e-9: the same
// routing, its per-sequence terms summed in another order), and its fewest and most tokens per
// expert exactly (in float32: a routing choice would flip only on a near-tie).
inline void expect_equal_training(const std::vector<StepMetrics>& pipe,
                                  const std::vector<StepMetrics>& single, double first_rtol,
                                  bool later_norms, double later_rtol = 1e-4) {
  ASSERT_EQ(pipe.size(), single.size());
  if (first_rtol == 0) {
    EXPECT_EQ(pipe[0].loss, single[0].loss) << "step 0 loss must be bitwise equal";
  } else {
    EXPECT_NEAR(pipe[0].loss, single[0].loss, first_rtol * single[0].loss);
  }
  const double norm_rtol = std::max(first_rtol, 1e-6);
  EXPECT_NEAR(pipe[0].grad_norm, single[0].grad_norm, norm_rtol * single[0].grad_norm);
  EXPECT_NEAR(pipe[0].moe_lb_loss, single[0].moe_lb_loss,
              std::max(first_rtol, 1e-9) * single[0].moe_lb_loss);
  for (std::size_t s = 1; s < pipe.size(); ++s)
    EXPECT_NEAR(pipe[s].moe_lb_loss, single[s].moe_lb_loss, later_rtol * single[s].moe_lb_loss);
  for (std::size_t s = 0; s < pipe.size() && later_rtol < 1e-3; ++s) {
    EXPECT_EQ(pipe[s].expert_load_min, single[s].expert_load_min) << "step " << s;
    EXPECT_EQ(pipe[s].expert_load_max, single[s].expert_load_max) << "step " << s;
  }
  for (std::size_t s = 1; s < pipe.size(); ++s) {
    EXPECT_NEAR(pipe[s].loss, single[s].loss, later_rtol * single[s].loss) << "step " << s;
    if (later_norms) {
      EXPECT_NEAR(pipe[s].grad_norm, single[s].grad_norm, later_rtol * single[s].grad_norm) << s;
    }
  }
  EXPECT_LT(pipe.back().loss, pipe.front().loss);  // it trains
}

}  // namespace carousel
