// run_name.cpp — naming a new run directory when the user named none (see run_name.h).
#include "host/config/run_name.h"

#include <fmt/chrono.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <vector>

#include "compute/cpu_backend.h"
#include "compute/error.h"

namespace carousel {

std::string fresh_run_name(const std::string& model_name, std::time_t now,
                           const std::string& base_dir) {
  // model_name may be a path-like preset name in other tools; keep the name one component.
  std::string model = model_name.empty() ? "run" : model_name;
  for (char& c : model) {
    if (c == '/' || c == '\\') c = '-';
  }
  const std::string stem = fmt::format("{}_{:%Y-%m-%d-%H-%M-%S}", model, fmt::localtime(now));
  std::string name = stem;
  for (int suffix = 2; std::filesystem::exists(std::filesystem::path(base_dir) / name); ++suffix) {
    name = fmt::format("{}-{}", stem, suffix);
  }
  return name;
}

namespace {

// Rank 0's `text` on every process of `world`: its length, then its bytes, as int32 elements of
// host tensors (a collective on a host backend, like every other exchange of the job).
std::string broadcast_text(Communicator& world, const std::string& text) {
  constexpr std::size_t kMax = 1024;
  CAROUSEL_ASSERT(text.size() <= kMax, "run name of {} bytes", text.size());
  CpuBackend host;
  std::vector<std::int32_t> codes(kMax + 1, 0);
  codes[0] = std::int32_t(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) codes[i + 1] = static_cast<unsigned char>(text[i]);
  const Tensor buffer = host.from_host(codes, {std::int64_t(codes.size())});
  world.broadcast(buffer, buffer, /*root=*/0).wait();
  codes = host.to_host<std::int32_t>(buffer);
  CAROUSEL_ASSERT(codes[0] >= 0 && std::size_t(codes[0]) <= kMax, "broadcast length {}", codes[0]);
  std::string out(static_cast<std::size_t>(codes[0]), '\0');
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = char(codes[i + 1]);
  return out;
}

}  // namespace

bool resolve_run_name(Config& cfg, Communicator* process_world) {
  if (!cfg.run_name.empty()) return false;
  const bool leader = !process_world || process_world->rank() == 0;
  std::string name =
      leader ? fresh_run_name(cfg.model_name, std::time(nullptr), cfg.base_output_directory) : "";
  if (process_world && process_world->size() > 1) name = broadcast_text(*process_world, name);
  cfg.run_name = name;
  return true;
}

void log_fresh_run_name(const Config& cfg) {
  spdlog::info(
      "run_name not set: this run writes to the new directory '{}' (pass run_name={} "
      "to resume it later)",
      cfg.run_directory(), cfg.run_name);
}

}  // namespace carousel
