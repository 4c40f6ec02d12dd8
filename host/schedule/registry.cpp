// registry.cpp — the table of pipeline schedules and the checks that read it.
#include "host/schedule/registry.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "compute/error.h"
#include "host/schedule/passes.h"

namespace carousel::schedule {

namespace {

// ---- checks beyond the table's flags, one per row ---------------------------------------------

void no_more_constraints(const ScheduleSpec&) {}

void check_interleaved_1f1b(const ScheduleSpec& spec) {
  const int S = spec.layout.ranks, M = spec.layout.microbatches, g = spec.group();
  CAROUSEL_CHECK(g >= S && g <= M && M % g == 0,
                 "{} needs a microbatch group size g with S <= g <= M and M % g == "
                 "0 (S={}, M={}, g={}); set pipeline_microbatch_group_size or num_pipeline_"
                 "microbatches",
                 spec.kind, S, M, g);
}

// The V-shaped schedules run exactly two chunks per rank (down the ranks and back up) and need
// a microbatch per virtual stage: ZB-V's warmup runs 2S - 1 forwards of chunk 0 on rank 0 before
// the first backward reaches it; DualPipeV's first phase runs 2(S-1) and its steady phase
// M - 2S + r + 1 pairs on rank r (DeepSeek's DualPipeV.step() and PyTorch's ScheduleDualPipeV
// assert M >= 2S).
void check_v_shape(const ScheduleSpec& spec, const char* name, const char* why_m) {
  const int S = spec.layout.ranks, M = spec.layout.microbatches, R = spec.layout.repeats;
  CAROUSEL_CHECK(R == 2,
                 "{} runs two chunks per rank (the V: down the ranks and back up), so it needs "
                 "num_pipeline_repeats=2 (layers = 2 x S x L), got R={}",
                 name, R);
  CAROUSEL_CHECK(M >= 2 * S,
                 "{} needs num_pipeline_microbatches >= 2 x ici_pipeline_parallelism ({}), got "
                 "M={} with S={}; use M >= {}",
                 name, why_m, M, S, 2 * S);
}

void check_zbv(const ScheduleSpec& spec) {
  check_v_shape(spec, "zbv", "one per virtual stage, to fill the V");
}

void check_dualpipev(const ScheduleSpec& spec) {
  check_v_shape(spec, "dualpipev", "one per virtual stage, as DeepSeek's DualPipeV asserts");
}

// ---- closed-form idle time per rank, one per row (S ranks, M microbatches, R repeats) ----------

// gpipe, 1f1b, circular: the fill and the drain, stretched by the forward delay d.
double idle_fill_drain(const Layout& l, const Costs& c) {
  return (l.ranks - 1) * (c.forward_delay * c.f + c.b);
}

// interleaved_1f1b: the same fill and drain in chunk costs, which are already 1/R of a stage.
double idle_interleaved(const Layout& l, const Costs& c) { return (l.ranks - 1) * (c.f + c.b); }

// zb_h1 (and interleaved_zb, in chunk costs): (p-1)(t_F + t_B - t_W), t_B = the input gradient
// only, the Ws deferred into the cooldown.
double idle_zero_bubble(const Layout& l, const Costs& c) {
  return (l.ranks - 1) * (c.f + c.i - c.w);
}

// looped_bfs: the fill and the drain, plus, when M < S, a wait of (S - M) actions at each of the
// R - 1 turns from a rank's stage c S + s to its stage (c + 1) S + s, forward and backward: the
// turn needs microbatch 0 back from rank S - 1, S actions after it left, and the rank has only M
// actions of stage c S + s to run meanwhile.
double idle_looped_bfs(const Layout& l, const Costs& c) {
  const double S = l.ranks, M = l.microbatches, R = l.repeats;
  return (S - 1) * (c.f + c.b) + (R - 1) * std::max(0.0, S - M) * (c.f + c.b);
}

// zbv: at f = i = w (chunk costs) rank s waits s f for microbatch 0 to come down s ranks, then
// runs its 2M (F, I, W) back to back; rank S - 1 ends last, (S - 1) f after rank 0.
double idle_zbv(const Layout& l, const Costs& c) { return (l.ranks - 1) * c.f; }

// dualpipev: DeepSeek's table: DualPipe on PP ranks idles (PP/2 - 1)(F&B + B - 3W) per rank;
// DualPipeV folds DualPipe on PP = 2S ranks onto S, so (S - 1)(F&B + B - 3W) in chunk costs. The
// cost model runs a pair's halves one after the other (F&B = f + b) unless they take turns at
// expert exchanges (simulate.h), which this communication-free form leaves out. Exact at
// f = i = w (docs/schedules.md).
double idle_dualpipev(const Layout& l, const Costs& c) {
  return (l.ranks - 1) * (c.f + c.b + c.b - 3 * c.w);
}

// ---- the table -------------------------------------------------------------------------------

// Each row names its fields (designated initializers, in ScheduleInfo's order); a flag left out
// is off, so a row lists only what its schedule does.
constexpr ScheduleInfo kSchedules[] = {
    {.name = "circular",
     .help = "MaxText: forwards breadth-first over (repeat, microbatch), backwards reversed",
     .generate = generate_circular,
     .check = no_more_constraints,
     .idle = idle_fill_drain,
     .repeats = true,
     .forward_delay = true,
     .maxtext_table = true,
     .forwards_first = true},
    {.name = "gpipe",
     .help = "all forwards, then all backwards in reverse order; R = 1",
     .generate = generate_gpipe,
     .check = no_more_constraints,
     .idle = idle_fill_drain,
     .maxtext_table = true,
     .forwards_first = true},
    {.name = "1f1b",
     .help = "PipeDream-flush: S-s-1 warmup forwards, then one forward / one backward; R = 1",
     .generate = generate_1f1b,
     .check = no_more_constraints,
     .idle = idle_fill_drain,
     .one_device = true},
    {.name = "interleaved_1f1b",
     .help = "Megatron: R chunks per rank, microbatch groups of g; S <= g <= M, g | M",
     .generate = generate_interleaved_1f1b,
     .check = check_interleaved_1f1b,
     .idle = idle_interleaved,
     .repeats = true,
     .microbatch_groups = true},
    {.name = "zb_h1",
     .help = "Zero Bubble H1: 1f1b with B split into I and W, Ws deferred to the cooldown; R = 1",
     .generate = generate_zb_h1,
     .check = no_more_constraints,
     .idle = idle_zero_bubble},
    {.name = "looped_bfs",
     .help = "PyTorch LoopedBFS: all microbatches of each local stage in turn, backward reversed",
     .generate = generate_looped_bfs,
     .check = no_more_constraints,
     .idle = idle_looped_bfs,
     .repeats = true,
     .forwards_first = true},
    {.name = "interleaved_zb",
     .help = "interleaved_1f1b with B split into I and W, W deferred like zb_h1; "
             "S <= g <= M, g | M",
     .generate = generate_interleaved_zb,
     .check = check_interleaved_1f1b,
     .idle = idle_zero_bubble,
     .repeats = true,
     .microbatch_groups = true},
    {.name = "zbv",
     .help = "Zero Bubble V: 2 chunks per rank, down the ranks and back up, I/W split; R = 2, "
             "M >= 2S",
     .generate = generate_zbv,
     .check = check_zbv,
     .idle = idle_zbv,
     .repeats = true},
    {.name = "dualpipev",
     .help = "DeepSeek DualPipeV: zbv's V, overlapped F&B pairs of different microbatches; "
             "R = 2, M >= 2S",
     .generate = generate_dualpipev,
     .check = check_dualpipev,
     .idle = idle_dualpipev,
     .repeats = true},
};

// The names of the rows with `flag` set (every row when null): "a", "a or b", "a, b or c".
std::string names_or(bool ScheduleInfo::*flag = nullptr) {
  std::vector<std::string_view> names;
  for (const auto& row : kSchedules) {
    if (!flag || row.*flag) names.push_back(row.name);
  }
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? " or " : ", ";
    out += names[i];
  }
  return out;
}

}  // namespace

std::span<const ScheduleInfo> schedules() { return kSchedules; }

const ScheduleInfo& find_schedule(std::string_view name) {
  for (const auto& row : kSchedules) {
    if (row.name == name) return row;
  }
  fail("pipeline_schedule='{}' is not valid; use {}", name, names_or());
}

const ScheduleInfo& check_schedule_knobs(const ScheduleSpec& spec) {
  const ScheduleInfo& row = find_schedule(spec.kind);
  CAROUSEL_CHECK(spec.forward_delay == 1 || row.forward_delay,
                 "pipeline_delay_activation_forwarding applies to pipeline_schedule={}, not {}",
                 names_or(&ScheduleInfo::forward_delay), spec.kind);
  CAROUSEL_CHECK(spec.group_size == 0 || row.microbatch_groups,
                 "pipeline_microbatch_group_size applies to pipeline_schedule={}, not {} (which "
                 "would ignore it); remove it",
                 names_or(&ScheduleInfo::microbatch_groups), spec.kind);
  return row;
}

void check_schedule(const ScheduleSpec& spec) {
  const Layout& l = spec.layout;
  CAROUSEL_CHECK(l.ranks >= 1 && l.microbatches >= 1 && l.repeats >= 1,
                 "schedule needs ranks, microbatches and repeats >= 1 (got S={}, M={}, R={})",
                 l.ranks, l.microbatches, l.repeats);
  // The program and its simulation grow with S x M x R: 2^18 units took 7 s and 1.6 GB, so the
  // bound keeps `carousel schedule`, `plan` and a run's start within about 30 s and 7 GB instead
  // of running for minutes into the memory limit (S = M = 4096 never finished).
  const std::int64_t units = std::int64_t(l.ranks) * l.microbatches * l.repeats;
  CAROUSEL_CHECK(units <= kMaxScheduleUnits,
                 "the schedule has S x M x R = {} x {} x {} = {} (rank, microbatch, repeat) units, "
                 "more than the {} its generator and simulator handle (about 7 GB and 30 s "
                 "there); use fewer microbatches (num_pipeline_microbatches) or stages",
                 l.ranks, l.microbatches, l.repeats, units, kMaxScheduleUnits);
  const ScheduleInfo& row = check_schedule_knobs(spec);
  CAROUSEL_CHECK(l.repeats == 1 || row.repeats,
                 "pipeline_schedule={} runs one stage per rank (num_pipeline_repeats=1), got "
                 "R={} (R = layers / (S x num_layers_per_pipeline_stage): set "
                 "num_layers_per_pipeline_stage = layers / S, or leave it and "
                 "num_pipeline_repeats unset to have it derived); for repeats use {}",
                 spec.kind, l.repeats, names_or(&ScheduleInfo::repeats));
  CAROUSEL_CHECK(!l.outside || row.forwards_first,
                 "pipeline_parallel_layers runs the layers after the pipeline between the last "
                 "forward and the first backward, which pipeline_schedule={} interleaves; use {} "
                 "(every forward first), or pipeline every layer (pipeline_parallel_layers=-1)",
                 spec.kind, names_or(&ScheduleInfo::forwards_first));
  row.check(spec);
}

Program generate(const ScheduleSpec& spec) {
  check_schedule(spec);
  const Program program = find_schedule(spec.kind).generate(spec);
  return spec.layout.outside ? place_outside(program) : program;
}

const ScheduleInfo& one_device_schedule() {
  const ScheduleInfo* found = nullptr;
  for (const auto& row : kSchedules) {
    if (!row.one_device) continue;
    CAROUSEL_ASSERT(found == nullptr, "two schedules marked one_device: {} and {}", found->name,
                    row.name);
    found = &row;
  }
  CAROUSEL_ASSERT(found != nullptr, "no schedule is marked one_device");
  return *found;
}

double closed_form_bubble(std::string_view name, const Layout& layout, const Costs& costs) {
  const double work = double(layout.microbatches) * layout.repeats * (costs.f + costs.b);
  const double idle = find_schedule(name).idle(layout, costs);
  return idle / (work + idle);
}

std::string schedule_names(std::string_view separator) {
  std::string out;
  for (const auto& row : kSchedules) {
    if (!out.empty()) out += separator;
    out += row.name;
  }
  return out;
}

std::string schedules_help() {
  std::string out;
  for (const auto& row : kSchedules) out += fmt::format("  {:<18}{}\n", row.name, row.help);
  return out;
}

}  // namespace carousel::schedule
