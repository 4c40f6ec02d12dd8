// inspect.cpp — the report of `carousel inspect` (host/io/inspect.h): reads a checkpoint's files
// independently, so that one unreadable file still leaves the others reported.
#include "host/io/inspect.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "compute/error.h"
#include "host/io/checkpoint.h"
#include "host/io/files.h"
#include "host/io/json_fields.h"
#include "host/io/safetensors.h"

namespace carousel {

namespace {

namespace fs = std::filesystem;

bool holds_checkpoint_files(const fs::path& dir) {
  for (const char* f : {"manifest.json", "state.json"}) {
    if (fs::exists(dir / f)) return true;
  }
  return !checkpoint_data_files(dir.string()).empty();
}

// One table of a safetensors file: name, shape, dtype, CRC32 of the tensor's bytes.
void print_tensors(const fs::path& path, const std::string& title, std::ostream& out) {
  const SafetensorsFile file(path.string());
  std::size_t width = 4;
  for (const auto& [name, e] : file.entries()) width = std::max(width, name.size());
  out << fmt::format("\n{} ({}, {} tensors)\n", title, path.filename().string(),
                     file.entries().size());
  out << fmt::format("  {:<{}}  {:<16} {:<5} {:>12}  {}\n", "name", width, "shape", "dtype",
                     "bytes", "crc32");
  for (const auto& [name, e] : file.entries()) {
    out << fmt::format("  {:<{}}  {:<16} {:<5} {:>12}  {:08x}\n", name, width, shape_str(e.shape),
                       e.dtype_name, e.end - e.begin,
                       crc32_of(file.read(name).data(), e.end - e.begin));
  }
}

}  // namespace

std::string resolve_checkpoint_directory(const std::string& path) {
  const fs::path p(path);
  CAROUSEL_CHECK(fs::exists(p), "'{}' does not exist{}", path, relative_to_note(path));
  CAROUSEL_CHECK(fs::is_directory(p),
                 "'{}' is not a directory (give a checkpoint step directory "
                 "or a run directory)",
                 path);
  if (holds_checkpoint_files(p)) return p.string();
  for (const fs::path& root : {p / "checkpoints", p}) {
    const auto steps = step_directories(root.string());
    if (!steps.empty()) return steps.front().second;
  }
  fail(
      "'{}' is not a checkpoint: it holds no manifest.json, state.json or model.safetensors, "
      "and no checkpoints/<step> directory",
      path);
}

int inspect_checkpoint(const std::string& path, std::ostream& out) {
  const fs::path dir = resolve_checkpoint_directory(path);
  std::vector<std::string> problems;
  // Each part is read on its own: a corrupt file is one problem, not the end of the report.
  auto part = [&](const std::string& what, const auto& fn) {
    try {
      fn();
    } catch (const std::exception& e) {
      out << fmt::format("{}: cannot be read: {}\n", what, e.what());
      problems.push_back(e.what());
    }
  };
  out << fmt::format("checkpoint: {}\n", dir.string());
  part("state.json", [&] {
    const nlohmann::json st = read_json_file(dir / "state.json");
    const std::string where = fmt::format("'{}'", (dir / "state.json").string());
    out << fmt::format("step: {}\n", json_field(st, "step", where).dump());
    out << fmt::format("format_version: {}\n", json_field(st, "format_version", where).dump());
    if (st.contains("skipped_steps")) {
      out << fmt::format("skipped_steps: {}\n", st["skipped_steps"].dump());
    }
    const auto config = checkpoint_config(dir.string());
    for (const char* key : {"model_name", "steps", "lr_schedule_type"}) {
      const auto it = config.find(key);
      if (it != config.end()) out << fmt::format("config {}: {}\n", key, it->second);
    }
  });
  part("manifest.json", [&] {
    const nlohmann::json manifest = read_json_file(dir / "manifest.json");
    const std::string where = fmt::format("'{}'", (dir / "manifest.json").string());
    const auto& files = json_field(manifest, "files", where);
    CAROUSEL_CHECK(files.is_object(), "{}: field 'files' must be an object", where);
    out << fmt::format("\nfiles (manifest.json)\n  {:<24} {:>12}  {}\n", "file", "bytes", "crc32");
    for (const auto& [file, info] : files.items()) {
      const auto crc = info.contains("crc32") && info["crc32"].is_number_unsigned()
                           ? fmt::format("{:08x}", info["crc32"].get<std::uint64_t>())
                           : std::string("?");
      out << fmt::format("  {:<24} {:>12}  {}\n", file,
                         info.contains("bytes") ? info["bytes"].dump() : "?", crc);
    }
  });
  const auto data_files = checkpoint_data_files(dir.string());
  bool optimizer = false;
  for (const auto& file : data_files) {
    const bool model = file.rfind("model", 0) == 0;
    optimizer = optimizer || !model;
    part(file,
         [&] { print_tensors(dir / file, model ? "parameters" : "optimizer state (AdamW)", out); });
  }
  if (std::none_of(data_files.begin(), data_files.end(),
                   [](const std::string& f) { return f.rfind("model", 0) == 0; })) {
    const std::string problem = "no model file (model.safetensors or its parts)";
    out << fmt::format("\nparameters: {}\n", problem);
    problems.push_back(problem);
  }
  if (!optimizer) {
    out << "\noptimizer state: none (no optimizer file: parameters only)\n";
  }
  std::string verdict;
  try {
    verify_checkpoint(dir.string());
  } catch (const Error& e) {
    verdict = e.what();
  }
  out << "\n" << (verdict.empty() ? "manifest: verified" : "manifest: FAILED: " + verdict) << "\n";
  return verdict.empty() && problems.empty() ? 0 : 2;
}

}  // namespace carousel
