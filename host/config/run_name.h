// run_name.h — the run directory of a run that was given no run_name: a new one per run, named
// <model_name>_<YYYY-MM-DD-HH-MM-SS> (MaxText's rule), so two runs that forgot to name
// themselves never resume each other. Every process of an mpirun job uses the name world rank 0
// picked (the processes' clocks may straddle a second).
#pragma once

#include <ctime>
#include <string>

#include "collectives/communicator.h"
#include "host/config/config.h"

namespace carousel {

// "<model_name>_<local time>", with "-2", "-3", ... appended while <base_dir>/<name> exists
// (two runs started in the same second).
std::string fresh_run_name(const std::string& model_name, std::time_t now,
                           const std::string& base_dir);

// When cfg.run_name is empty: sets a fresh name (picked on world rank 0, shared with the other
// processes of `process_world` when there are several) and returns true; the caller says so once
// logging is set up. Otherwise false.
bool resolve_run_name(Config& cfg, Communicator* process_world);

// The log line for a name resolve_run_name picked.
void log_fresh_run_name(const Config& cfg);

}  // namespace carousel
