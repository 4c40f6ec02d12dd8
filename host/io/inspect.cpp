// inspect.cpp — the report of `carousel inspect` (host/io/inspect.h): reads a checkpoint's files
// independently, so that one unreadable file still leaves the others reported; and the check of a
// checkpoint's Hugging Face index against its manifest (verify_checkpoint_index).
#include "host/io/inspect.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "compute/error.h"
#include "host/io/checkpoint.h"
#include "host/io/checkpoint_layout.h"
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
  // Every column as wide as its widest cell: names and shapes of any length keep them aligned.
  std::size_t width = 4, shapes = 5, dtypes = 5;
  for (const auto& [name, e] : file.entries()) {
    width = std::max(width, name.size());
    shapes = std::max(shapes, shape_str(e.shape).size());
    dtypes = std::max(dtypes, e.dtype_name.size());
  }
  out << fmt::format("\n{} ({}, {} tensors)\n", title, path.filename().string(),
                     file.entries().size());
  out << fmt::format("  {:<{}}  {:<{}}  {:<{}} {:>12}  {}\n", "name", width, "shape", shapes,
                     "dtype", dtypes, "bytes", "crc32");
  for (const auto& [name, e] : file.entries()) {
    out << fmt::format("  {:<{}}  {:<{}}  {:<{}} {:>12}  {:08x}\n", name, width,
                       shape_str(e.shape), shapes, e.dtype_name, dtypes, e.end - e.begin,
                       crc32_of(file.read(name).data(), e.end - e.begin));
  }
}

constexpr const char* kIndexFile = "model.safetensors.index.json";

// What is at `p` when it is not a regular file, unfollowed.
std::string kind_of(const fs::path& p) {
  std::error_code ec;
  const auto st = fs::symlink_status(p, ec);
  if (fs::is_symlink(st)) return "a symbolic link";
  if (fs::is_directory(st)) return "a directory";
  if (!fs::exists(st)) return "missing";
  return "not a regular file";
}

}  // namespace

void verify_checkpoint_index(const std::string& directory) {
  using checkpoint_layout::is_model_file;
  const fs::path dir(directory), index_path = dir / kIndexFile;
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(index_path, ec))) return;  // one model file: no index
  const std::string where = fmt::format("checkpoint index '{}'", index_path.string());
  CAROUSEL_CHECK(fs::is_regular_file(fs::symlink_status(index_path, ec)),
                 "{} is {}, not a file of the checkpoint", where, kind_of(index_path));
  const nlohmann::json manifest = read_json_file(dir / "manifest.json");
  const bool has_files =
      manifest.is_object() && manifest.contains("files") && manifest["files"].is_object();
  const auto listed = [&](const std::string& f) {
    return has_files && manifest["files"].contains(f);
  };
  CAROUSEL_CHECK(listed(kIndexFile),
                 "{} is not listed in manifest.json, so nothing verifies it (a file added after "
                 "the save?); transformers follows it to load the directory",
                 where);
  const nlohmann::json index = read_json_file(index_path);
  const auto& map = json_field(index, "weight_map", where);
  CAROUSEL_CHECK(map.is_object(), "{}: field 'weight_map' must be an object, found {}", where,
                 map.type_name());
  std::map<std::string, std::vector<std::string>> tensors_of;  // file -> the tensors it must hold
  for (const auto& [tensor, file] : map.items()) {
    const std::string f = json_string(file, where, "weight_map." + tensor);
    const std::string entry = fmt::format("{}: weight_map[{}] = {}", where,
                                          nlohmann::json(tensor).dump(), nlohmann::json(f).dump());
    CAROUSEL_CHECK(!f.empty() && f.find('/') == std::string::npos && f != "." && f != "..",
                   "{} is not a file name inside the checkpoint directory", entry);
    CAROUSEL_CHECK(is_model_file(f),
                   "{} is not a model file of the checkpoint (model.safetensors or "
                   "model-0000i-of-0000n.safetensors)",
                   entry);
    CAROUSEL_CHECK(listed(f), "{} names a file that manifest.json does not list", entry);
    CAROUSEL_CHECK(fs::is_regular_file(fs::symlink_status(dir / f, ec)),
                   "{} names a file that is {}, not a file of the checkpoint", entry,
                   kind_of(dir / f));
    tensors_of[f].push_back(tensor);
  }
  // Each model file the manifest lists holds exactly the tensors the index puts there.
  for (const auto& [f, info] : manifest["files"].items()) {
    if (!is_model_file(f)) continue;
    CAROUSEL_CHECK(fs::is_regular_file(fs::symlink_status(dir / f, ec)),
                   "{}: manifest.json lists '{}', which is {}", where, f, kind_of(dir / f));
    const SafetensorsFile file((dir / f).string());  // its header only
    auto& named = tensors_of[f];
    std::sort(named.begin(), named.end());
    for (const auto& tensor : named) {
      CAROUSEL_CHECK(file.entries().count(tensor),
                     "{}: weight_map puts tensor '{}' in '{}', which does not hold it", where,
                     tensor, f);
    }
    for (const auto& [tensor, e] : file.entries()) {
      CAROUSEL_CHECK(std::binary_search(named.begin(), named.end(), tensor),
                     "{}: tensor '{}' of '{}' is not in weight_map (transformers would not load "
                     "it)",
                     where, tensor, f);
    }
  }
}

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
    std::size_t width = 4;  // the longest part file name: columns stay aligned
    for (const auto& [file, info] : files.items()) width = std::max(width, file.size());
    out << fmt::format("\nfiles (manifest.json)\n  {:<{}} {:>12}  {}\n", "file", width, "bytes",
                       "crc32");
    for (const auto& [file, info] : files.items()) {
      const auto crc = info.contains("crc32") && info["crc32"].is_number_unsigned()
                           ? fmt::format("{:08x}", info["crc32"].get<std::uint64_t>())
                           : std::string("?");
      out << fmt::format("  {:<{}} {:>12}  {}\n", file, width,
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
    verify_checkpoint_index(dir.string());
  } catch (const Error& e) {
    verdict = e.what();
  }
  out << "\n" << (verdict.empty() ? "manifest: verified" : "manifest: FAILED: " + verdict) << "\n";
  return verdict.empty() && problems.empty() ? 0 : 2;
}

}  // namespace carousel
