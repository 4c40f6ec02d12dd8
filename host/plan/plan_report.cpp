// plan_report.cpp — the table, JSON, details, --explain breakdown, launch line and progress line
// of `carousel plan` (plan_report.h).
#include "host/plan/plan_report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "compute/error.h"
#include "host/config/config.h"
#include "host/plan/plan_costs.h"

namespace carousel::plan {

namespace {

double gib(double bytes) { return bytes / double(1 << 30); }

std::string schedule_column(const Candidate& c) {
  return c.stages == 1 ? "grad-accum" : c.schedule;
}

}  // namespace

std::string layers_column(const Candidate& c) {
  if (c.stage_layers.empty()) return std::to_string(c.layers_per_stage);
  std::string out;
  for (std::size_t i = 0; i < c.stage_layers.size();) {
    std::size_t j = i;
    while (j < c.stage_layers.size() && c.stage_layers[j] == c.stage_layers[i]) ++j;
    if (!out.empty()) out += ',';
    out += j - i > 1 ? fmt::format("{}x{}", j - i, c.stage_layers[i])
                     : std::to_string(c.stage_layers[i]);
    i = j;
  }
  return out;
}

nlohmann::json candidate_json(const Prediction& p, const Workload& w,
                              const StepBreakdown* explain) {
  const Candidate& c = p.candidate;
  const MemoryBreakdown& m = p.memory;
  const nlohmann::json L =
      c.stage_layers.empty() ? nlohmann::json(c.layers_per_stage) : nlohmann::json();
  const std::int64_t sequences = w.global_batch / (std::int64_t(c.microbatches) * c.fsdp *
                                                   c.data * c.expert);
  nlohmann::json out = {
      {"S", c.stages},
      {"F", c.fsdp},
      {"D", c.data},
      {"T", c.tensor},
      {"C", c.context},
      {"E", c.expert},
      {"M", c.microbatches},
      {"R", c.repeats},
      {"L", L},
      {"stage_layers", c.stage_layers},
      {"schedule", c.schedule},
      {"weight_mode", weight_mode_name(c)},
      {"zero1", c.zero1},
      {"layout",
       {{"stages", c.stages},
        {"fsdp", c.fsdp},
        {"data", c.data},
        {"tensor", c.tensor},
        {"context", c.context},
        {"expert", c.expert},
        {"microbatches", c.microbatches},
        {"repeats", c.repeats},
        {"layers_per_stage", L},
        {"stage_layers", c.stage_layers},
        {"pipeline_layers", c.pipeline_layers > 0 ? nlohmann::json(c.pipeline_layers)
                                                  : nlohmann::json()},
        {"schedule", c.schedule},
        {"weights", weight_mode_name(c)},
        {"remat", w.remat_policy},
        {"zero1", c.zero1},
        {"dtype", w.dtype},
        {"global_batch", w.global_batch},
        {"seq_len", w.model.max_target_length},
        {"microbatch_sequences", sequences},
        {"mlp", gpt_mlp(w.model) ? "gelu" : "swiglu"}}},
      {"step_seconds", p.step_seconds},
      {"tokens_per_second", p.tokens_per_second},
      {"tflops_per_device", p.tflops_per_device},
      {"mfu", p.mfu},
      {"peak_memory_bytes", m.total()},
      {"fits", p.fits},
      {"memory_over_bytes", p.memory_over_bytes()},
      {"bubble", p.bubble},
      {"pipeline_seconds", p.pipeline_seconds},
      {"head_layers", p.head_layers},
      {"exposed_comm_seconds", p.exposed_comm_seconds},
      {"memory_bytes",
       {{"stage_rank", p.memory_stage_rank},
        {"weights", m.weights},
        {"gradients", m.gradients},
        {"optimizer", m.optimizer},
        {"weight_slots", m.weight_slots},
        {"gradient_buffers", m.gradient_buffers},
        {"activations", m.activations},
        {"working_set_bound", m.working_set},
        {"total", m.total()}}},
      {"bytes_per_step",
       {{"pipeline", p.bytes.pipeline},
        {"fsdp_gather", p.bytes.fsdp_gather},
        {"fsdp_scatter", p.bytes.fsdp_scatter},
        {"data", p.bytes.data},
        {"extras", p.bytes.extras},
        {"tensor", p.bytes.tensor},
        {"context", p.bytes.context},
        {"expert", p.bytes.expert},
        {"intra_node", p.bytes.intra},
        {"inter_node", p.bytes.inter}}},
      {"keys", p.keys}};
  if (explain) {
    const StepBreakdown& b = *explain;
    out["breakdown_seconds"] = {
        {"step", b.step},
        {"compute", b.compute},
        {"compute_by_action",
         {{"forward", b.forward},
          {"backward", b.backward},
          {"weight_gradient", b.weight_gradient},
          {"outside_pipeline_and_head", b.outside}}},
        {"busiest_stage_rank", b.busiest_rank},
        {"bubble", b.bubble},
        {"fsdp_exposed", b.fsdp},
        {"p2p_exposed", b.p2p},
        {"tensor_collectives", b.tensor},
        {"context_collectives", b.context},
        {"expert_collectives", b.expert},
        {"data_reduction", b.reductions.data},
        {"embedding_head_reduction", b.reductions.extras},
        {"stage_sum_reduction", b.reductions.stage_sum},
        {"optimizer", nullptr},
        {"not_modelled", {"optimizer (AdamW) time", "data loading", "host overheads"}}};
  }
  return out;
}

void print_table(const SearchResult& r, const Cluster& cluster) {
  fmt::print(
      "{:>2}  {:>3} {:>3} {:>3} {:>2} {:>2}  {:>4} {:>2} {:<9}  {:<16} {:<7} {:>8} {:>6} {:>5} "
      "{:>6} {:>9}  {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6}  {:>7} {:>7}\n",
      "#", "S", "F", "D", "T", "C", "M", "R", "layers", "schedule", "weights", "step s", "bubble",
      "MFU", "TF/dev", "tokens/s", "mem", "wts", "grads", "optim", "acts", "slots+gb", "work",
      "intra", "inter");
  fmt::print("{:>121}{:>16}\n", "(GiB per device)", "(GB/step)");
  for (std::size_t i = 0; i < r.best.size(); ++i) {
    const Prediction& p = r.best[i];
    const Candidate& c = p.candidate;
    const MemoryBreakdown& m = p.memory;
    fmt::print(
        "{:>2}  {:>3} {:>3} {:>3} {:>2} {:>2}  {:>4} {:>2} {:<9}  {:<16} {:<7} {:>8.4g} "
        "{:>5.1f}% {:>4.1f}% {:>6.1f} {:>9.0f}  {:>6.1f} {:>6.1f} {:>6.1f} {:>6.1f} {:>6.1f} "
        "{:>8.1f} {:>6.1f}  {:>7.2f} {:>7.2f}\n",
        i + 1, c.stages, c.fsdp,
        c.expert > 1 ? fmt::format("{}x{}", c.data, c.expert) : std::to_string(c.data), c.tensor,
        c.context, c.microbatches, c.repeats, layers_column(c), schedule_column(c),
        weight_mode_name(c), p.step_seconds, 100 * p.bubble, 100 * p.mfu, p.tflops_per_device,
        p.tokens_per_second, gib(double(m.total())), gib(double(m.weights)),
        gib(double(m.gradients)), gib(double(m.optimizer)), gib(double(m.activations)),
        gib(double(m.weight_slots + m.gradient_buffers)), gib(double(m.working_set)),
        p.bytes.intra / 1e9, p.bytes.inter / 1e9);
  }
  if (r.unfit) {
    fmt::print(
        "\nNONE OF THESE FITS in {:.1f} GiB per device: the first needs {:.1f} GiB, {:.1f} GiB "
        "more (fits: false)\n",
        gib(cluster.memory_bytes), gib(double(r.best.front().memory.total())),
        gib(r.best.front().memory_over_bytes()));
  }
}

void print_best(const Prediction& p) {
  const MemoryBreakdown& m = p.memory;
  fmt::print(
      "\n{}: memory of stage rank {}'s devices: weights {:.2f} GiB, gradients {:.2f}, "
      "AdamW moments {:.2f}, FSDP weight slots {:.2f}, FSDP gradient buffers {:.2f}, "
      "stashed activations {:.2f} (these exact), working set <= {:.2f}; total <= {:.2f} "
      "GiB{}\n",
      p.fits ? "best" : "evaluated", p.memory_stage_rank, gib(double(m.weights)),
      gib(double(m.gradients)), gib(double(m.optimizer)), gib(double(m.weight_slots)),
      gib(double(m.gradient_buffers)), gib(double(m.activations)), gib(double(m.working_set)),
      gib(double(m.total())),
      p.fits ? std::string()
             : fmt::format(" (does not fit: {:.2f} GiB over the device's {:.2f})",
                           gib(p.memory_over_bytes()), gib(p.device_memory_bytes)));
  fmt::print(
      "      bytes sent per step by the busiest device: pipeline {:.3f} GB, FSDP gathers "
      "{:.3f} GB, FSDP reduce-scatters {:.3f} GB, replicas {:.3f} GB, embedding/head "
      "{:.3f} GB, tensor group {:.3f} GB, context group {:.3f} GB; {:.3f} GB intra-node, "
      "{:.3f} GB inter-node; exposed reductions {:.3f} s\n",
      p.bytes.pipeline / 1e9, p.bytes.fsdp_gather / 1e9, p.bytes.fsdp_scatter / 1e9,
      p.bytes.data / 1e9, p.bytes.extras / 1e9, p.bytes.tensor / 1e9, p.bytes.context / 1e9,
      p.bytes.intra / 1e9, p.bytes.inter / 1e9, p.exposed_comm_seconds);
  fmt::print(
      "      step {:.4f} s = simulated schedule {:.4f} s (the head charged to the last stage "
      "as {:.2f} layers{}) + exposed reductions {:.4f} s; {:.1f} TFLOP/s per device of model "
      "FLOPs ({})\n",
      p.step_seconds, p.pipeline_seconds, p.head_layers,
      p.candidate.stage_layers.empty()
          ? std::string()
          : fmt::format("; uneven stages of [{}] layers", fmt::join(p.candidate.stage_layers, ", ")),
      p.exposed_comm_seconds, p.tflops_per_device, kFlopsConvention);
  if (p.candidate.stages == 1) {
    fmt::print(
        "      S = 1: no pipeline; the {} microbatches are gradient accumulation (each device "
        "runs them in turn and updates once)\n",
        p.candidate.microbatches);
  }
  fmt::print(
      "      keys (carousel train / carousel schedule; the schedule_cost_* are the "
      "planner's, in seconds):\n      {}\n",
      p.keys);
}

void print_explain(const Prediction& p, const StepBreakdown& b, const Workload& w) {
  auto row = [&](const char* what, double s, const std::string& note) {
    fmt::print("  {:<34} {:>10.4f} s {:>6.1f}%  {}\n", what, s, 100 * s / b.step, note);
  };
  fmt::print("\nexplain: the step of {:.4f} s, part by part (each communication part is what the "
             "step saves when it is free, in this order; plan_explain.h):\n",
             b.step);
  row("compute (busiest stage rank)", b.compute,
      fmt::format("rank {}: forward {:.4f}, backward {:.4f}{}, weight gradients {:.4f}, after "
                  "the pipeline {:.4f}; peak x efficiency, kernel floors included",
                  b.busiest_rank, b.forward, b.backward,
                  w.remat_policy == "none"
                      ? std::string()
                      : fmt::format(" (with the forward remat={} recomputes)", w.remat_policy),
                  b.weight_gradient, b.outside));
  row("pipeline bubble", b.bubble, "idle on that rank with every communication free");
  row("exposed FSDP gathers + reductions", b.fsdp, "all-gathers and reduce-scatters in the schedule");
  row("exposed pipeline p2p", b.p2p, "activation and gradient hand-offs");
  row("tensor-parallel collectives", b.tensor, "the layers' row gathers and scatters, blocking");
  row("context-parallel collectives", b.context, "key and value gathers, blocking");
  row("expert-parallel collectives", b.expert, "row counts and routed rows' exchanges");
  row("data-parallel reduction", b.reductions.data, "replicas' gradients (ZeRO-1: RS + AG)");
  row("embedding/head reduction", b.reductions.extras, "over FSDP, after the last backward");
  row("stage-rank gradient sums", b.reductions.stage_sum, "tied table, layers after the pipeline");
  fmt::print("  {:<34} {:>12}          the optimizer's own time (AdamW, memory-bound) is not "
             "modelled; nor are data loading and host overheads\n",
             "optimizer", "not modelled");
  const MemoryBreakdown& m = p.memory;
  auto mem = [&](const char* what, double bytes, const char* note) {
    fmt::print("  {:<34} {:>10.2f} GiB  {}\n", what, gib(bytes), note);
  };
  fmt::print("\nexplain: memory of stage rank {}'s devices (the rank holding the most):\n",
             p.memory_stage_rank);
  mem("weights", double(m.weights), "float32 masters (+ bf16 compute copies), exact");
  mem("gradients", double(m.gradients), "float32, exact");
  mem("AdamW moments", double(m.optimizer), "two float32 per owned element (ZeRO-1 piece), exact");
  mem("FSDP weight slots", double(m.weight_slots), "gathered stages, exact");
  mem("FSDP gradient buffers", double(m.gradient_buffers), "unsharded stage gradients, exact");
  mem("stashed activations", double(m.activations),
      "peak in-flight microbatches x what the remat policy keeps, exact count");
  mem("working set", double(m.working_set),
      "bound: receives, deferred W, backward temporaries, head logits");
  mem("total", double(m.total()),
      p.fits ? "fits" : fmt::format("does NOT fit: {:.2f} GiB over", gib(p.memory_over_bytes()))
                            .c_str());
  fmt::print("  not modelled: allocator fragmentation and caching, the CUDA context, cuBLAS/cuDNN "
             "workspaces, NCCL buffers (leave a few GiB for them)\n");
}

std::vector<std::string> launch_data_keys(const std::string& config_path) {
  LoadedConfig loaded;
  try {
    loaded = load_config(config_path, {});
  } catch (const Error& e) {
    fail("--config={}: {}", config_path, e.what());
  }
  std::vector<std::string> out;
  for (const ConfigValueSource& v : loaded.table) {
    const bool data = v.key.starts_with("dataset_") || v.key.starts_with("eval_") ||
                      v.key == "tokenizer_path" || v.key == "steps" || v.key == "packing" ||
                      v.key == "eos_id" || v.key == "enable_data_shuffling" ||
                      v.key == "data_shuffle_seed";
    if (!data || !v.source.starts_with("file")) continue;
    const bool quote = v.value.find_first_of(" \t'\"$;&|<>*?") != std::string::npos;
    out.push_back(quote ? fmt::format("'{}={}'", v.key, v.value)
                        : fmt::format("{}={}", v.key, v.value));
  }
  return out;
}

std::string launch_text(const Prediction& p, const Cluster& cluster, const Workload& w,
                        const std::vector<std::string>* data_keys) {
  if (gpt_mlp(w.model)) {
    return "\nno launch line: carousel trains the Llama block (SwiGLU MLP); the GPT-style MLP "
           "(--mlp gelu) is the planner's arithmetic only\n";
  }
  if (!p.fits) return "\nno launch line: this layout does not fit in the devices' memory\n";
  const bool has_data =
      data_keys && std::any_of(data_keys->begin(), data_keys->end(), [](const std::string& k) {
        return k.starts_with("dataset_type=") || k.starts_with("'dataset_type=");
      });
  std::string out = fmt::format(
      "\nlaunch ({} processes, {} per node, one GPU each; add your hostfile or scheduler's "
      "options):\n  mpirun -np {} --map-by ppr:{}:node build/bin/carousel train device=cuda {}",
      cluster.devices, cluster.devices_per_node, cluster.devices, cluster.devices_per_node, p.keys);
  if (data_keys && !data_keys->empty()) out += fmt::format(" {}", fmt::join(*data_keys, " "));
  out += '\n';
  if (!has_data) {
    out += fmt::format(
        "  NOTE: as printed it trains on SYNTHETIC data (dataset_type=synthetic){}: add "
        "dataset_type=tokens dataset_path=... tokenizer_path=... steps=... (docs/config.md), or "
        "give carousel plan --config FILE with those keys\n",
        data_keys ? ", the --config file sets no dataset_type" : "");
  }
  return out;
}

void print_launch(const Prediction& p, const Cluster& cluster, const Workload& w,
                  const std::vector<std::string>* data_keys) {
  fmt::print("{}", launch_text(p, cluster, w, data_keys));
}

std::string progress_line(const SearchProgress& p) {
  if (p.enumerating) {
    return fmt::format("carousel plan: {:.0f} s, listing candidates: {} valid so far ({} refused "
                       "on memory)",
                       p.elapsed_seconds, p.candidates, p.refused_memory);
  }
  std::string best = "none fits yet";
  if (p.best) {
    const Candidate& c = p.best->candidate;
    best = fmt::format("best so far {:.4g} s/step, {:.1f}% MFU: S={} F={} D={} T={} C={} E={} "
                       "M={} R={} {} {}",
                       p.best->step_seconds, 100 * p.best->mfu, c.stages, c.fsdp, c.data,
                       c.tensor, c.context, c.expert, c.microbatches, c.repeats,
                       schedule_column(c), weight_mode_name(c));
  }
  return fmt::format("carousel plan: {:.0f} s, {} of {} candidates simulated, {} pruned; {}",
                     p.elapsed_seconds, p.simulated, p.candidates, p.pruned, best);
}

}  // namespace carousel::plan
