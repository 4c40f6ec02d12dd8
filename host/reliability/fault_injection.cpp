// fault_injection.cpp — parsing CAROUSEL_FAULT and the hooks the executor and the loop call.
#include "host/reliability/fault_injection.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "compute/error.h"

namespace carousel {

namespace {

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

double number(const std::string& fault, const std::string& key, const std::string& value) {
  try {
    std::size_t used = 0;
    const double x = std::stod(value, &used);
    if (used == value.size()) return x;
  } catch (const std::exception&) {
  }
  fail("CAROUSEL_FAULT '{}': {}={} is not a number", fault, key, value);
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
    for (const std::string& pair :
         split(colon == std::string::npos ? "" : item.substr(colon + 1), ',')) {
      const std::size_t eq = pair.find('=');
      CAROUSEL_CHECK(eq != std::string::npos, "CAROUSEL_FAULT '{}': '{}' is not key=value", item,
                     pair);
      const std::string key = pair.substr(0, eq), value = pair.substr(eq + 1);
      if (key == "rank") {
        fault.rank = int(number(item, key, value));
      } else if (key == "step") {
        fault.step = std::int64_t(number(item, key, value));
      } else if (key == "action" && fault.kind == Fault::Kind::Stall) {
        fault.action = std::int64_t(number(item, key, value));
      } else if (key == "seconds" &&
                 (fault.kind == Fault::Kind::Stall || fault.kind == Fault::Kind::SlowSave)) {
        fault.seconds = number(item, key, value);
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
    faults.push_back(fault);
  }
  return faults;
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
