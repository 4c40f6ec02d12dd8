// cmd_plan.cpp — `carousel plan`: choose the mesh (S, F, D), M, R, the stage layout (L layers
// each, or uneven stages), schedule and FSDP weight mode for a model on a cluster before
// spending device hours, from the device's peak or from costs a profiled run measured
// (--costs-file). Reads the flags, runs the search (plan_search.h) and prints the best
// candidates as a table (or JSON) with the details of the best: memory per device by part, bytes
// per step by link, and the keys that run it.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <cmath>
#include <new>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "compute/error.h"
#include "host/cli/commands.h"
#include "host/io/huggingface/hf_import.h"
#include "host/plan/plan_gpus.h"
#include "host/plan/plan_search.h"
#include "host/plan/plan_units.h"
#include "models/stage.h"

namespace carousel {

namespace {

std::string weight_mode(const plan::Candidate& c) {
  if (c.fsdp == 1) return "-";
  return c.weight_slots == 2 ? "bsw" : c.weight_slots == -1 ? "once" : "per-use";
}

double gib(std::int64_t bytes) { return double(bytes) / double(1 << 30); }

// The stage layout's column: L for even stages; uneven, the counts in stage order, a run of n
// stages of k layers written nxk ("2x8,9,7" = 8, 8, 9, 7).
std::string layers_column(const plan::Candidate& c) {
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

nlohmann::json to_json(const plan::Prediction& p) {
  const plan::Candidate& c = p.candidate;
  const plan::MemoryBreakdown& m = p.memory;
  return {{"S", c.stages},
          {"F", c.fsdp},
          {"D", c.data},
          {"T", c.tensor},
          {"C", c.context},
          {"E", c.expert},
          {"M", c.microbatches},
          {"R", c.repeats},
          {"L", c.stage_layers.empty() ? nlohmann::json(c.layers_per_stage) : nlohmann::json()},
          {"stage_layers", c.stage_layers},
          {"schedule", c.schedule},
          {"weight_mode", weight_mode(c)},
          {"zero1", c.zero1},
          {"step_seconds", p.step_seconds},
          {"bubble", p.bubble},
          {"mfu", p.mfu},
          {"tokens_per_second", p.tokens_per_second},
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
            {"intra_node", p.bytes.intra},
            {"inter_node", p.bytes.inter}}},
          {"keys", p.keys}};
}

void print_table(const plan::SearchResult& r) {
  fmt::print(
      "{:>2}  {:>3} {:>3} {:>3} {:>2} {:>2}  {:>4} {:>2} {:<9}  {:<16} {:<7} {:>8} {:>6} {:>5} "
      "{:>9}  {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6}  {:>7} {:>7}\n",
      "#", "S", "F", "D", "T", "C", "M", "R", "layers", "schedule", "weights", "step s", "bubble",
      "MFU", "tokens/s", "mem", "wts", "grads", "optim", "acts", "slots+gb", "work", "intra",
      "inter");
  fmt::print("{:>114}{:>16}\n", "(GiB per device)", "(GB/step)");
  for (std::size_t i = 0; i < r.best.size(); ++i) {
    const plan::Prediction& p = r.best[i];
    const plan::Candidate& c = p.candidate;
    const plan::MemoryBreakdown& m = p.memory;
    fmt::print(
        "{:>2}  {:>3} {:>3} {:>3} {:>2} {:>2}  {:>4} {:>2} {:<9}  {:<16} {:<7} {:>8.4g} "
        "{:>5.1f}% {:>4.1f}% {:>9.0f}  {:>6.1f} {:>6.1f} {:>6.1f} {:>6.1f} {:>6.1f} {:>8.1f} "
        "{:>6.1f}  {:>7.2f} {:>7.2f}\n",
        i + 1, c.stages, c.fsdp,
        c.expert > 1 ? fmt::format("{}x{}", c.data, c.expert) : std::to_string(c.data), c.tensor,
        c.context, c.microbatches, c.repeats, layers_column(c),
        c.stages == 1 ? "grad-accum" : c.schedule, weight_mode(c), p.step_seconds, 100 * p.bubble,
        100 * p.mfu, p.tokens_per_second, gib(m.total()), gib(m.weights), gib(m.gradients),
        gib(m.optimizer), gib(m.activations), gib(m.weight_slots + m.gradient_buffers),
        gib(m.working_set), p.bytes.intra / 1e9, p.bytes.inter / 1e9);
  }
}

void print_best(const plan::Prediction& p) {
  const plan::MemoryBreakdown& m = p.memory;
  fmt::print(
      "\nbest: memory of stage rank {}'s devices: weights {:.2f} GiB, gradients {:.2f}, "
      "AdamW moments {:.2f}, FSDP weight slots {:.2f}, FSDP gradient buffers {:.2f}, "
      "stashed activations {:.2f} (these exact), working set <= {:.2f}; total <= {:.2f} "
      "GiB\n",
      p.memory_stage_rank, gib(m.weights), gib(m.gradients), gib(m.optimizer), gib(m.weight_slots),
      gib(m.gradient_buffers), gib(m.activations), gib(m.working_set), gib(m.total()));
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
      "as {:.2f} layers{}) + exposed reductions {:.4f} s\n",
      p.step_seconds, p.pipeline_seconds, p.head_layers,
      p.candidate.stage_layers.empty() ? std::string()
                                       : fmt::format("; uneven stages of [{}] layers",
                                                     fmt::join(p.candidate.stage_layers, ", ")),
      p.exposed_comm_seconds);
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

// The command that runs the best candidate: one process per device, NCCL between GPUs.
void print_launch(const plan::Prediction& p, const plan::Cluster& cluster) {
  fmt::print(
      "\nlaunch ({} processes, {} per node, one GPU each; add your hostfile or scheduler's "
      "options):\n  mpirun -np {} --map-by ppr:{}:node build/bin/carousel train device=cuda {}\n",
      cluster.devices, cluster.devices_per_node, cluster.devices, cluster.devices_per_node, p.keys);
}

// A finite number in [lo, hi] (or (lo, hi] with `open_low`): CLI::Range lets NaN through (every
// comparison with it is false), so `--compute-efficiency nan` read as the flag left out (0.6),
// `--kernel-latency-us nan` reached the search as a NaN time and `--peak-tflops inf` as an
// infinitely fast device.
CLI::Validator finite_number(double lo, double hi, bool open_low) {
  const std::string range = fmt::format("{}{}, {}]", open_low ? '(' : '[', lo, hi);
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        double v = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        const bool ok = ec == std::errc() && end == text.data() + text.size() &&
                        std::isfinite(v) && (open_low ? v > lo : v >= lo) && v <= hi;
        return ok ? std::string() : fmt::format("'{}' is not a number in {}", text, range);
      },
      "NUMBER in " + range);
}

}  // namespace

void add_plan_options(CLI::App& cmd, PlanOptions& o) {
  cmd.add_option("--model", o.model,
                 fmt::format("a model preset ({}) or a Hugging Face config.json (or its "
                             "directory)",
                             fmt::join(model_preset_names(), ", ")))
      ->required();
  cmd.add_option("--devices", o.devices, "devices in the cluster")
      ->required()
      ->check(CLI::Range(1, 1 << 20));
  cmd.add_option("--gpu", o.gpu,
                 fmt::format("a GPU preset ({}): the defaults of --device-memory, --peak-tflops "
                             "and both bandwidths (each still overridable)",
                             fmt::join(plan::gpu_preset_names(), ", ")));
  cmd.add_option("--devices-per-node", o.devices_per_node,
                 "devices per node, which share the intra-node link (default 8)")
      ->check(CLI::Range(1, 1 << 20));
  cmd.add_option("--device-memory", o.device_memory, "memory per device, e.g. 80GiB");
  cmd.add_option("--peak-tflops", o.peak_tflops,
                 "dense peak per device in the compute dtype (H100 SXM bf16: 989)")
      ->check(finite_number(0, 1e6, /*open_low=*/true));
  cmd.add_option("--intra-node-bandwidth", o.intra_node_bandwidth,
                 "per device and direction, e.g. 450GB/s (plain numbers: GB/s)");
  cmd.add_option("--inter-node-bandwidth", o.inter_node_bandwidth,
                 "per device and direction, e.g. 400Gbit/s or 50GB/s");
  cmd.add_option("--kernel-latency-us", o.kernel_latency_us,
                 "the least time a kernel launch costs in the FLOP model (default 5)")
      ->check(finite_number(0, 1e6, /*open_low=*/false));
  cmd.add_option("--message-latency-us", o.message_latency_us,
                 "the least time a p2p message or collective costs on top of its bytes (default "
                 "10)")
      ->check(finite_number(0, 1e6, /*open_low=*/false));
  cmd.add_option("--global-batch-tokens", o.global_batch_tokens,
                 "tokens per step, e.g. 4M (= 4 x 2^20); or --global-batch");
  cmd.add_option("--global-batch", o.global_batch, "sequences per step")
      ->check(CLI::Range(std::int64_t(1), std::int64_t(1) << 40));
  cmd.add_option("--seq-len", o.seq_len, "sequence length (default: the model's)")
      ->check(CLI::Range(std::int64_t(1), std::int64_t(1) << 40));
  cmd.add_option("--dtype", o.dtype, "compute dtype: bfloat16 | float32");
  cmd.add_option("--remat", o.remat,
                 "remat_policy: full | none | minimal | save_dot_with_context_except_mlp | "
                 "save_qkv_proj | save_out_proj");
  cmd.add_option("--compute-efficiency", o.compute_efficiency,
                 "fraction of the peak a layer's forward and backward reach (default 0.6)")
      ->check(finite_number(0, 1, /*open_low=*/true));
  cmd.add_option("--costs-file", o.costs_file,
                 "schedule_costs.yml a profiled run of this model wrote (profiler_steps): its "
                 "measured per-layer times, scaled to each candidate, instead of the peak x "
                 "efficiency");
  cmd.add_option("--schedules", o.schedules, "only these schedules (default: all)")->delimiter(',');
  cmd.add_option("--max-microbatches", o.max_microbatches, "at most this M (default: no limit)")
      ->check(CLI::Range(std::int64_t(1), std::int64_t(1) << 40));
  cmd.add_option("--top", o.top, "candidates to print")->check(CLI::Range(1, 1000));
  cmd.add_option("--tensor", o.tensor,
                 "only this tensor-parallel degree T (default: every T within a node that divides "
                 "the heads, KV heads and MLP columns)")
      ->check(CLI::Range(1, 4096));
  cmd.add_option("--context", o.context,
                 "only this context-parallel degree C (default: every C within a node that cuts "
                 "the sequence into 2C chunks)")
      ->check(CLI::Range(1, 4096));
  cmd.add_option("--expert", o.expert,
                 "only this expert-parallel degree E of an MoE model, carved from the data ranks "
                 "(default: every E dividing the experts and the data ranks)")
      ->check(CLI::Range(1, 4096));
  cmd.add_flag("--json", o.json, "print JSON instead of the table");
}

namespace {

// --gpu's preset fills the device flags not given; without it, all four are needed.
PlanOptions with_gpu_preset(PlanOptions o) {
  if (!o.gpu.empty()) {
    const plan::GpuPreset& g = plan::gpu_preset(o.gpu);
    if (o.device_memory.empty()) o.device_memory = g.memory;
    if (o.peak_tflops == 0) o.peak_tflops = o.dtype == "float32" ? g.fp32_tflops : g.bf16_tflops;
    if (o.intra_node_bandwidth.empty()) o.intra_node_bandwidth = g.nvlink;
    if (o.inter_node_bandwidth.empty()) o.inter_node_bandwidth = g.network;
  }
  std::vector<std::string> missing;
  if (o.device_memory.empty()) missing.emplace_back("--device-memory");
  if (o.peak_tflops == 0) missing.emplace_back("--peak-tflops");
  if (o.intra_node_bandwidth.empty()) missing.emplace_back("--intra-node-bandwidth");
  if (o.inter_node_bandwidth.empty()) missing.emplace_back("--inter-node-bandwidth");
  CAROUSEL_CHECK(missing.empty(), "carousel plan needs {}: give --gpu {} or these flags",
                 fmt::join(missing, ", "), fmt::join(plan::gpu_preset_names(), "|"));
  return o;
}

}  // namespace

int run_plan(const PlanOptions& given) {
  const PlanOptions o = with_gpu_preset(given);
  plan::Workload w;
  const bool file = o.model.find('/') != std::string::npos || o.model.ends_with(".json") ||
                    std::filesystem::exists(o.model);
  if (!file) {
    const auto names = model_preset_names();
    CAROUSEL_CHECK(std::find(names.begin(), names.end(), o.model) != names.end(),
                   "--model='{}' is neither a model preset ({}) nor a Hugging Face config.json",
                   o.model, fmt::join(names, ", "));
  }
  w.model = file ? model_from_hf_config(o.model) : model_preset(o.model);
  if (o.seq_len > 0) w.model.max_target_length = o.seq_len;
  w.model.validate();
  const ModelConfig& m = w.model;
  w.model_keys =
      file
          ? fmt::format(
                "vocab_size={} base_emb_dim={} base_num_decoder_layers={} "
                "base_num_query_heads={} base_num_kv_heads={} base_mlp_dim={} "
                "rope_max_timescale={} normalization_layer_epsilon={} "
                "logits_via_embedding={} max_target_length={}",
                m.vocab_size, m.emb_dim, m.num_layers, m.num_query_heads, m.num_kv_heads, m.mlp_dim,
                m.rope_max_timescale, m.norm_eps, m.logits_via_embedding, m.max_target_length)
          : fmt::format("model_name={} max_target_length={}", o.model, m.max_target_length);
  if (file) {  // every other model key the file sets (the experts of an MoE model, ...)
    Config with_model, defaults;
    with_model.model = m;
    for (const ConfigKey& key : config_keys()) {
      if (key.resume != ResumeClass::Model || key.name == "model_name" ||
          w.model_keys.find(key.name + "=") != std::string::npos)
        continue;
      if (key.get(with_model) != key.get(defaults))
        w.model_keys += fmt::format(" {}={}", key.name, key.get(with_model));
    }
  }
  CAROUSEL_CHECK(o.dtype == "bfloat16" || o.dtype == "float32",
                 "--dtype={} is not valid; use bfloat16 or float32", o.dtype);
  try {
    parse_remat_policy(o.remat);
  } catch (const Error& e) {
    fail("--remat: {}", e.what());
  }
  w.dtype = o.dtype;
  w.remat_policy = o.remat;
  CAROUSEL_CHECK(o.global_batch_tokens.empty() != (o.global_batch <= 0),
                 "give the global batch once: --global-batch-tokens (e.g. 4M) or --global-batch "
                 "(sequences)");
  if (!o.global_batch_tokens.empty()) {
    const double tokens = plan::parse_count("--global-batch-tokens", o.global_batch_tokens);
    const double T = double(w.model.max_target_length);
    CAROUSEL_CHECK(std::fmod(tokens, T) == 0,
                   "--global-batch-tokens={} ({} tokens) is not a whole number of sequences of "
                   "--seq-len={}",
                   o.global_batch_tokens, tokens, w.model.max_target_length);
    w.global_batch = std::int64_t(tokens / T);
  } else {
    w.global_batch = o.global_batch;
  }
  plan::Cluster cluster;
  cluster.devices = o.devices;
  cluster.devices_per_node = std::min(o.devices_per_node, o.devices);
  cluster.memory_bytes = plan::parse_bytes("--device-memory", o.device_memory);
  CAROUSEL_CHECK(o.peak_tflops > 0,
                 "--peak-tflops={} must be positive (e.g. 989 for an H100's "
                 "dense bfloat16)",
                 o.peak_tflops);
  cluster.peak_flops = o.peak_tflops * 1e12;
  cluster.intra_node_bytes_per_second =
      plan::parse_bandwidth("--intra-node-bandwidth", o.intra_node_bandwidth);
  cluster.inter_node_bytes_per_second =
      plan::parse_bandwidth("--inter-node-bandwidth", o.inter_node_bandwidth);
  const bool efficiency_given = !std::isnan(o.compute_efficiency);
  CAROUSEL_CHECK(!efficiency_given || (o.compute_efficiency > 0 && o.compute_efficiency <= 1),
                 "--compute-efficiency={} must be in (0, 1]", o.compute_efficiency);
  CAROUSEL_CHECK(!(efficiency_given && !o.costs_file.empty()),
                 "--compute-efficiency={} and --costs-file={} both set how long a layer takes; "
                 "give one (the file's measured times, or the peak x an efficiency)",
                 o.compute_efficiency, o.costs_file);
  cluster.compute_efficiency = efficiency_given ? o.compute_efficiency : 0.6;
  cluster.kernel_seconds = o.kernel_latency_us * 1e-6;
  cluster.message_seconds = o.message_latency_us * 1e-6;
  if (!o.costs_file.empty()) {
    cluster.measured = plan::read_measured_costs(o.costs_file);
    plan::check_measured_on(*cluster.measured, w.model, w.dtype, w.remat_policy);
  }

  plan::SearchOptions options{.top = o.top,
                              .schedules = o.schedules,
                              .max_microbatches = o.max_microbatches,
                              .tensor = o.tensor,
                              .context = o.context,
                              .expert = o.expert};
  plan::SearchResult r;
  try {
    r = plan::search(w, cluster, options);
  } catch (const std::bad_alloc&) {  // beyond the search's own estimate: still one clear error
    fail(
        "carousel plan ran out of memory during its search (an allocation failed); raise the "
        "address-space limit (ulimit -v) or narrow the search: --max-microbatches, --schedules, "
        "--tensor, --context, --expert");
  }
  if (r.best.empty()) {
    const plan::Candidate& c = r.smallest_candidate;
    fail(
        "no candidate fits in {:.1f} GiB per device: the smallest needs at least {:.1f} GiB "
        "(S={} F={} D={} T={} C={} M={}); use more devices, devices with more memory, or a "
        "smaller batch",
        cluster.memory_bytes / double(1 << 30), gib(r.smallest_memory), c.stages, c.fsdp, c.data,
        c.tensor, c.context, c.microbatches);
  }
  if (o.json) {
    nlohmann::json out = {
        {"costs_file", o.costs_file.empty() ? nlohmann::json() : nlohmann::json(o.costs_file)},
        {"candidates", r.candidates},
        {"refused_memory", r.refused_memory},
        {"refused_simulated", r.refused_simulated},
        {"simulated", r.simulated},
        {"pruned", r.pruned}};
    for (const auto& p : r.best) out["best"].push_back(to_json(p));
    fmt::print("{}\n", out.dump(2));
    return 0;
  }
  const std::string speed =
      cluster.measured
          ? fmt::format(
                "{} TFLOP/s peak (for MFU), costs measured on {} ({}: {:.4g} us per "
                "layer forward at {} sequence(s) per microbatch, S={} F={})",
                o.peak_tflops, cluster.measured->on.device, o.costs_file, cluster.measured->f * 1e6,
                cluster.measured->microbatch_sequences,
                cluster.measured->on.ici_pipeline_parallelism,
                cluster.measured->on.ici_fsdp_parallelism)
          : fmt::format("{} TFLOP/s x {} efficiency", o.peak_tflops, cluster.compute_efficiency);
  fmt::print(
      "{}{} on {} devices ({} per node), {:.0f} GiB, {}; global batch {} x {} tokens, {}, "
      "remat {}\n",
      o.model, o.gpu.empty() ? std::string() : fmt::format(" ({} preset)", o.gpu), cluster.devices,
      cluster.devices_per_node, cluster.memory_bytes / double(1 << 30), speed, w.global_batch,
      w.model.max_target_length, w.dtype, w.remat_policy);
  fmt::print(
      "{} candidates: {} refused without simulating (their state and working set do not fit), {} "
      "simulated ({} of them refused: do not fit with activations), {} pruned by their time "
      "bound; the best per mesh (S, F, D, T, C):\n\n",
      r.candidates, r.refused_memory - r.refused_simulated, r.simulated, r.refused_simulated,
      r.pruned);
  print_table(r);
  print_best(r.best.front());
  print_launch(r.best.front(), cluster);
  return 0;
}

}  // namespace carousel
