// cmd_plan.cpp — `carousel plan`: choose the mesh (S, F, D, T, C, E), M, R, the stage layout (L
// layers each, or uneven stages), schedule and FSDP weight mode for a model on a cluster before
// spending device hours, from the device's peak or from costs a profiled run measured
// (--costs-file); or evaluate a layout the user pins, axis by axis. Reads the flags, runs the
// search (plan_search.h, printing its progress on stderr) and prints the best candidates
// (plan_report.h) as a table or JSON, with the details of the best and, with --explain, where
// its step time and memory go.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <new>
#include <nlohmann/json.hpp>

#include "compute/error.h"
#include "host/cli/commands.h"
#include "host/io/huggingface/hf_import.h"
#include "host/plan/plan_gpus.h"
#include "host/plan/plan_report.h"
#include "host/plan/plan_search.h"
#include "host/plan/plan_units.h"
#include "models/stage.h"

namespace carousel {

namespace {

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

// Ctrl-C during the search: the first stops it (plan::SearchOptions::stop), which then prints
// the best so far and exits 130; the handler goes back to the default, so a second one kills.
volatile std::sig_atomic_t g_interrupt = 0;
void on_interrupt(int) {
  g_interrupt = 1;
  std::signal(SIGINT, SIG_DFL);
}

// Exit status of a search Ctrl-C stopped (128 + SIGINT, as a shell reports it).
constexpr int kInterruptedStatus = 130;

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
  cmd.add_option("--stages", o.stages, "only this pipeline degree S")
      ->check(CLI::Range(1, 1 << 20));
  cmd.add_option("--fsdp", o.fsdp, "only this FSDP degree F")->check(CLI::Range(1, 1 << 20));
  cmd.add_option("--data", o.data, "only this data-replica degree D (not counting --expert)")
      ->check(CLI::Range(1, 1 << 20));
  cmd.add_option("--microbatches", o.microbatches, "only this microbatch count M")
      ->check(CLI::Range(std::int64_t(1), std::int64_t(1) << 40));
  cmd.add_option("--repeats", o.repeats, "only this R (stages per pipeline rank)")
      ->check(CLI::Range(1, 4096));
  cmd.add_option("--schedule", o.schedule, "only this schedule (one name; --schedules for several)");
  cmd.add_option("--weights", o.weights,
                 "only this FSDP weight mode: per_use | bsw | once (pipeline_fsdp_ag_per_repeat, "
                 "pipeline_fsdp_ag_once)");
  cmd.add_option("--stage-layers", o.stage_layers,
                 "the layers of each of the S x R stages, e.g. 1,3,3,1 (pipeline_stage_layers), "
                 "or 'even' for even stages only");
  cmd.add_option("--pipeline-layers", o.pipeline_layers,
                 "pipeline_parallel_layers: the stages split the first P layers, the rest run "
                 "after the pipeline on every stage rank (default: all pipelined)")
      ->check(CLI::Range(std::int64_t(1), std::int64_t(1) << 20));
  cmd.add_option("--mlp", o.mlp,
                 "swiglu (default: Llama's three matrices) | gelu (GPT's two matrices of the "
                 "model's MLP width, GeLU: the planner's arithmetic only, carousel cannot train it)");
  cmd.add_option("--config", o.config,
                 "a carousel YAML config: its dataset_*, eval_*, tokenizer_path and steps keys go "
                 "on the printed launch line (without it, the line says which keys to add)")
      ->check(CLI::ExistingFile);
  cmd.add_flag("--explain", o.explain,
               "break the best candidate's step time and memory down, part by part");
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

// --stage-layers: "even", or the counts "1,3,3,1".
plan::LayoutPins layout_pins(const PlanOptions& o) {
  plan::LayoutPins pins{.stages = o.stages,
                        .fsdp = o.fsdp,
                        .data = o.data,
                        .microbatches = o.microbatches,
                        .repeats = o.repeats,
                        .weights = o.weights,
                        .pipeline_layers = o.pipeline_layers};
  if (o.stage_layers == "even") {
    pins.even_stages = true;
  } else if (!o.stage_layers.empty()) {
    std::size_t at = 0;
    while (at <= o.stage_layers.size()) {
      const std::size_t comma = std::min(o.stage_layers.find(',', at), o.stage_layers.size());
      const std::string item = o.stage_layers.substr(at, comma - at);
      int n = 0;
      const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), n);
      CAROUSEL_CHECK(ec == std::errc() && end == item.data() + item.size() && n >= 1,
                     "--stage-layers='{}': '{}' is not a layer count; give each stage's layers "
                     "(e.g. 1,3,3,1) or 'even'",
                     o.stage_layers, item);
      pins.stage_layers.push_back(n);
      at = comma + 1;
    }
  }
  return pins;
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
  CAROUSEL_CHECK(o.mlp == "swiglu" || o.mlp == "gelu",
                 "--mlp={} is not valid; use swiglu (Llama's gate, up and down) or gelu (GPT's "
                 "two matrices)",
                 o.mlp);
  if (o.mlp == "gelu") {
    w.model.decoder_block = plan::kGptBlock;
    plan::llama_twin(w.model);  // dense only
  }
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

  // The launch line's data keys, read before the search (a bad file fails at once).
  std::vector<std::string> data_keys;
  if (!o.config.empty()) data_keys = plan::launch_data_keys(o.config);
  const std::vector<std::string>* data = o.config.empty() ? nullptr : &data_keys;
  CAROUSEL_CHECK(o.schedule.empty() || o.schedules.empty(),
                 "--schedule={} and --schedules={} both choose schedules; give one",
                 o.schedule, fmt::join(o.schedules, ","));
  plan::SearchOptions options{
      .top = o.top,
      .schedules = o.schedule.empty() ? o.schedules : std::vector<std::string>{o.schedule},
      .max_microbatches = o.max_microbatches,
      .tensor = o.tensor,
      .context = o.context,
      .expert = o.expert};
  options.pins = layout_pins(o);
  // A layout to evaluate is reported even when it does not fit (fits: false, by how much).
  options.report_unfit = options.pins.any() || !o.schedule.empty();
  options.progress = [](const plan::SearchProgress& p) {
    std::cerr << plan::progress_line(p) << std::endl;
  };
  options.stop = [] { return g_interrupt != 0; };
  g_interrupt = 0;
  std::signal(SIGINT, on_interrupt);
  struct RestoreSigint {
    ~RestoreSigint() { std::signal(SIGINT, SIG_DFL); }
  } restore_sigint;
  plan::SearchResult r;
  try {
    r = plan::search(w, cluster, options);
  } catch (const std::bad_alloc&) {  // beyond the search's own estimate: still one clear error
    fail(
        "carousel plan ran out of memory during its search (an allocation failed); raise the "
        "address-space limit (ulimit -v) or narrow the search: --max-microbatches, --schedules, "
        "--tensor, --context, --expert");
  }
  std::signal(SIGINT, SIG_DFL);  // the search is over: printing is not interrupted
  if (r.interrupted && r.best.empty()) {
    fmt::print(stderr,
               "carousel plan: interrupted while {} ({} candidates listed, {} simulated): no "
               "candidate simulated yet to print\n",
               r.simulated > 0 ? "simulating" : "listing candidates", r.candidates, r.simulated);
    if (o.json) {
      const nlohmann::json out = {{"interrupted", true},
                                  {"candidates", r.candidates},
                                  {"simulated", r.simulated},
                                  {"best", nlohmann::json::array()}};
      fmt::print("{}\n", out.dump(2));
    }
    return kInterruptedStatus;
  }
  if (r.best.empty()) {
    const plan::Candidate& c = r.smallest_candidate;
    fail(
        "no candidate fits in {:.1f} GiB per device: the smallest needs at least {:.1f} GiB "
        "(S={} F={} D={} T={} C={} M={}); use more devices, devices with more memory, or a "
        "smaller batch",
        cluster.memory_bytes / double(1 << 30), double(r.smallest_memory) / double(1 << 30),
        c.stages, c.fsdp, c.data,
        c.tensor, c.context, c.microbatches);
  }
  const plan::Prediction& best = r.best.front();
  plan::StepBreakdown breakdown;
  if (o.explain) {
    breakdown = plan::explain_step(
        cluster, plan::cost_candidate(cluster, best.candidate,
                                      plan::candidate_config(w, best.candidate)));
  }
  if (o.json) {
    nlohmann::json out = {
        {"costs_file", o.costs_file.empty() ? nlohmann::json() : nlohmann::json(o.costs_file)},
        {"flops_convention", plan::kFlopsConvention},
        {"device_memory_bytes", cluster.memory_bytes},
        {"candidates", r.candidates},
        {"refused_memory", r.refused_memory},
        {"refused_simulated", r.refused_simulated},
        {"simulated", r.simulated},
        {"pruned", r.pruned},
        {"fits", !r.unfit},
        {"interrupted", r.interrupted},
        {"launch_data_keys", data ? nlohmann::json(data_keys) : nlohmann::json()}};
    for (std::size_t i = 0; i < r.best.size(); ++i)
      out["best"].push_back(
          plan::candidate_json(r.best[i], w, o.explain && i == 0 ? &breakdown : nullptr));
    fmt::print("{}\n", out.dump(2));
    return r.interrupted ? kInterruptedStatus : 0;
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
      "{}{}{} on {} devices ({} per node), {:.0f} GiB, {}; global batch {} x {} tokens, {}, "
      "remat {}\n",
      o.model, o.gpu.empty() ? std::string() : fmt::format(" ({} preset)", o.gpu),
      o.mlp == "gelu" ? " with a GPT-style MLP (gelu)" : "", cluster.devices,
      cluster.devices_per_node, cluster.memory_bytes / double(1 << 30), speed, w.global_batch,
      w.model.max_target_length, w.dtype, w.remat_policy);
  if (r.interrupted) {
    fmt::print(
        "INTERRUPTED (Ctrl-C): the search stopped early; below is the best of what it simulated "
        "so far, not the search's answer\n");
  }
  fmt::print(
      "{} candidates: {} refused without simulating (their state and working set do not fit), {} "
      "simulated ({} of them refused: do not fit with activations), {} pruned by their time "
      "bound; the best per mesh (S, F, D, T, C):\n\n",
      r.candidates, r.refused_memory - r.refused_simulated, r.simulated, r.refused_simulated,
      r.pruned);
  plan::print_table(r, cluster);
  plan::print_best(best);
  if (o.explain) plan::print_explain(best, breakdown, w);
  plan::print_launch(best, cluster, w, data);
  return r.interrupted ? kInterruptedStatus : 0;
}

}  // namespace carousel
