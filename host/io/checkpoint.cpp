// checkpoint.cpp — finding, verifying and reading checkpoints (manifests, partial saves, loading
// with validation); writing them: checkpoint_save.cpp.
#include "host/io/checkpoint.h"
#include "host/io/inspect.h"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>

#include "compute/error.h"
#include "host/io/checkpoint_layout.h"
#include "host/io/files.h"
#include "host/io/huggingface/hf_import.h"
#include "host/io/json_fields.h"
#include "host/io/safetensors.h"
#include "host/reliability/fault_injection.h"

namespace carousel {

namespace fs = std::filesystem;
using namespace checkpoint_layout;

namespace {

// A checkpoint written in another format (a newer carousel's): never read as this one's, and
// never skipped for an older checkpoint unnoticed (latest_checkpoint lets it through).
class FormatVersionError : public Error {
 public:
  using Error::Error;
};

// Every file the manifest lists exists with its size and CRC32; model.safetensors and
// state.json must be listed; a format_version, when present (every manifest carousel writes has
// one), is this carousel's.
void verify_manifest(const fs::path& dir) {
  const fs::path manifest_path = dir / "manifest.json";
  CAROUSEL_CHECK(fs::is_regular_file(manifest_path),
                 "'{}' is not a complete checkpoint: manifest.json is missing", dir.string());
  const nlohmann::json manifest = read_json_file(manifest_path);
  const std::string where = fmt::format("checkpoint manifest '{}'", manifest_path.string());
  if (manifest.is_object() && manifest.contains("format_version")) {
    const auto& version = manifest["format_version"];
    if (!version.is_number_integer() || version.get<std::int64_t>() < 1 ||
        version.get<std::int64_t>() > kFormatVersion) {
      throw FormatVersionError(fmt::format(
          "{}: format_version {} is not one this carousel reads (1 to {}): the checkpoint was "
          "written by another carousel version; resume it with that version, or start a new run "
          "(another run_name)",
          where, version.dump(), kFormatVersion));
    }
  }
  const auto& files = json_field(manifest, "files", where);
  CAROUSEL_CHECK(files.is_object(), "{}: field 'files' must be an object, found {}", where,
                 files.type_name());
  CAROUSEL_CHECK(files.contains("state.json"), "{}: 'files' does not list 'state.json'", where);
  CAROUSEL_CHECK(std::any_of(files.items().begin(), files.items().end(),
                             [](const auto& f) { return is_model_file(f.key()); }),
                 "{}: 'files' lists no model file (model.safetensors, or its parts "
                 "model-00001-of-0000N.safetensors)",
                 where);
  for (const auto& [file, info] : files.items()) {
    CAROUSEL_CHECK(!file.empty() && file.find('/') == std::string::npos && file != "..",
                   "{}: '{}' is not a file name inside the checkpoint", where, file);
    const std::string entry = fmt::format("{}: files.{}", where, file);
    const std::uint64_t bytes = json_unsigned(json_field(info, "bytes", entry), entry, "bytes");
    const std::uint64_t crc =
        json_unsigned(json_field(info, "crc32", entry), entry, "crc32", 0xffffffffULL);
    const fs::path p = dir / file;
    std::error_code ec;  // a name the file system refuses (too long) is missing, not a crash
    CAROUSEL_CHECK(fs::is_regular_file(p, ec),
                   "checkpoint '{}': file '{}' listed in the manifest is missing", dir.string(),
                   file);
    const auto size = fs::file_size(p, ec);
    CAROUSEL_CHECK(!ec, "checkpoint '{}': cannot read the size of '{}': {}", dir.string(), file,
                   ec.message());
    CAROUSEL_CHECK(size == bytes,
                   "checkpoint '{}': '{}' is {} bytes but the manifest says {} (truncated?)",
                   dir.string(), file, size, bytes);
    CAROUSEL_CHECK(file_crc32(p) == crc, "checkpoint '{}': '{}' fails its CRC32 check (corrupt)",
                   dir.string(), file);
  }
  // The index transformers follows names files too: the same checks, so a resume never reads
  // what `carousel inspect` would refuse.
  verify_checkpoint_index(dir);
}

// The step of a directory name of decimal digits (at most 18: no overflow), or -1.
std::int64_t step_of(const std::string& name) {
  if (name.empty() || name.size() > 18 || name.find_first_not_of("0123456789") != std::string::npos)
    return -1;
  return std::stoll(name);
}

bool process_alive(long pid) { return pid > 0 && (::kill(pid_t(pid), 0) == 0 || errno == EPERM); }

// Writes, fsyncs and removes a small file in `dir`: finds read-only, unwritable and full file
// systems. `what` names the setting in the error.
void probe_write(const fs::path& dir, const std::string& what) {
  const fs::path probe = dir / fmt::format(".carousel-write-probe-{}", ::getpid());
  // Opened as every output is (files.h): a symlink left at the probe's name is not followed.
  std::optional<OutputFile> out;
  try {
    out.emplace(probe, "write probe", OutputMode::Replace);
  } catch (const Error& e) {
    fail("{}: cannot create a file in '{}': {}", what, dir.string(), e.what());
  }
  const std::vector<char> block(4096, 0);
  std::string problem;
  try {
    out->write(block.data(), block.size());
    out->sync();
  } catch (const Error& e) {
    problem = e.what();
  }
  out.reset();
  ::unlink(probe.c_str());
  CAROUSEL_CHECK(problem.empty(), "{}: cannot write to '{}': {}", what, dir.string(), problem);
}

}  // namespace

// checkpoint_layout.h: what the writer and the reader share.
namespace checkpoint_layout {

void fsync_path(const fs::path& p) {
  // Never waits on a FIFO put where a written file was (O_RDONLY would wait for a writer).
  const int fd = ::open(p.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  CAROUSEL_CHECK(fd >= 0, "cannot open '{}' to fsync it", p.string());
  const int rc = ::fsync(fd);
  ::close(fd);
  CAROUSEL_CHECK(rc == 0, "fsync of '{}' failed (disk full or read-only?)", p.string());
}

fs::path checkpoints_dir(const Config& cfg) {
  return fs::path(cfg.run_directory()) / "checkpoints";
}

namespace {
const std::regex& data_file_pattern() {
  static const std::regex pattern(R"((model|optimizer)(-\d{5}-of-\d{5})?\.safetensors)");
  return pattern;
}
}  // namespace

bool is_data_file(const std::string& name) { return std::regex_match(name, data_file_pattern()); }

bool is_model_file(const std::string& name) {
  return is_data_file(name) && name.rfind("model", 0) == 0;
}

std::string part_file_name(const std::string& stem, int k, int n) {
  return n == 1 ? stem + ".safetensors"
                : fmt::format("{}-{:05}-of-{:05}.safetensors", stem, k + 1, n);
}

}  // namespace checkpoint_layout

std::vector<std::pair<std::int64_t, std::string>> step_directories(const std::string& root) {
  std::vector<std::pair<std::int64_t, std::string>> steps;
  if (!fs::is_directory(root)) return steps;
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::int64_t step = step_of(it->path().filename().string());
    if (step >= 0 && it->is_directory()) steps.emplace_back(step, it->path().string());
  }
  CAROUSEL_CHECK(!ec, "cannot list the checkpoint directory '{}': {}", root, ec.message());
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

std::optional<std::string> latest_checkpoint(const Config& cfg) {
  const fs::path root = checkpoints_dir(cfg);
  const auto steps = step_directories(root.string());
  for (const auto& [step, dir] : steps) {
    try {
      verify_manifest(dir);
      return dir;
    } catch (const FormatVersionError&) {
      throw;
    } catch (const Error& e) {
      spdlog::warn("checkpoint '{}' is skipped: {}; trying the previous one", dir, e.what());
    }
  }
  if (!steps.empty()) {
    spdlog::warn(
        "none of the {} checkpoint directories in '{}' is usable; starting from the "
        "beginning (they are kept; the save of a step moves its unusable directory "
        "aside)",
        steps.size(), root.string());
  }
  return std::nullopt;
}

std::vector<std::string> clean_partial_checkpoints(const Config& cfg) {
  const fs::path root = checkpoints_dir(cfg);
  std::vector<std::string> removed;
  if (!fs::is_directory(root)) return removed;
  static const std::regex tmp_name(R"(\.tmp-(\d{1,18})-(\d{1,9}))");
  std::vector<fs::path> partial;
  for (const auto& entry : fs::directory_iterator(root)) {
    if (entry.path().filename().string().rfind(".tmp-", 0) == 0) partial.push_back(entry.path());
  }
  std::sort(partial.begin(), partial.end());
  for (const auto& dir : partial) {
    std::smatch m;
    const std::string name = dir.filename().string();
    const bool named = std::regex_match(name, m, tmp_name);
    const long pid = named ? std::stol(m[2]) : -1;
    if (pid != long(::getpid()) && process_alive(pid)) {
      spdlog::warn("partial checkpoint '{}' is left alone: process {} that writes it is alive",
                   dir.string(), pid);
      continue;
    }
    bool complete = false;
    try {
      verify_manifest(dir);
      complete = named;
    } catch (const Error&) {
    }
    if (complete) {
      const fs::path final_dir = root / m[1].str();
      std::error_code ec;  // another process of the run may be promoting it at the same time
      if (!fs::exists(final_dir) && (fs::rename(dir, final_dir, ec), !ec)) {
        spdlog::warn(
            "checkpoint '{}' was complete but not renamed (interrupted save); moved "
            "into place as '{}'",
            dir.string(), final_dir.string());
      } else if (!fs::exists(dir)) {
        continue;  // promoted by another process
      } else {
        spdlog::warn("partial checkpoint '{}' is complete but '{}' exists; left alone",
                     dir.string(), final_dir.string());
      }
      continue;
    }
    std::error_code ec;
    fs::remove_all(dir, ec);
    if (ec) {
      spdlog::warn("partial checkpoint '{}' (an interrupted save) could not be removed: {}",
                   dir.string(), ec.message());
    } else {
      spdlog::warn("removed partial checkpoint '{}' left by an interrupted save", dir.string());
      removed.push_back(dir.string());
    }
  }
  return removed;
}

void verify_checkpoint(const std::string& directory) { verify_manifest(directory); }

std::string metrics_file_path(const Config& cfg) {
  return cfg.metrics_file.empty() ? (fs::path(cfg.run_directory()) / "metrics.jsonl").string()
                                  : cfg.metrics_file;
}

void check_outputs_writable(const Config& cfg) {
  check_local_path("base_output_directory", cfg.base_output_directory);
  check_local_path("metrics_file", cfg.metrics_file);
  const fs::path run = cfg.run_directory();
  std::error_code ec;
  fs::create_directories(run, ec);
  CAROUSEL_CHECK(!ec && fs::is_directory(run),
                 "base_output_directory='{}': cannot create the run directory '{}': {}",
                 cfg.base_output_directory, run.string(),
                 ec ? ec.message() : "a file of that name exists");
  probe_write(run, fmt::format("base_output_directory='{}'", cfg.base_output_directory));
  if (cfg.enable_checkpointing) {
    const fs::path root = checkpoints_dir(cfg);
    std::error_code ec_root;
    CAROUSEL_CHECK(!fs::is_regular_file(fs::symlink_status(root, ec_root)),
                   "'{}' exists but is not a directory: checkpoints are written there (move it "
                   "away, or use another run_name or base_output_directory)",
                   root.string());
    // A symlink (the saves would land in its target), a FIFO, a device.
    check_output_directory(root, "the checkpoints directory");
    if (fs::is_directory(root)) {
      probe_write(root, "checkpoints");
      clean_partial_checkpoints(cfg);
    }
  }
  if (cfg.enable_tensorboard)
    check_output_directory(run / "tensorboard", "the TensorBoard directory");
  const std::string metrics = metrics_file_path(cfg);
  std::error_code ec_metrics;
  CAROUSEL_CHECK(!fs::is_directory(fs::symlink_status(metrics, ec_metrics)),
                 "metrics_file '{}' is a directory; give a file path (or leave metrics_file "
                 "empty for <run directory>/metrics.jsonl)",
                 metrics);
  // A symlink, FIFO or device there is refused (never appended through, never waited on).
  OutputFile(metrics, "metrics_file", OutputMode::Append, run);
  const fs::path parent = fs::absolute(metrics).parent_path();
  struct statvfs vfs {};
  CAROUSEL_CHECK(::statvfs(parent.c_str(), &vfs) != 0 || vfs.f_bavail > 0,
                 "metrics_file '{}': no space left on the file system of '{}'", metrics,
                 parent.string());
}

TensorFiles open_checkpoint_tensors(const std::string& directory,
                                    const std::vector<ParamSpec>& specs, bool moments,
                                    bool verified) {
  check_local_path("checkpoint directory", directory);
  const fs::path dir(directory);
  CAROUSEL_CHECK(fs::is_directory(dir), "checkpoint directory '{}' does not exist{}", directory,
                 relative_to_note(directory));
  if (!verified) verify_manifest(dir);
  std::vector<std::string> files;
  const nlohmann::json manifest = read_json_file(dir / "manifest.json");
  for (const auto& [file, info] : manifest.at("files").items()) {
    if (is_data_file(file) && (moments || is_model_file(file))) files.push_back(file);
  }
  TensorFiles tensors(dir, files, /*widen=*/false);
  std::set<std::string> known;
  for (const auto& spec : specs) {
    for (const char* suffix : {"", ".exp_avg", ".exp_avg_sq"}) {
      const std::string name = spec.name + suffix;
      known.insert(name);
      if (*suffix && !moments) continue;
      const SafetensorsEntry* e = tensors.find(name);
      CAROUSEL_CHECK(e,
                     "checkpoint '{}' has no tensor '{}' which the model needs (a checkpoint of "
                     "another model?)",
                     directory, name);
      CAROUSEL_CHECK(e->shape == spec.shape,
                     "checkpoint '{}': tensor '{}' has shape {} but the model needs {}",
                     tensors.path_of(name), name, shape_str(e->shape), shape_str(spec.shape));
      CAROUSEL_CHECK(e->dtype == DType::F32,
                     "checkpoint '{}': tensor '{}' is {} but carousel stores float32",
                     tensors.path_of(name), name, e->dtype_name);
    }
  }
  for (const auto& name : tensors.names()) {
    CAROUSEL_CHECK(known.count(name),
                   "checkpoint '{}' has tensor '{}' which this model does not have (a "
                   "checkpoint of another model shape?)",
                   tensors.path_of(name), name);
  }
  return tensors;
}

std::vector<std::string> checkpoint_data_files(const std::string& directory) {
  std::vector<std::string> files;
  std::error_code ec;
  for (fs::directory_iterator it(directory, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (is_data_file(name)) files.push_back(name);
  }
  std::sort(files.begin(), files.end());  // "model..." before "optimizer...", parts in order
  return files;
}

TrainingState read_training_state(const std::string& directory) {
  const fs::path state_path = fs::path(directory) / "state.json";
  const nlohmann::json st = read_json_file(state_path);
  const std::string where = fmt::format("checkpoint state '{}'", state_path.string());
  TrainingState state;
  state.step = std::int64_t(json_unsigned(json_field(st, "step", where), where, "step",
                                          std::uint64_t(std::numeric_limits<std::int64_t>::max())));
  if (st.contains("skipped_steps")) {  // absent in checkpoints from before it existed
    state.skipped_steps = std::int64_t(
        json_unsigned(st["skipped_steps"], where, "skipped_steps", std::uint64_t(state.step)));
  }
  if (st.contains("router_bias")) {  // mixture of experts with routed_bias
    const nlohmann::json& layers = st["router_bias"];
    const auto bad = [&] {
      fail(
          "{}: field 'router_bias' must be a list (one per layer) of lists of finite numbers, "
          "found {}",
          where, json_excerpt(layers));
    };
    if (!layers.is_array()) bad();
    for (const auto& layer : layers) {
      if (!layer.is_array()) bad();
      auto& bias = state.router_bias.emplace_back();
      for (const auto& b : layer) {
        if (!b.is_number() || !std::isfinite(b.get<double>())) bad();
        bias.push_back(b.get<double>());
      }
    }
  }
  return state;
}

TrainingState load_checkpoint(Backend& be, const std::string& directory,
                              const CheckpointContents& contents) {
  const bool moments = contents.adam_m && contents.adam_v;
  const TensorFiles tensors = open_checkpoint_tensors(directory, contents.params->specs, moments);
  const std::pair<const ParamSet*, const char*> sets[] = {
      {contents.params, ""}, {contents.adam_m, ".exp_avg"}, {contents.adam_v, ".exp_avg_sq"}};
  for (const auto& [set, suffix] : sets) {
    if (!set || (*suffix && !moments)) continue;
    for (std::size_t i = 0; i < set->specs.size(); ++i) {
      be.upload(tensors.read_f32(set->specs[i].name + suffix, set->specs[i].shape).data(),
                set->tensors[i]);
    }
  }
  return read_training_state(directory);
}

std::map<std::string, std::string> checkpoint_config(const std::string& directory) {
  const fs::path state_path = fs::path(directory) / "state.json";
  const nlohmann::json st = read_json_file(state_path);
  std::map<std::string, std::string> config;
  if (!st.contains("config") || !st["config"].is_object()) return config;
  for (const auto& [key, value] : st["config"].items()) {
    if (value.is_string()) config[key] = value.get<std::string>();
  }
  return config;
}

TensorFiles open_parameters(const std::string& directory, const ModelConfig& model) {
  check_local_path("load_parameters_path", directory);
  CAROUSEL_CHECK(fs::is_directory(directory), "load_parameters_path='{}' is not a directory{}",
                 directory, relative_to_note(directory));
  if (is_hf_model_directory(directory)) return open_hf_tensors(directory, model);
  CAROUSEL_CHECK(fs::exists(fs::path(directory) / "manifest.json") ||
                     fs::exists(fs::path(directory) / "state.json"),
                 "load_parameters_path='{}' is neither a carousel checkpoint (manifest.json) nor "
                 "a Hugging Face model directory (config.json with model.safetensors or "
                 "model.safetensors.index.json)",
                 directory);
  return open_checkpoint_tensors(directory, param_table(model), /*moments=*/false);
}

void load_parameters(Backend& be, const ModelConfig& model, const std::string& directory,
                     const ParamSet& params) {
  const TensorFiles tensors = open_parameters(directory, model);
  for (std::size_t i = 0; i < params.specs.size(); ++i) {
    be.upload(tensors.read_f32(params.specs[i].name, params.specs[i].shape).data(),
              params.tensors[i]);
  }
}

}  // namespace carousel
