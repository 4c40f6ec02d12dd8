// registry.h — the pipeline schedules, one row each: name, one-line help, generator, constraint
// check and two flags (runs repeats, accepts the forwarding delay). The table is the only list of
// schedules: generate(), the config validation of pipeline_schedule and its knobs
// (pipeline_delay_activation_forwarding, pipeline_microbatch_group_size), the key's help text (so
// docs/config.md) and `carousel schedule --help` all read it. Adding a schedule = a generator
// (generators.h) and a row in registry.cpp; docs/schedules.md "Adding a schedule" has the recipe.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "host/schedule/generators.h"

namespace carousel::schedule {

struct ScheduleInfo {
  std::string_view name;  // the value of pipeline_schedule
  std::string_view help;  // one line: the order of work on a rank, and what it needs
  // Compute-only program; called only for specs that passed check_schedule.
  Program (*generate)(const ScheduleSpec& spec);
  // Constraints beyond the two flags below; throws carousel::Error naming the violated
  // constraint (config key and value) and what would be valid.
  void (*check)(const ScheduleSpec& spec);
  bool repeats;        // runs R > 1 stages per rank (else it needs num_pipeline_repeats = 1)
  bool forward_delay;  // accepts pipeline_delay_activation_forwarding (MaxText's d = 2)
};

// Every registered schedule, in table order (the first is the default, circular).
std::span<const ScheduleInfo> schedules();

// The row called `name`; throws carousel::Error listing every registered name when none is.
const ScheduleInfo& find_schedule(std::string_view name);

// Everything generate() rejects, without generating: layout sizes >= 1, an unknown name, a
// knob of another schedule, R > 1 for a schedule without repeats, the row's own check. Config
// validation calls it for runs on several devices, so `carousel train` and `carousel schedule`
// fail the same way before any math runs.
void check_schedule(const ScheduleSpec& spec);

// The part of check_schedule that does not depend on the layout: a registered name, and knobs
// that schedule accepts. Config validation of a one-device run, which generates no schedule.
const ScheduleInfo& check_schedule_knobs(const ScheduleSpec& spec);

// The registered names joined by `separator` ("circular | gpipe | ..." for the key's help).
std::string schedule_names(std::string_view separator);

// One line per schedule, "  name              help", for `carousel schedule --help`.
std::string schedules_help();

}  // namespace carousel::schedule
