// checkpoint_retention.cpp — max_num_checkpoints_to_keep: the oldest complete checkpoints are
// removed after each save, never the one just written nor the newest ones that verify, never a
// directory that is not a complete checkpoint or is newer than the save (those are the user's to
// inspect; latest_checkpoint warns about them).
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <filesystem>

#include "compute/error.h"
#include "host/io/checkpoint.h"

namespace carousel {

namespace fs = std::filesystem;

std::vector<std::string> prune_checkpoints(const Config& cfg, std::int64_t saved_step) {
  std::vector<std::string> removed;
  if (cfg.max_num_checkpoints_to_keep <= 0) return removed;
  const fs::path root = fs::path(cfg.run_directory()) / "checkpoints";
  std::error_code ec;
  // Removals a crash interrupted: renamed aside first, so never mistaken for a checkpoint.
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().filename().string().rfind(".removing-", 0) == 0) fs::remove_all(it->path(), ec);
  }
  std::int64_t kept = 0;
  for (const auto& [step, dir] : step_directories(root.string())) {  // newest first
    // Newer than the save (a checkpoint a resume skipped as unusable): not ours to judge.
    if (step > saved_step) continue;
    if (kept < cfg.max_num_checkpoints_to_keep) {
      // Kept: the one just written, then the newest older ones that verify, as a resume
      // would choose them (a corrupt one does not take a place).
      try {
        if (step != saved_step) verify_checkpoint(dir);
        ++kept;
      } catch (const Error&) {
      }
      continue;
    }
    if (!fs::exists(fs::path(dir) / "manifest.json")) continue;  // a crash's leftover: kept
    const fs::path aside = root / fmt::format(".removing-{}-{}", step, ::getpid());
    fs::rename(dir, aside, ec);
    if (!ec) fs::remove_all(aside, ec);
    if (ec) {
      spdlog::warn("max_num_checkpoints_to_keep={}: cannot remove old checkpoint '{}': {}",
                   cfg.max_num_checkpoints_to_keep, dir, ec.message());
      continue;
    }
    removed.push_back(dir);
  }
  if (!removed.empty()) {
    spdlog::info("removed {} old checkpoint(s) (max_num_checkpoints_to_keep={})", removed.size(),
                 cfg.max_num_checkpoints_to_keep);
  }
  return removed;
}

}  // namespace carousel
