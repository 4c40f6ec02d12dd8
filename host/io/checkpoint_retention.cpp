// checkpoint_retention.cpp — max_num_checkpoints_to_keep: the oldest complete checkpoints are
// removed after each save, never the newest complete one, never a directory that is not a
// complete checkpoint (those are the user's to inspect; latest_checkpoint warns about them).
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <filesystem>

#include "host/io/checkpoint.h"

namespace carousel {

namespace fs = std::filesystem;

std::vector<std::string> prune_checkpoints(const Config& cfg) {
  std::vector<std::string> removed;
  if (cfg.max_num_checkpoints_to_keep <= 0) return removed;
  const fs::path root = fs::path(cfg.run_directory()) / "checkpoints";
  std::error_code ec;
  // Removals a crash interrupted: renamed aside first, so never mistaken for a checkpoint.
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().filename().string().rfind(".removing-", 0) == 0) fs::remove_all(it->path(), ec);
  }
  std::int64_t complete = 0;
  for (const auto& [step, dir] : step_directories(root.string())) {  // newest first
    // Complete: its manifest was written last and the directory renamed into place after it.
    if (!fs::exists(fs::path(dir) / "manifest.json")) continue;
    if (++complete <= cfg.max_num_checkpoints_to_keep) continue;
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
