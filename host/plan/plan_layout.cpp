// plan_layout.cpp — the layouts of a cluster: divisors of any device count, the pinned axes
// checked with the nearest valid values, and every candidate the pins allow (mesh, stage
// layout, schedule, M, weight mode).
#include "host/plan/plan_layout.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "compute/error.h"
#include "host/plan/plan_search.h"
#include "host/schedule/registry.h"
#include "models/stage.h"

namespace carousel::plan {

bool LayoutPins::any() const {
  return stages > 0 || fsdp > 0 || data > 0 || microbatches > 0 || repeats > 0 ||
         !weights.empty() || !stage_layers.empty() || even_stages || pipeline_layers > 0;
}

std::vector<std::int64_t> divisors(std::int64_t n) {
  CAROUSEL_ASSERT(n >= 1, "divisors of {}", n);
  std::vector<std::int64_t> low, high;
  for (std::int64_t d = 1; d * d <= n; ++d) {
    if (n % d != 0) continue;
    low.push_back(d);
    if (d != n / d) high.push_back(n / d);
  }
  low.insert(low.end(), high.rbegin(), high.rend());
  return low;
}

std::vector<std::int64_t> nearest_divisors(std::int64_t n, std::int64_t v) {
  const std::vector<std::int64_t> all = divisors(n);
  const auto above = std::lower_bound(all.begin(), all.end(), v);
  std::vector<std::int64_t> out;
  if (above != all.begin() && (above == all.end() || *above != v)) out.push_back(*(above - 1));
  if (above != all.end()) out.push_back(*above);
  return out;
}

int weight_slots_of(const std::string& weights) {
  if (weights == "per_use") return 0;
  if (weights == "bsw") return 2;
  if (weights == "once") return -1;
  fail("--weights={} is not an FSDP weight mode; use per_use (gather a stage before every use), "
       "bsw (the Buffer Sliding Window: pipeline_fsdp_ag_per_repeat=true) or once (one gather "
       "per stage and step: pipeline_fsdp_ag_once=true)",
       weights);
}

std::string weight_mode_name(const Candidate& c) {
  if (c.fsdp == 1) return "-";
  return c.weight_slots == 2 ? "bsw" : c.weight_slots == -1 ? "once" : "per_use";
}

namespace {

std::string list(const std::vector<std::int64_t>& values) {
  return fmt::format("{}", fmt::join(values, " or "));
}

// The pinned mesh axes as "--stages=2 x --data=48", and their product.
struct PinnedAxes {
  std::vector<std::pair<std::string, std::int64_t>> axes;
  std::int64_t product() const {
    std::int64_t p = 1;
    for (const auto& [flag, v] : axes) p *= v;
    return p;
  }
  std::string text() const {
    std::vector<std::string> parts;
    for (const auto& [flag, v] : axes) parts.push_back(fmt::format("{}={}", flag, v));
    return fmt::format("{}", fmt::join(parts, " x "));
  }
};

PinnedAxes pinned_axes(const Workload& w, const SearchOptions& o) {
  PinnedAxes p;
  const LayoutPins& pins = o.pins;
  // A dense model has one expert rank: --expert is pinned by the model.
  const std::int64_t expert = o.expert > 0 ? o.expert : w.model.is_moe() ? 0 : 1;
  for (const auto& [flag, v] :
       {std::pair{"--stages", pins.stages}, {"--fsdp", pins.fsdp}, {"--data", pins.data},
        {"--expert", expert}, {"--tensor", o.tensor}, {"--context", o.context}}) {
    if (v > 0) p.axes.emplace_back(flag, v);
  }
  return p;
}

// The mesh: the pinned sizes multiply to a divisor of the devices, and to them all pinned.
void check_pinned_mesh(const Workload& w, const Cluster& cluster, const SearchOptions& o) {
  const PinnedAxes p = pinned_axes(w, o);
  const std::int64_t N = cluster.devices, product = p.product();
  const bool all = p.axes.size() == 6;
  if (all ? product == N : N % product == 0) return;
  // For each pinned axis, what it would be with the others as given.
  std::vector<std::string> fixes;
  for (const auto& [flag, v] : p.axes) {
    const std::int64_t others = product / v;
    if (N % others != 0) continue;
    const std::int64_t rest = N / others;
    if (all) {
      fixes.push_back(fmt::format("{}={}", flag, rest));
    } else {
      fixes.push_back(fmt::format("{}={}", flag, list(nearest_divisors(rest, v))));
    }
  }
  fail("the pinned layout {} = {} devices {} --devices={}; {}", p.text(), product,
       all ? "differs from" : "does not divide", N,
       fixes.empty() ? fmt::format("no single pinned size can change to fit: choose sizes whose "
                                   "product {} {}",
                                   all ? "is" : "divides", N)
                     : fmt::format("nearest valid, changing one with the others as given: {}",
                                   fmt::join(fixes, "; ")));
}

// The batch: F x D x E ranks share every microbatch, sequence by sequence.
void check_pinned_batch(const Workload& w, const SearchOptions& o) {
  const LayoutPins& pins = o.pins;
  const std::int64_t B = w.global_batch;
  const std::int64_t E = o.expert > 0 ? o.expert : w.model.is_moe() ? 0 : 1;
  if (pins.fsdp > 0 && pins.data > 0 && E > 0) {
    const std::int64_t ranks = pins.fsdp * pins.data * E;
    const std::int64_t lower = B / ranks * ranks, upper = lower + ranks;
    CAROUSEL_CHECK(B % ranks == 0,
                   "a global batch of {} sequences does not split over --fsdp={} x --data={} x "
                   "--expert={} = {} ranks (each holds whole sequences); nearest valid: "
                   "--global-batch={}{}",
                   B, pins.fsdp, pins.data, E, ranks, lower > 0 ? fmt::format("{} or ", lower) : "",
                   upper);
    if (pins.microbatches > 0) {
      const std::int64_t per = B / ranks;
      CAROUSEL_CHECK(per % pins.microbatches == 0,
                     "--microbatches={} does not divide the {} sequences each of the --fsdp={} x "
                     "--data={} x --expert={} ranks holds (global batch {}); nearest valid: "
                     "--microbatches={}",
                     pins.microbatches, per, pins.fsdp, pins.data, E, B,
                     list(nearest_divisors(per, pins.microbatches)));
    }
  }
  if (pins.microbatches > 0) {
    CAROUSEL_CHECK(B % pins.microbatches == 0,
                   "--microbatches={} does not divide the global batch of {} sequences; nearest "
                   "valid: --microbatches={}",
                   pins.microbatches, B, list(nearest_divisors(B, pins.microbatches)));
  }
}

// The layers: the pipeline's P layers over S x R stages, even or as the given counts.
void check_pinned_layers(const Workload& w, const SearchOptions& o) {
  const LayoutPins& pins = o.pins;
  const std::int64_t N = w.model.num_layers;
  CAROUSEL_CHECK(pins.pipeline_layers >= 0 && pins.pipeline_layers <= N,
                 "--pipeline-layers={} is not valid: the pipeline runs 1 to {} of the model's {} "
                 "layers (the rest run after it on every stage rank)",
                 pins.pipeline_layers, N, N);
  const std::int64_t P = pins.pipeline_layers > 0 ? pins.pipeline_layers : N;
  const std::string layers = pins.pipeline_layers > 0
                                 ? fmt::format("--pipeline-layers={}", P)
                                 : fmt::format("the model's {} layers", N);
  const std::int64_t S = pins.stages;
  CAROUSEL_CHECK(S <= P, "--stages={} is more pipeline stages than {} (each stage needs a layer)",
                 S, layers);
  if (!pins.stage_layers.empty()) {
    const auto& counts = pins.stage_layers;
    std::int64_t sum = 0;
    for (const int n : counts) {
      CAROUSEL_CHECK(n >= 1, "--stage-layers={} gives a stage {} layers; each needs at least 1",
                     fmt::join(counts, ","), n);
      sum += n;
    }
    CAROUSEL_CHECK(sum == P, "--stage-layers={} adds up to {} layers, but the pipeline runs {} ({})",
                   fmt::join(counts, ","), sum, P, layers);
    const std::int64_t V = std::int64_t(counts.size());
    CAROUSEL_CHECK(S == 0 || V % S == 0,
                   "--stage-layers={} lists {} stages, which --stages={} ranks cannot hold "
                   "equally (S x R stages); nearest valid: --stages={}",
                   fmt::join(counts, ","), V, S, list(nearest_divisors(V, S)));
    CAROUSEL_CHECK(S == 0 || pins.repeats == 0 || V == S * pins.repeats,
                   "--stage-layers={} lists {} stages, but --stages={} x --repeats={} = {}; "
                   "nearest valid: --repeats={}",
                   fmt::join(counts, ","), V, S, pins.repeats, S * pins.repeats,
                   V % S == 0 ? V / S : 1);
    return;
  }
  if (S > 0 && pins.repeats > 0 && pins.even_stages) {
    CAROUSEL_CHECK(P % (S * pins.repeats) == 0,
                   "{} do not divide into --stages={} x --repeats={} = {} even stages; nearest "
                   "valid: --repeats={}{}",
                   layers, S, pins.repeats, S * pins.repeats,
                   P % S == 0 ? list(nearest_divisors(P / S, pins.repeats)) : "(none)",
                   P % S == 0 ? "" : fmt::format(", or --stages={}", list(nearest_divisors(P, S))));
  }
  if (S > 0 && pins.repeats > 0) {
    CAROUSEL_CHECK(S * pins.repeats <= P,
                   "--stages={} x --repeats={} = {} stages is more than {} (each stage needs a "
                   "layer); nearest valid: --repeats={}",
                   S, pins.repeats, S * pins.repeats, layers, std::max<std::int64_t>(1, P / S));
  }
  if (S > 0 && pins.even_stages) {
    CAROUSEL_CHECK(P % S == 0,
                   "{} do not divide into --stages={} even stages; nearest valid: --stages={}, "
                   "or uneven stages (--stage-layers)",
                   layers, S, list(nearest_divisors(P, S)));
  }
}

}  // namespace

void check_layout_pins(const Workload& w, const Cluster& cluster, const SearchOptions& o) {
  const LayoutPins& pins = o.pins;
  for (const auto& [flag, v] :
       {std::pair{"--stages", pins.stages}, {"--fsdp", pins.fsdp}, {"--data", pins.data},
        {"--microbatches", pins.microbatches}, {"--repeats", pins.repeats}}) {
    CAROUSEL_CHECK(v >= 0, "{}={} must be at least 1", flag, v);
  }
  if (!pins.weights.empty()) {
    weight_slots_of(pins.weights);
    CAROUSEL_CHECK(pins.fsdp != 1,
                   "--weights={} is an FSDP weight mode, but --fsdp=1 gathers nothing; give "
                   "--fsdp > 1 or leave --weights out",
                   pins.weights);
  }
  CAROUSEL_CHECK(pins.stage_layers.empty() || !pins.even_stages,
                 "--stage-layers gives uneven stages and asks for even ones; give one");
  check_pinned_mesh(w, cluster, o);
  check_pinned_batch(w, o);
  check_pinned_layers(w, o);
}

namespace {

// One way to lay the pipelined layers over S pipeline ranks: R repeats of even stages of L
// layers, or R repeats of uneven stages (counts).
struct StageLayout {
  int repeats = 1, layers_per_stage = 1;
  std::vector<int> counts;  // empty: even
};

std::vector<StageLayout> stage_layouts(std::int64_t N, std::int64_t S, bool one_device,
                                       double head, const LayoutPins& pins) {
  std::vector<StageLayout> out;
  if (!pins.stage_layers.empty()) {
    const std::int64_t V = std::int64_t(pins.stage_layers.size());
    if (V % S == 0) out.push_back({int(V / S), 1, pins.stage_layers});
    return out;
  }
  const auto wanted = [&](std::int64_t R) { return pins.repeats == 0 || R == pins.repeats; };
  if (N % S == 0) {
    for (const std::int64_t L : divisors(N / S)) {
      const std::int64_t R = N / (S * L);
      // One device runs the whole model as one stage (gradient accumulation), whatever the
      // keys say; a mesh of several devices with S = 1 runs R = N / L stages, which gives FSDP
      // its gather granularity.
      if ((one_device && R != 1) || !wanted(R)) continue;
      out.push_back({int(R), int(L), {}});
    }
  }
  // One pipeline rank: moving layers between its stages balances nothing.
  if (S == 1 || pins.even_stages) return out;
  for (const std::int64_t R : divisors(N)) {
    if (S * R > N || !wanted(R)) continue;
    std::vector<int> counts = balanced_stage_layers(int(N), int(S * R), head);
    const bool even =
        std::all_of(counts.begin(), counts.end(), [&](int n) { return n == counts.front(); });
    if (!even) out.push_back({int(R), 1, std::move(counts)});
  }
  return out;
}

// Expert-parallel degrees of a mesh with D data ranks: those dividing both D and the experts
// (1 for a dense model), or the one `fixed` (when it divides them).
std::vector<std::int64_t> expert_degrees(const ModelConfig& m, std::int64_t D, std::int64_t fixed) {
  std::vector<std::int64_t> out;
  for (const std::int64_t E : divisors(D)) {
    if ((fixed > 0 && E != fixed) || (E > 1 && (!m.is_moe() || m.num_experts % E != 0))) continue;
    out.push_back(E);
  }
  return out;
}

std::vector<std::int64_t> pinned_or(std::int64_t pinned, std::vector<std::int64_t> all) {
  return pinned > 0 ? std::vector<std::int64_t>{pinned} : all;
}

}  // namespace

bool for_each_layout(const Workload& w, const Cluster& cluster, const SearchOptions& options,
                     const std::function<void(const Candidate&, const MeshLinks&)>& visit) {
  const LayoutPins& pins = options.pins;
  const std::int64_t devices = cluster.devices, B = w.global_batch;
  const std::int64_t P = pins.pipeline_layers > 0 ? pins.pipeline_layers : w.model.num_layers;
  std::vector<std::string> names = options.schedules;
  if (names.empty()) {
    for (const auto& row : schedule::schedules()) names.emplace_back(row.name);
  }
  // The head runs after the pipeline with layers outside it: no stage carries it.
  const double head = P < w.model.num_layers ? 0.0 : head_layers(w.model, w.remat_policy, cluster);
  const bool one_device = devices == 1;
  // Tensor degrees inside a node that split the heads, KV heads, MLP columns and vocabulary;
  // context degrees that cut the sequence into 2C chunks (up to the node too: its key exchange is
  // per layer).
  std::vector<std::int64_t> tensors, contexts;
  const std::int64_t node = std::min(devices, std::int64_t(cluster.devices_per_node));
  for (const std::int64_t T : divisors(node)) {
    try {
      check_tensor_split(llama_twin(w.model), int(T));
      tensors.push_back(T);
    } catch (const Error&) {
    }
  }
  for (const std::int64_t C : divisors(node)) {
    if (C == 1 || w.model.max_target_length % (2 * C) == 0) contexts.push_back(C);
  }
  std::vector<int> slots_all = {0, 2, -1};
  if (!pins.weights.empty()) slots_all = {weight_slots_of(pins.weights)};
  bool batch_split = false;
  for (const std::int64_t T : pinned_or(options.tensor, tensors))
    for (const std::int64_t C : pinned_or(options.context, contexts))
      for (const std::int64_t S : pinned_or(pins.stages, divisors(devices))) {
        if (S > P || devices % (S * T * C) != 0) continue;
        const std::vector<StageLayout> layouts = stage_layouts(P, S, one_device, head, pins);
        for (const std::int64_t F : pinned_or(pins.fsdp, divisors(devices / (S * T * C)))) {
          if ((devices / (S * T * C)) % F != 0) continue;
          if (!pins.weights.empty() && F == 1) continue;  // a weight mode needs FSDP
          const std::int64_t D = devices / (S * T * C) / F;  // data ranks: replicas x experts
          if (B % (F * D) != 0) continue;
          batch_split = true;
          const MeshLinks links = mesh_links(int(S), int(F), int(D), cluster.devices_per_node,
                                             int(T), int(C));  // every candidate of this mesh
          for (const StageLayout& layout : layouts)
            for (const auto& name : names) {
              if (one_device && name != names.front()) continue;
              for (const std::int64_t M : pinned_or(pins.microbatches, divisors(B / (F * D)))) {
                if ((B / (F * D)) % M != 0) continue;
                if (options.max_microbatches > 0 && M > options.max_microbatches) continue;
                for (const std::int64_t E : expert_degrees(w.model, D, options.expert)) {
                  if (pins.data > 0 && D / E != pins.data) continue;
                  for (const int slots : F > 1 ? slots_all : std::vector<int>{0}) {
                    visit(Candidate{int(S), int(F), int(D / E), int(M), layout.repeats,
                                    layout.layers_per_stage, layout.counts,
                                    one_device ? std::string(schedule::one_device_schedule().name)
                                               : name,
                                    slots,
                                    D * C > 1 && E == 1,  // ZeRO-1 with expert ranks is not built
                                    int(T), int(C), int(E),
                                    pins.pipeline_layers > 0 ? int(P) : -1},
                          links);
                  }
                }
              }
            }
        }
      }
  return batch_split;
}

}  // namespace carousel::plan
