// config_validate_pipeline.cpp — Config::validate_pipeline() and check_microbatch_split(): the
// stage layout (even S x R x L, or uneven stages and Megatron's first/last keys), layers outside
// the pipeline, the schedule by the registry's checks, and the batch's split into microbatches
// over the ranks of a stage. Each failure names the key, the value and what would be valid.
#include <fmt/ranges.h>

#include <algorithm>
#include <utility>

#include "compute/error.h"
#include "host/config/config.h"
#include "host/config/config_limits.h"
#include "host/config/schedule_config.h"
#include "host/schedule/registry.h"

namespace carousel {

namespace {

// "base_num_decoder_layers=8", or "pipeline_parallel_layers=6" when the pipeline runs only those:
// the layers the stages split, named by the key that sets them.
std::string pipelined_text(const Config& c) {
  return c.pipeline_parallel_layers == -1
             ? fmt::format("base_num_decoder_layers={}", c.model.num_layers)
             : fmt::format("pipeline_parallel_layers={}", c.pipeline_parallel_layers);
}

// pipeline_parallel_layers: how many layers the stages split; the layers after them run outside
// the pipeline (the schedule's fit is the registry's check).
void check_layers_outside(const Config& c) {
  const std::int64_t N = c.model.num_layers, P = c.pipeline_parallel_layers;
  CAROUSEL_CHECK(P == -1 || (P >= 1 && P <= N),
                 "pipeline_parallel_layers={} is not valid; give how many of the "
                 "base_num_decoder_layers={} layers the pipeline runs (1 to {}; the layers after "
                 "them run outside it, on every stage rank), or -1 for all of them",
                 P, N, N);
}

// Even stages: S x R x L = the pipelined decoder layers.
void check_even_stages(const Config& c) {
  const std::int64_t S = c.ici_pipeline_parallelism, L = c.num_layers_per_pipeline_stage;
  const std::int64_t N = c.pipelined_layers();
  const std::string layers = pipelined_text(c);
  CAROUSEL_CHECK(c.num_pipeline_repeats != -1 || N % (S * L) == 0,
                 "{} is not divisible by ici_pipeline_parallelism x "
                 "num_layers_per_pipeline_stage = {} x {}; choose S and L so that S x L divides "
                 "the layers (or give uneven stages with pipeline_stage_layers)",
                 layers, S, L);
  CAROUSEL_CHECK(S * c.repeats() * L == N,
                 "ici_pipeline_parallelism x num_pipeline_repeats x "
                 "num_layers_per_pipeline_stage = {} x {} x {} must equal "
                 "{}",
                 S, c.repeats(), L, layers);
}

// Uneven stages: pipeline_stage_layers (S x R counts, each >= 1, summing to the layers) or
// Megatron's first/last keys (the other stages split the rest evenly), never both, and not
// together with num_layers_per_pipeline_stage.
void check_uneven_stages(const Config& c) {
  const std::int64_t S = c.ici_pipeline_parallelism, R = c.repeats(), V = S * R;
  const std::int64_t N = c.pipelined_layers();
  const std::string layers = pipelined_text(c);
  const std::int64_t first = c.decoder_first_pipeline_num_layers;
  const std::int64_t last = c.decoder_last_pipeline_num_layers;
  CAROUSEL_CHECK(c.num_layers_per_pipeline_stage == 1,
                 "num_layers_per_pipeline_stage={} and uneven stages ({}) both set the layers of "
                 "a stage; keep one (the uneven layout gives every stage's count)",
                 c.num_layers_per_pipeline_stage,
                 c.pipeline_stage_layers.empty() ? "decoder_first/last_pipeline_num_layers"
                                                 : "pipeline_stage_layers");
  if (!c.pipeline_stage_layers.empty()) {
    const auto& counts = c.pipeline_stage_layers;
    const std::string text = fmt::format("[{}]", fmt::join(counts, ", "));
    CAROUSEL_CHECK(first == -1 && last == -1,
                   "pipeline_stage_layers={} and decoder_first/last_pipeline_num_layers both set "
                   "the stage layout; keep one",
                   text);
    CAROUSEL_CHECK(std::int64_t(counts.size()) == V,
                   "pipeline_stage_layers={} has {} entries, but the pipeline has "
                   "ici_pipeline_parallelism x num_pipeline_repeats = {} x {} = {} virtual stages; "
                   "give one layer count per virtual stage{}",
                   text, counts.size(), S, R, V,
                   c.num_pipeline_repeats == -1 ? " (with num_pipeline_repeats=-1, a multiple of "
                                                  "S entries sets R)"
                                                : "");
    std::int64_t sum = 0;
    for (std::size_t v = 0; v < counts.size(); ++v) {
      CAROUSEL_CHECK(counts[v] >= 1 && counts[v] <= N,
                     "pipeline_stage_layers={} gives virtual stage {} {} layers; every stage "
                     "needs between 1 and {} layers",
                     text, v, counts[v], layers);
      sum += counts[v];
    }
    CAROUSEL_CHECK(sum == N,
                   "pipeline_stage_layers={} sums to {} layers, but {}; "
                   "the counts must add up to the decoder layers",
                   text, sum, layers);
    return;
  }
  for (const auto& [key, value] : {std::pair{"decoder_first_pipeline_num_layers", first},
                                   std::pair{"decoder_last_pipeline_num_layers", last}}) {
    CAROUSEL_CHECK(value == -1 || (value >= 1 && value <= N),
                   "{}={} is not valid; give between 1 and {} layers, or "
                   "-1 for unset",
                   key, value, layers);
  }
  const std::int64_t fixed_stages = (first != -1) + (last != -1);
  const std::int64_t fixed_layers =
      std::max<std::int64_t>(first, 0) + std::max<std::int64_t>(last, 0);
  const char* key =
      first != -1 ? "decoder_first_pipeline_num_layers" : "decoder_last_pipeline_num_layers";
  const std::int64_t value = first != -1 ? first : last;
  CAROUSEL_CHECK(V >= fixed_stages + 1,
                 "{}={}: the pipeline has {} virtual stage(s) (S x R = {} x {}), too few: the "
                 "first/last stage given needs at least one other stage; raise S or R",
                 key, value, V, S, R);
  const std::int64_t rest = N - fixed_layers, others = V - fixed_stages;
  CAROUSEL_CHECK(rest >= others && rest % others == 0,
                 "{}={}: with decoder_first_pipeline_num_layers={} and "
                 "decoder_last_pipeline_num_layers={}, {} of {} layers "
                 "are left for the {} other virtual stages, which cannot split them evenly (at "
                 "least 1 each); choose counts that leave a multiple of {}, or give every stage's "
                 "count with pipeline_stage_layers",
                 key, value, first, last, rest, layers, others, others);
}

}  // namespace

void Config::validate_pipeline() const {
  const std::int64_t S = ici_pipeline_parallelism, L = num_layers_per_pipeline_stage;
  // Own ranges (validate() checks them too; `carousel schedule` may call this alone).
  check_range("ici_pipeline_parallelism", S, 1, kMaxMeshAxis);
  check_range("num_layers_per_pipeline_stage", L, 1, 4096);
  check_auto_or_range("num_pipeline_microbatches", num_pipeline_microbatches, 1, kMaxMicrobatches,
                      "= S, or 2S with the forwarding delay");
  check_auto_or_range("num_pipeline_repeats", num_pipeline_repeats, 1, 4096, "= layers / (S x L)");
  check_layers_outside(*this);
  if (uneven_stages()) {
    check_uneven_stages(*this);
  } else {
    check_even_stages(*this);
  }
  // The schedule, by the registry's checks (generate()'s messages). A run on one device runs the
  // registry's one-device program (host/config/schedule_config.cpp), not the named schedule, so
  // only the name and its knobs are checked there.
  const schedule::ScheduleSpec spec = schedule_spec(*this);
  if (num_devices() > 1) {
    schedule::check_schedule(spec);
  } else {
    schedule::check_schedule_knobs(spec);
  }
  CAROUSEL_CHECK(!(pipeline_fsdp_ag_per_repeat && pipeline_fsdp_ag_once),
                 "pipeline_fsdp_ag_per_repeat and pipeline_fsdp_ag_once are exclusive; choose one");
  CAROUSEL_CHECK(schedule_cost_w <= schedule_cost_b,
                 "schedule_cost_w={} is part of the backward and cannot exceed schedule_cost_b={}",
                 schedule_cost_w, schedule_cost_b);
}

std::int64_t Config::check_microbatch_split() const {
  CAROUSEL_CHECK(global_batch() % microbatches() == 0,
                 "num_pipeline_microbatches={} must divide the global batch {}", microbatches(),
                 global_batch());
  const std::int64_t sequences = global_batch() / microbatches();
  CAROUSEL_CHECK(sequences % (ici_fsdp_parallelism * data_ranks()) == 0,
                 "each microbatch has {} sequences (global batch {} / {} microbatches), which "
                 "ici_fsdp_parallelism x ici_data_parallelism x ici_expert_parallelism = {} x {} "
                 "x {} ranks cannot split evenly; choose a batch or microbatch count that makes "
                 "it a multiple of {}",
                 sequences, global_batch(), microbatches(), ici_fsdp_parallelism,
                 ici_data_parallelism, ici_expert_parallelism, ici_fsdp_parallelism * data_ranks());
  const std::int64_t per_rank = sequences / (ici_fsdp_parallelism * data_ranks());
  // Sequence parallelism: the T ranks of a tensor group each hold 1/T of the microbatch tokens
  // of their context rank.
  const std::int64_t tokens = per_rank * model.max_target_length / ici_context_parallelism;
  CAROUSEL_CHECK(tokens % ici_tensor_parallelism == 0,
                 "a rank's microbatch has {} sequences x max_target_length={} / "
                 "ici_context_parallelism={} = {} tokens, which ici_tensor_parallelism={} ranks "
                 "cannot split evenly (sequence parallelism); choose a max_target_length or batch "
                 "that makes it a multiple of {}",
                 per_rank, model.max_target_length, ici_context_parallelism, tokens,
                 ici_tensor_parallelism, ici_tensor_parallelism);
  return per_rank;
}

}  // namespace carousel
