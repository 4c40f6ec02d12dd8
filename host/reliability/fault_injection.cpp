// fault_injection.cpp — parsing CAROUSEL_FAULT strictly (and against the run it is set for) and
// the hooks the executor and the loop call.
#include "host/reliability/fault_injection.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "compute/error.h"

namespace carousel {

namespace {

constexpr std::int64_t kMaxRank = (1 << 20) - 1;                  // ranks of the largest job
constexpr std::int64_t kMaxStep = 1'000'000'000'000;              // steps and actions

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    const std::size_t end = std::min(text.find(separator, begin), text.size());
    if (end > begin) parts.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return parts;
}

// Whole numbers only: stod read "1.5" as rank 1, "1e30" overflowed the step, "nan" seconds
// slept for an undefined time; each such fault never fired, or fired elsewhere, saying nothing.
std::int64_t whole(const std::string& fault, const std::string& key, const std::string& value,
                   std::int64_t lo, std::int64_t hi) {
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  CAROUSEL_CHECK(ec == std::errc() && end == value.data() + value.size() && v >= lo && v <= hi,
                 "CAROUSEL_FAULT '{}': {}={} is not valid; it must be a whole number in [{}, {}]",
                 fault, key, value, lo, hi);
  return v;
}

double seconds(const std::string& fault, const std::string& value) {
  constexpr double kMaxSeconds = 30 * 24 * 3600.0;  // the longest collective timeout
  double v = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  CAROUSEL_CHECK(ec == std::errc() && end == value.data() + value.size() && std::isfinite(v) &&
                     v >= 0 && v <= kMaxSeconds,
                 "CAROUSEL_FAULT '{}': seconds={} is not valid; it must be a number of seconds in "
                 "[0, {}]",
                 fault, value, kMaxSeconds);
  return v;
}

}  // namespace

std::vector<Fault> parse_faults(const std::string& text) {
  const std::map<std::string, Fault::Kind> kinds = {{"stall", Fault::Kind::Stall},
                                                    {"nan", Fault::Kind::NonFinite},
                                                    {"signal", Fault::Kind::Signal},
                                                    {"kill", Fault::Kind::Kill},
                                                    {"flip", Fault::Kind::Flip},
                                                    {"slowsave", Fault::Kind::SlowSave}};
  const std::map<std::string, int> signals = {
      {"TERM", SIGTERM}, {"INT", SIGINT}, {"HUP", SIGHUP}, {"PIPE", SIGPIPE}};
  std::vector<Fault> faults;
  for (const std::string& item : split(text, ';')) {
    const std::size_t colon = item.find(':');
    const auto kind = kinds.find(item.substr(0, colon));
    CAROUSEL_CHECK(kind != kinds.end(),
                   "CAROUSEL_FAULT '{}': the kind must be stall, nan, signal, kill, flip or slowsave",
                   item);
    Fault fault;
    fault.kind = kind->second;
    if (fault.kind == Fault::Kind::Signal) fault.signal = SIGTERM;
    std::set<std::string> seen;
    for (const std::string& pair :
         split(colon == std::string::npos ? "" : item.substr(colon + 1), ',')) {
      const std::size_t eq = pair.find('=');
      CAROUSEL_CHECK(eq != std::string::npos, "CAROUSEL_FAULT '{}': '{}' is not key=value", item,
                     pair);
      const std::string key = pair.substr(0, eq), value = pair.substr(eq + 1);
      CAROUSEL_CHECK(seen.insert(key).second, "CAROUSEL_FAULT '{}': {} is given twice", item, key);
      if (key == "rank") {
        fault.rank = int(whole(item, key, value, 0, kMaxRank));
      } else if (key == "step") {
        fault.step = whole(item, key, value, 0, kMaxStep);
      } else if (key == "action" && fault.kind == Fault::Kind::Stall) {
        fault.action = whole(item, key, value, 0, kMaxStep);
      } else if (key == "seconds" &&
                 (fault.kind == Fault::Kind::Stall || fault.kind == Fault::Kind::SlowSave)) {
        fault.seconds = seconds(item, value);
      } else if (key == "point" && fault.kind == Fault::Kind::Kill) {
        CAROUSEL_CHECK(
            value == "begin" || value == "model" || value == "manifest" || value == "renamed",
            "CAROUSEL_FAULT '{}': point must be begin, model, manifest or renamed", item);
        fault.point = value;
      } else if (key == "signal" && fault.kind == Fault::Kind::Signal) {
        const auto it = signals.find(value);
        CAROUSEL_CHECK(it != signals.end(),
                       "CAROUSEL_FAULT '{}': signal must be TERM, INT, HUP or PIPE", item);
        fault.signal = it->second;
      } else {
        fail(
            "CAROUSEL_FAULT '{}': unknown key '{}' for this kind (stall: rank, step, action, "
            "seconds; nan, flip: rank, step; signal: rank, step, signal; kill: point, step; "
            "slowsave: step, seconds)",
            item, key);
      }
    }
    // A stall matches its rank exactly and a kill its point: without them it never fires.
    CAROUSEL_CHECK(fault.kind != Fault::Kind::Stall || fault.rank >= 0,
                   "CAROUSEL_FAULT '{}': a stall needs rank=N (the rank that stalls)", item);
    CAROUSEL_CHECK(fault.kind != Fault::Kind::Kill || !fault.point.empty(),
                   "CAROUSEL_FAULT '{}': a kill needs point=begin, model, manifest or renamed",
                   item);
    faults.push_back(fault);
  }
  return faults;
}

void check_faults_for_run(const std::vector<Fault>& faults, const FaultRun& run) {
  const bool stops = std::any_of(faults.begin(), faults.end(),
                                 [](const Fault& f) { return f.kind == Fault::Kind::Signal; });
  for (const Fault& f : faults) {
    const char* kind = f.kind == Fault::Kind::Stall       ? "stall"
                       : f.kind == Fault::Kind::NonFinite ? "nan"
                       : f.kind == Fault::Kind::Signal    ? "signal"
                       : f.kind == Fault::Kind::Kill      ? "kill"
                       : f.kind == Fault::Kind::Flip      ? "flip"
                                                          : "slowsave";
    CAROUSEL_CHECK(f.rank < run.ranks,
                   "CAROUSEL_FAULT {}: rank={} does not exist in this run of {} rank(s) (0 to {}), "
                   "so the fault would never fire",
                   kind, f.rank, run.ranks, run.ranks - 1);
    if (f.kind != Fault::Kind::Kill && f.kind != Fault::Kind::SlowSave) {
      CAROUSEL_CHECK(f.step < run.steps,
                     "CAROUSEL_FAULT {}: step={} is never reached: this run's steps are 0 to {} "
                     "(steps={}), so the fault would never fire",
                     kind, f.step, run.steps - 1, run.steps);
      continue;
    }
    // A save's step is the number of steps done: every checkpoint_period-th and the last (and,
    // when a signal stops the run, the step it stops at).
    CAROUSEL_CHECK(run.checkpointing,
                   "CAROUSEL_FAULT {}: this run saves no checkpoint (enable_checkpointing=false), "
                   "so the fault would never fire",
                   kind);
    const bool saved = f.step >= 1 && f.step <= run.steps &&
                       (stops || f.step == run.steps ||
                        (run.checkpoint_period > 0 && f.step % run.checkpoint_period == 0));
    CAROUSEL_CHECK(saved,
                   "CAROUSEL_FAULT {}: step={} is no checkpoint of this run (steps={}, "
                   "checkpoint_period={}: checkpoints at every multiple of the period and at the "
                   "last step), so the fault would never fire",
                   kind, f.step, run.steps, run.checkpoint_period);
  }
}

namespace {

std::mutex faults_mutex;
std::optional<std::vector<Fault>> faults;  // unset until first use or inject_faults
// How many faults are injected, -1 before the first look: lets the hooks, one of which runs
// before every action of every step, return at once without the lock when there are none.
std::atomic<int> fault_count{-1};

bool none_injected() {
  const int n = fault_count.load(std::memory_order_relaxed);
  return n == 0 || (n < 0 && injected_faults().empty());
}

}  // namespace

std::vector<Fault> injected_faults() {
  std::lock_guard lock(faults_mutex);
  if (!faults) {
    const char* text = std::getenv("CAROUSEL_FAULT");
    faults = text ? parse_faults(text) : std::vector<Fault>{};
    fault_count = int(faults->size());
  }
  return *faults;
}

void inject_faults(const std::string& text) {
  std::vector<Fault> parsed = parse_faults(text);
  std::lock_guard lock(faults_mutex);
  faults = std::move(parsed);
  fault_count = int(faults->size());
}

void maybe_stall(int rank, std::int64_t step, std::int64_t action) {
  if (none_injected()) return;
  for (const Fault& f : injected_faults()) {
    if (f.kind == Fault::Kind::Stall && f.rank == rank && f.step == step && f.action == action) {
      spdlog::warn("fault injection: rank {} stalls {} s before action {} of step {}", rank,
                   f.seconds, action, step);
      std::this_thread::sleep_for(std::chrono::duration<double>(f.seconds));
    }
  }
}

namespace {
bool injected_at(Fault::Kind kind, int rank, std::int64_t step) {
  if (none_injected()) return false;
  for (const Fault& f : injected_faults()) {
    if (f.kind == kind && (f.rank < 0 || f.rank == rank) && f.step == step) return true;
  }
  return false;
}
}  // namespace

bool should_inject_nonfinite(int rank, std::int64_t step) {
  return injected_at(Fault::Kind::NonFinite, rank, step);
}

bool should_flip_weight_bit(int rank, std::int64_t step) {
  return injected_at(Fault::Kind::Flip, rank, step);
}

void maybe_raise_signal(int rank, bool first_rank_of_process, std::int64_t step) {
  if (none_injected()) return;
  for (const Fault& f : injected_faults()) {
    const bool mine = f.rank < 0 ? first_rank_of_process : f.rank == rank;
    if (f.kind == Fault::Kind::Signal && f.step == step && mine) std::raise(f.signal);
  }
}

void maybe_slow_save(std::int64_t step) {
  if (none_injected()) return;
  for (const Fault& f : injected_faults()) {
    if (f.kind == Fault::Kind::SlowSave && f.step == step) {
      std::this_thread::sleep_for(std::chrono::duration<double>(f.seconds));
    }
  }
}

void maybe_kill(const char* point, std::int64_t step) {
  if (none_injected()) return;
  for (const Fault& f : injected_faults()) {
    if (f.kind == Fault::Kind::Kill && f.step == step && f.point == point) std::raise(SIGKILL);
  }
}

}  // namespace carousel
