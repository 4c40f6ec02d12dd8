// cmd_schedule.cpp — `carousel schedule [config.yml] key=value ...`: look at a pipeline schedule
// before spending device hours on it. Builds the program, lowers it, proves it deadlock-free,
// simulates it with the cost model, prints per-rank instruction lists, the MaxText-style table
// (circular), bubble (predicted and closed form), memory and communication per rank, and
// writes a Chrome trace and an SVG timeline into the run directory.
//
// Memory: the program, its simulation, the listings and above all the Chrome trace (a JSON
// document, an object per action) grow with S x M x R; at the accepted bound (2^20 units) they
// need about 7.5 GB. Under an address-space or data limit (ulimit -v / -d) the need is estimated
// from the generated program before anything large is built, and a limit below it is one error
// naming both; an allocation that fails anyway is one error too, never std::terminate.
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <new>

#include "host/cli/commands.h"
#include "host/config/config.h"
#include "host/config/schedule_config.h"
#include "host/io/files.h"
#include "host/report/logging.h"
#include "host/schedule/export.h"
#include "host/schedule/generators/generators.h"
#include "host/schedule/maxtext.h"
#include "host/schedule/passes.h"
#include "host/schedule/registry.h"
#include "host/schedule/simulate.h"
#include "models/params.h"

namespace carousel {

namespace sch = schedule;

namespace {

constexpr double kMiB = 1024.0 * 1024.0;
// Measured with VmPeak (tiny model; gpipe, zb_h1, zbv, dualpipev, interleaved_zb, looped_bfs,
// circular, with and without FSDP; 2^16 and 2^17 units): 1.14 GiB before any schedule (the
// libraries and their reservations), then 2.9 KB per compute action (F, B, I, W) for all of
// them, the Chrome trace's JSON document the most; the reserve below comes on top.
constexpr double kStartBytes = 1.25 * 1024 * kMiB;
constexpr double kBytesPerComputeAction = 3072;
// Kept until an allocation fails, then freed so that unwinding can allocate: the JSON library's
// destructor allocates a stack as large as the array it frees (one slot per trace event), and an
// allocation failing in a destructor is std::terminate.
constexpr std::size_t kReserveBytes = std::size_t(96) << 20;

// The smaller of the address-space and data-segment limits, as run_setup.cpp reads them for train.
struct MemoryLimit {
  rlim_t bytes = RLIM_INFINITY;
  const char* name = "";
};
MemoryLimit memory_limit() {
  MemoryLimit limit;
  for (const auto& [resource, name] : {std::pair{RLIMIT_AS, "address-space limit (ulimit -v)"},
                                       std::pair{RLIMIT_DATA, "data-segment limit (ulimit -d)"}}) {
    rlimit lim{};
    if (getrlimit(resource, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY &&
        lim.rlim_cur < limit.bytes) {
      limit = {lim.rlim_cur, name};
    }
  }
  return limit;
}

std::string units_text(const sch::Layout& l) {
  return fmt::format("S x M x R = {} x {} x {} = {} (rank, microbatch, repeat) units", l.ranks,
                     l.microbatches, l.repeats, std::int64_t(l.ranks) * l.microbatches * l.repeats);
}

// The need of what follows the compute program, against the limit: refused before it is built.
void check_memory_limit(const sch::Program& compute, const MemoryLimit& limit) {
  if (limit.bytes == RLIM_INFINITY) return;
  std::int64_t actions = 0;
  for (const auto& rank : compute.ranks) {
    actions +=
        std::count_if(rank.begin(), rank.end(), [](const auto& a) { return a.is_compute(); });
  }
  const double need =
      kStartBytes + double(kReserveBytes) + double(actions) * kBytesPerComputeAction;
  CAROUSEL_CHECK(double(limit.bytes) >= need,
                 "the {} is {:.0f} MiB but `carousel schedule` needs about {:.0f} MiB for this "
                 "schedule ({}, {} compute actions: the program, its simulation, the listings "
                 "and the Chrome trace); raise the limit (to unlimited), or use fewer "
                 "microbatches (num_pipeline_microbatches), stages or repeats",
                 limit.name, double(limit.bytes) / kMiB, need / kMiB, units_text(compute.layout),
                 actions);
}

// Holds the reserve while installed as the new-handler (one thread: `carousel schedule` has no
// others). The first failed allocation frees it and throws std::bad_alloc.
class AllocationReserve {
 public:
  AllocationReserve() : previous_(std::set_new_handler(&release)) {
    reserve_ = std::malloc(kReserveBytes);
  }
  ~AllocationReserve() {
    std::set_new_handler(previous_);
    std::free(reserve_);
    reserve_ = nullptr;
  }
  AllocationReserve(const AllocationReserve&) = delete;
  AllocationReserve& operator=(const AllocationReserve&) = delete;

 private:
  static void release() {
    std::free(reserve_);
    reserve_ = nullptr;
    throw std::bad_alloc();
  }
  static inline void* reserve_ = nullptr;
  std::new_handler previous_;
};

int show_schedule(const Config& cfg);

}  // namespace

int run_schedule(const ConfigArgs& options) {
  std::vector<std::string> files, overrides;
  split_config_arguments(options.args, files, overrides);
  Config cfg = load_config(files, overrides).config;
  // Its files describe a config, not a training run: without a run_name they go to
  // <base_output_directory>/schedule/ (replaced by the next `carousel schedule`).
  if (cfg.run_name.empty()) cfg.run_name = "schedule";
  init_logging({.rank = 0, .level = cfg.log_level, .file_dir = {}});
  const AllocationReserve reserve;
  try {
    return show_schedule(cfg);
  } catch (const std::bad_alloc&) {
    const MemoryLimit limit = memory_limit();
    fail(
        "`carousel schedule` ran out of memory{} for pipeline_schedule={} with {}; {}use fewer "
        "microbatches (num_pipeline_microbatches), stages or repeats",
        limit.bytes == RLIM_INFINITY
            ? std::string()
            : fmt::format(" under the {} of {:.0f} MiB", limit.name, double(limit.bytes) / kMiB),
        cfg.pipeline_schedule, units_text(schedule_spec(cfg).layout),
        limit.bytes == RLIM_INFINITY ? "" : "raise the limit (to unlimited), or ");
  }
}

namespace {

int show_schedule(const Config& cfg) {
  const sch::ScheduleSpec spec = schedule_spec(cfg);
  const sch::Layout& l = spec.layout;
  const bool fsdp = cfg.ici_fsdp_parallelism > 1;
  const sch::Program compute = sch::generate(spec);
  check_memory_limit(compute, memory_limit());
  sch::validate(compute);
  const sch::StageLayers layers(cfg.stage_layer_counts());
  const sch::Program lowered = sch::place_exchanges(
      sch::lower(compute, {cfg.weight_slots(), int(cfg.pipeline_prefetch_lookahead), fsdp}),
      exchanging_layers(cfg, layers));
  sch::replay(lowered);
  const sch::Costs costs = schedule_costs(cfg, layers);
  const sch::SimResult sim = sch::simulate(lowered, costs);

  fmt::print(
      "schedule {}: S={} ranks, R={} repeats, M={} microbatches, {} layers/stage, "
      "{} virtual stages; FSDP F={}{}\n",
      spec.kind, l.ranks, l.repeats, l.microbatches,
      layers.is_even() ? fmt::format("L={}", layers.count(0))
                       : fmt::format("uneven {}", layers.to_string()),
      l.stages(), cfg.ici_fsdp_parallelism,
      fsdp ? fmt::format(", weight slots {}", cfg.weight_slots() == -1  ? "one per stage"
                                              : cfg.weight_slots() == 2 ? "2 (BSW)"
                                                                        : "0 (every use)")
           : std::string());
  std::int64_t layer_params = 0;  // one decoder layer's parameters
  for (const auto& p : param_table(cfg.model)) layer_params += p.layer == 0 ? numel(p.shape) : 0;
  {
    // The logits GEMM does 2 V E FLOPs per token, a layer's GEMMs 2 x its parameters (the
    // attention's T^2 terms aside): the head costs about V E / layer parameters layers.
    const double head_layers =
        double(cfg.model.vocab_size) * double(cfg.model.emb_dim) / double(layer_params);
    fmt::print(
        "head (logits + loss) costs about {:.2f} layers of this model; the cost model "
        "charges schedule_cost_head={} layers to {}\n",
        head_layers, cfg.schedule_cost_head, l.outside ? "each OUTSIDE action" : "the last stage");
  }
  const std::int64_t outside_layers = cfg.model.num_layers - layers.layers();
  if (l.outside) {
    fmt::print(
        "layers {}-{} run outside the pipeline (pipeline_parallel_layers={}): after the last "
        "stage, on every rank, microbatch m on rank m % S, with the final norm and the head "
        "(the OUTSIDE actions, stage {})\n",
        layers.layers(), cfg.model.num_layers - 1, cfg.pipeline_parallel_layers, l.stages());
  }
  if (!layers.is_even()) {
    fmt::print("stage layout (costs scale with each stage's layers):\n");
    for (int v = 0; v < layers.stages(); ++v) {
      fmt::print(
          "  stage {:>3} on rank {:>3}: {} layer(s), {}{}\n", v, l.rank_of(v), layers.count(v),
          layers.count(v) == 1
              ? fmt::format("L{}", layers.first(v))
              : fmt::format("L{}-{}", layers.first(v), layers.first(v) + layers.count(v) - 1),
          v == 0                                            ? " + embedding"
          : v == layers.stages() - 1 && outside_layers == 0 ? " + final norm, head"
                                                            : "");
    }
  }
  fmt::print("validated; deadlock replay passed\n\nper-rank instructions:\n{}\n",
             sch::to_text(lowered));
  std::string pairs;  // overlapped F&B pairs per rank, when the schedule has any (dualpipev)
  for (int r = 0; r < l.ranks; ++r) {
    const auto& list = lowered.ranks[std::size_t(r)];
    const auto n = std::count_if(list.begin(), list.end(), [](const auto& a) { return a.overlap; });
    if (n > 0) pairs += fmt::format("{}rank {}: {}", pairs.empty() ? "" : ", ", r, n);
  }
  if (!pairs.empty()) {
    fmt::print(
        "overlapped F&B pairs (0F4& runs with the rank's next compute action, both inputs "
        "received first; with expert exchanges (A2A) the halves take turns at them, else back "
        "to back): {}\n\n",
        pairs);
  }
  if (sch::find_schedule(spec.kind).maxtext_table) {
    const int d = costs.forward_delay;
    fmt::print("MaxText iteration table (t, stage) -> microbatch/repeat (layers){}:\n{}\n",
               cfg.pipeline_fsdp_ag_per_repeat ? ", BSW slot read" : "",
               sch::format_circular_table(
                   sch::circular_table(l.ranks, l.microbatches, l.repeats, d, layers),
                   cfg.pipeline_fsdp_ag_per_repeat));
  }
  if (costs.stage_scale.empty() && !l.outside) {
    const double closed = sch::closed_form_bubble(spec.kind, l, costs);
    fmt::print("step time {:.3f} (cost units); bubble predicted {:.1f}%, closed form {:.1f}%{}\n",
               sim.step_time, 100 * sim.bubble_fraction, 100 * closed,
               costs.p2p > 0 || costs.all_gather > 0 || costs.reduce_scatter > 0
                   ? " (closed form ignores communication)"
                   : "");
  } else {  // the closed forms assume stages of equal cost
    fmt::print(
        "step time {:.3f} (cost units); bubble predicted {:.1f}% (no closed form for "
        "{})\n",
        sim.step_time, 100 * sim.bubble_fraction,
        l.outside ? "layers outside the pipeline" : "stages of unequal cost");
  }
  // Bytes: a stage's weights in fp32 (its layers' worth); a gather moves (F-1)/F of them into
  // each rank.
  const double fraction_moved =
      double(cfg.ici_fsdp_parallelism - 1) / double(cfg.ici_fsdp_parallelism);
  std::vector<double> gathered_bytes(std::size_t(l.ranks), 0.0);
  for (int r = 0; r < l.ranks; ++r) {
    for (const auto& a : lowered.ranks[std::size_t(r)]) {
      if (a.kind != sch::Kind::AG_ISSUE) continue;
      gathered_bytes[std::size_t(r)] +=
          4.0 * double(layer_params * layers.count(a.stage)) * fraction_moved;
    }
  }
  fmt::print("\n{:>4} {:>8} {:>12} {:>14} {:>12} {:>11} {:>11} {:>14}\n", "rank", "busy",
             "peak acts", "(x A/microbatch)", "weight slots", "all-gathers", "red-scatters",
             "AG bytes/step");
  for (int r = 0; r < l.ranks; ++r) {
    fmt::print("{:>4} {:>8.2f} {:>12} {:>14.3f} {:>12} {:>11} {:>11} {:>14}\n", r, sim.busy[r],
               sim.peak_activations[r], double(sim.peak_activations[r]) / l.stages(),
               sim.peak_weight_slots[r], sim.all_gathers[r], sim.reduce_scatters[r],
               format_bytes(std::size_t(gathered_bytes[std::size_t(r)])));
  }
  const std::filesystem::path dir(cfg.run_directory());
  std::filesystem::create_directories(dir);
  // Opened as every output is (host/io/files.h): a symlink or FIFO at one of these names is
  // refused, never written through or waited on.
  write_text_file(dir / "schedule.trace.json", sch::chrome_trace_json(sim, l.ranks, 1000.0),
                  "schedule trace", dir);
  write_text_file(
      dir / "schedule.svg",
      sch::timeline_svg(sim, l.ranks,
                        fmt::format("{} S={} R={} M={}: bubble {:.1f}%", spec.kind, l.ranks,
                                    l.repeats, l.microbatches, 100 * sim.bubble_fraction)),
      "schedule timeline", dir);
  write_text_file(dir / "schedule.txt", sch::to_text(lowered), "schedule listing", dir);
  fmt::print(
      "\nwrote {0}/schedule.trace.json (chrome://tracing, Perfetto), {0}/schedule.svg, "
      "{0}/schedule.txt\n",
      dir.string());
  return 0;
}

}  // namespace

}  // namespace carousel
