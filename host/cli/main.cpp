// main.cpp — the `carousel` command line: parses subcommands and runs one.
//
//   carousel info [--cpu-devices N]            what this build can run on
//   carousel train [config.yml] key=value ...  train (MaxText key names; --help-keys lists them)
//   carousel schedule [config.yml] key=value ...  show, check and simulate a pipeline schedule
//   carousel plan --model M --devices N ...     choose the mesh for a model on a cluster
//   carousel inspect DIR                       a checkpoint's contents and integrity (exit 2: bad)
//   carousel --version                         version, commit, build type, CUDA/NCCL/MPI
//
// Every error a user can cause ends as one line "error: ..." and exit code 2.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <optional>

#include "compute/error.h"
#include "host/cli/commands.h"
#include "host/reliability/stop_signals.h"
#include "host/report/logging.h"
#include "host/schedule/registry.h"

namespace {
// The error that ends a command: logged, or on stderr when logging is off (--log-level off
// silences the log, not the reason the command failed).
void report_fatal(const std::string& message) {
  spdlog::error("{}", message);  // the log file too, when there is one
  if (!carousel::console_shows_errors()) fmt::print(stderr, "error: {}\n", message);
}
}  // namespace

int main(int argc, char** argv) {
  // Before main(), host/cli/startup_limits.cpp has blocked the stop signals, checked the limits
  // and re-executed the process for the stack limit and OpenMP's spin policy when needed.
  carousel::cap_malloc_arenas_under_limits();  // before any thread: host/cli/startup_limits.cpp
  CLI::App app{"carousel — pipeline-parallel transformer training on CPUs and GPUs"};
  app.require_subcommand(1);
  app.set_version_flag("--version", carousel::version_text(), "print the version and build");
  std::string log_level = "info";
  auto* log_level_option =
      app.add_option("--log-level", log_level,
                     "trace|debug|info|warn|error|off, before or after the subcommand (train and "
                     "schedule: the log_level key, which it overrides); errors that end the "
                     "command are printed even with off")
          ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
  app.fallthrough();  // subcommands inherit it: `carousel train --log-level off` works too

  carousel::InfoOptions info;
  auto* info_cmd = app.add_subcommand("info", "show the build, backends and devices");
  info_cmd->add_option("--cpu-devices", info.cpu_devices, "simulated CPU devices to list")
      ->check(CLI::Range(1, 1024));

  carousel::ConfigArgs train;
  bool help_keys = false;
  auto* train_cmd =
      app.add_subcommand("train", "train a model: carousel train [config.yml] key=value ...");
  train_cmd->add_option("args", train.args, "optional YAML config file, then key=value overrides");
  train_cmd->add_flag("--help-keys", help_keys,
                      "list every config key with its default and meaning");

  carousel::ConfigArgs schedule;
  auto* schedule_cmd = app.add_subcommand("schedule",
                                          "print, check and simulate a pipeline schedule: carousel "
                                          "schedule [config.yml] key=value ...");
  schedule_cmd->add_option("args", schedule.args,
                           "optional YAML config file, then key=value overrides");
  schedule_cmd->footer("pipeline_schedule=NAME, one of:\n" + carousel::schedule::schedules_help());

  carousel::PlanOptions plan;
  auto* plan_cmd = app.add_subcommand(
      "plan", "choose S, F, D, M, R, L, schedule and FSDP weight mode for a model on a cluster");
  carousel::add_plan_options(*plan_cmd, plan);

  carousel::InspectOptions inspect;
  auto* inspect_cmd = app.add_subcommand(
      "inspect",
      "a checkpoint's step, tensors (shape, dtype, CRC32) and whether its manifest verifies "
      "(exit code 2 when it does not): carousel inspect CHECKPOINT_DIR|RUN_DIR");
  inspect_cmd
      ->add_option("dir", inspect.path,
                   "a checkpoint step directory, or a run directory "
                   "(its newest checkpoint)")
      ->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {  // --help exits 0; a usage mistake is exit code 2
    return app.exit(e) == 0 ? 0 : 2;
  }
  // train and schedule log at their config's log_level: the flag, when given, is its last override.
  if (log_level_option->count() > 0) {
    train.args.push_back("log_level=" + log_level);
    schedule.args.push_back("log_level=" + log_level);
  }
  // `carousel train`: the stop signals' handlers first, then the signals unblocked (held since
  // before the libraries loaded), so a SIGTERM, SIGHUP or SIGUSR1 at any instant of start-up
  // (before main(), config, data, resume) is a clean stop after the first step, not the default
  // action. The other subcommands keep the default actions: a pending signal ends them here.
  std::optional<carousel::StopSignals> stop_signals;
  if (train_cmd->parsed() && !help_keys) stop_signals.emplace();
  carousel::unblock_stop_signals();
  try {
    carousel::init_logging({.rank = 0, .level = log_level, .file_dir = {}});
    if (info_cmd->parsed()) return carousel::run_info(info);
    if (train_cmd->parsed()) {
      if (help_keys) {
        carousel::print_config_keys();
        return 0;
      }
      return carousel::run_train(train);
    }
    if (schedule_cmd->parsed()) return carousel::run_schedule(schedule);
    if (plan_cmd->parsed()) return carousel::run_plan(plan);
    if (inspect_cmd->parsed()) return carousel::run_inspect(inspect);
  } catch (const carousel::Error& e) {
    carousel::StopSignals::note_failing();  // a signal from here on is no stop request to say
    report_fatal(e.what());
    if (!e.where().empty()) spdlog::debug("(raised at {})", e.where());
    return 2;
  } catch (const std::exception& e) {  // e.g. a filesystem error: still one line, no crash
    carousel::StopSignals::note_failing();
    report_fatal(e.what());
    return 2;
  } catch (...) {
    carousel::StopSignals::note_failing();
    report_fatal("unknown error");
    return 2;
  }
  return 0;
}
