// registry.h — the pipeline schedules, one row each: everything about a schedule that is not its
// generator's order of work lives in its row — name, one-line help, generator, constraint check,
// closed-form idle time, and flags (runs repeats, accepts the forwarding delay, accepts a
// microbatch group size, has MaxText's iteration table, runs the one-device program, runs every
// forward first). The table is the only list of schedules:
// generate(), the config validation of pipeline_schedule and its knobs
// (pipeline_delay_activation_forwarding, pipeline_microbatch_group_size), the key's help text (so
// docs/config.md), `carousel schedule` and its --help all read it; no code outside the table
// compares a schedule's name (scripts/check_architecture.py). Adding a schedule = a generator
// (generators/generators.h) and a row in registry.cpp; docs/schedules.md "Adding a schedule".
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "host/schedule/generators/generators.h"
#include "host/schedule/simulate.h"

namespace carousel::schedule {

struct ScheduleInfo {
  std::string_view name;  // the value of pipeline_schedule
  std::string_view help;  // one line: the order of work on a rank, and what it needs
  // Compute-only program; called only for specs that passed check_schedule.
  Program (*generate)(const ScheduleSpec& spec);
  // Constraints beyond the two flags below; throws carousel::Error naming the violated
  // constraint (config key and value) and what would be valid.
  void (*check)(const ScheduleSpec& spec);
  // Closed-form idle time per rank with comm-free costs and stages of equal cost (the
  // simulator covers everything else; docs/schedules.md "Closed forms" derives each).
  double (*idle)(const Layout& layout, const Costs& costs);
  // Flags, off unless a row sets them (the table names only the ones it sets).
  // Runs R > 1 stages per rank (else it needs num_pipeline_repeats = 1).
  bool repeats = false;
  // Accepts pipeline_delay_activation_forwarding (MaxText's d = 2).
  bool forward_delay = false;
  // Accepts pipeline_microbatch_group_size (Megatron's g).
  bool microbatch_groups = false;
  // Its order is MaxText's iteration table (t, stage) -> microbatch.
  bool maxtext_table = false;
  // The program of a one-device run: the whole model, microbatches in turn.
  bool one_device = false;
  // Every rank runs all its forwards before any backward, so the layers outside the pipeline
  // (Layout::outside) fit between them.
  bool forwards_first = false;
};

// Every registered schedule, in table order (the first is the default, circular).
std::span<const ScheduleInfo> schedules();

// The row called `name`; throws carousel::Error listing every registered name when none is.
const ScheduleInfo& find_schedule(std::string_view name);

// Everything generate() rejects, without generating: layout sizes >= 1, an unknown name, a
// knob of another schedule (a set knob the schedule would ignore is refused, naming the ones
// that use it), R > 1 for a schedule without repeats, the row's own check. Config
// validation calls it for runs on several devices, so `carousel train` and `carousel schedule`
// fail the same way before any math runs.
void check_schedule(const ScheduleSpec& spec);
// The largest S x M x R check_schedule accepts (the program's size grows with it).
inline constexpr std::int64_t kMaxScheduleUnits = std::int64_t(1) << 20;

// The part of check_schedule that does not depend on the layout: a registered name, and knobs
// that schedule accepts. Config validation of a one-device run, which generates no schedule.
const ScheduleInfo& check_schedule_knobs(const ScheduleSpec& spec);

// The row whose program a one-device run runs (exactly one row has one_device set).
const ScheduleInfo& one_device_schedule();

// Closed-form bubble fraction of the schedule called `name`: idle / (work + idle) per rank,
// work = M R (f + b), idle from its row. Valid for M >= S (circular, zb_h1) with comm-free costs
// and even stages (an empty stage_scale).
double closed_form_bubble(std::string_view name, const Layout& layout, const Costs& costs);

// The registered names joined by `separator` ("circular | gpipe | ..." for the key's help).
std::string schedule_names(std::string_view separator);

// One line per schedule, "  name              help", for `carousel schedule --help`.
std::string schedules_help();

}  // namespace carousel::schedule
