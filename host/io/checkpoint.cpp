// checkpoint.cpp — atomic checkpoint directories with manifests; loading with validation.
#include "host/io/checkpoint.h"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>

#include "compute/error.h"
#include "host/io/files.h"
#include "host/io/hf_import.h"
#include "host/io/json_fields.h"
#include "host/io/safetensors.h"
#include "host/reliability/fault_injection.h"

namespace carousel {

namespace fs = std::filesystem;

namespace {

constexpr int kFormatVersion = 1;

void fsync_path(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_RDONLY);
  CAROUSEL_CHECK(fd >= 0, "cannot open '{}' to fsync it", p.string());
  const int rc = ::fsync(fd);
  ::close(fd);
  CAROUSEL_CHECK(rc == 0, "fsync of '{}' failed (disk full or read-only?)", p.string());
}

std::string hf_config_json(const ModelConfig& m, const TokenizerInfo* tokenizer) {
  nlohmann::ordered_json j = {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"vocab_size", m.vocab_size},
      {"hidden_size", m.emb_dim},
      {"intermediate_size", m.mlp_dim},
      {"num_hidden_layers", m.num_layers},
      {"num_attention_heads", m.num_query_heads},
      {"num_key_value_heads", m.num_kv_heads},
      {"head_dim", m.head_dim()},
      {"max_position_embeddings", m.max_target_length},
      {"rms_norm_eps", m.norm_eps},
      {"rope_theta", m.rope_max_timescale},
      {"tie_word_embeddings", m.logits_via_embedding},
      {"hidden_act", "silu"},
      {"attention_bias", false},
      {"mlp_bias", false},
      {"torch_dtype", "float32"},
  };
  if (tokenizer && tokenizer->bos_id) j["bos_token_id"] = *tokenizer->bos_id;
  if (tokenizer && tokenizer->eos_id) j["eos_token_id"] = *tokenizer->eos_id;
  return j.dump(2);
}

std::vector<float> download(Backend& be, const Tensor& t) { return be.to_host<float>(t); }

// safetensors inputs for every tensor of a set, names suffixed by `suffix`. Host memory (the
// checkpointer's whole-model sets) is written from where it is; device memory is downloaded
// into `storage` first. A second copy of the model and its moments would otherwise be made
// while an asynchronous save runs beside training.
void add_tensors(Backend& be, const ParamSet& set, const std::string& suffix,
                 std::vector<std::vector<float>>& storage, std::vector<SafetensorsInput>& out) {
  const bool host = be.allocator().host_accessible();
  for (std::size_t i = 0; i < set.specs.size(); ++i) {
    const float* data = nullptr;
    if (host) {
      data = set.tensors[i].data<float>();
    } else {
      storage.push_back(download(be, set.tensors[i]));
      data = storage.back().data();
    }
    out.push_back({set.specs[i].name + suffix, DType::F32, set.specs[i].shape, data});
  }
}

void load_tensors(Backend& be, const SafetensorsFile& file, const ParamSet& set,
                  const std::string& suffix) {
  for (std::size_t i = 0; i < set.specs.size(); ++i) {
    const std::string name = set.specs[i].name + suffix;
    const auto it = file.entries().find(name);
    CAROUSEL_CHECK(it != file.entries().end(),
                   "checkpoint '{}' has no tensor '{}' which the model needs (a checkpoint of "
                   "another model?)",
                   file.path(), name);
    CAROUSEL_CHECK(it->second.shape == set.specs[i].shape,
                   "checkpoint '{}': tensor '{}' has shape {} but the model needs {}", file.path(),
                   name, shape_str(it->second.shape), shape_str(set.specs[i].shape));
    CAROUSEL_CHECK(it->second.dtype == DType::F32,
                   "checkpoint '{}': tensor '{}' is {} but carousel stores float32", file.path(),
                   name, it->second.dtype_name);
    check_finite_f32(file.data(name), it->second.shape, file.path(), name);
    be.upload(file.data(name), set.tensors[i]);
  }
  for (const auto& [name, entry] : file.entries()) {
    if (name.size() < suffix.size() ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    CAROUSEL_CHECK(set.index_of(name.substr(0, name.size() - suffix.size())) >= 0,
                   "checkpoint '{}' has tensor '{}' which this model does not have (a "
                   "checkpoint of another model shape?)",
                   file.path(), name);
  }
}

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
    if (!version.is_number_integer() || version.get<std::int64_t>() != kFormatVersion) {
      throw FormatVersionError(fmt::format(
          "{}: format_version {} is not one this carousel reads ({}): the checkpoint was written "
          "by another carousel version; resume it with that version, or start a new run (another "
          "run_name)",
          where, version.dump(), kFormatVersion));
    }
  }
  const auto& files = json_field(manifest, "files", where);
  CAROUSEL_CHECK(files.is_object(), "{}: field 'files' must be an object, found {}", where,
                 files.type_name());
  for (const char* required : {"model.safetensors", "state.json"}) {
    CAROUSEL_CHECK(files.contains(required), "{}: 'files' does not list '{}'", where, required);
  }
  for (const auto& [file, info] : files.items()) {
    CAROUSEL_CHECK(!file.empty() && file.find('/') == std::string::npos && file != "..",
                   "{}: '{}' is not a file name inside the checkpoint", where, file);
    const std::string entry = fmt::format("{}: files.{}", where, file);
    const std::uint64_t bytes = json_unsigned(json_field(info, "bytes", entry), entry, "bytes");
    const std::uint64_t crc =
        json_unsigned(json_field(info, "crc32", entry), entry, "crc32", 0xffffffffULL);
    const fs::path p = dir / file;
    CAROUSEL_CHECK(fs::is_regular_file(p),
                   "checkpoint '{}': file '{}' listed in the manifest is missing", dir.string(),
                   file);
    const auto size = fs::file_size(p);
    CAROUSEL_CHECK(size == bytes,
                   "checkpoint '{}': '{}' is {} bytes but the manifest says {} (truncated?)",
                   dir.string(), file, size, bytes);
    CAROUSEL_CHECK(file_crc32(p) == crc, "checkpoint '{}': '{}' fails its CRC32 check (corrupt)",
                   dir.string(), file);
  }
}

// The step of a directory name of decimal digits (at most 18: no overflow), or -1.
std::int64_t step_of(const std::string& name) {
  if (name.empty() || name.size() > 18 || name.find_first_not_of("0123456789") != std::string::npos)
    return -1;
  return std::stoll(name);
}

fs::path checkpoints_dir(const Config& cfg) {
  return fs::path(cfg.run_directory()) / "checkpoints";
}

bool process_alive(long pid) { return pid > 0 && (::kill(pid_t(pid), 0) == 0 || errno == EPERM); }

// Writes, fsyncs and removes a small file in `dir`: finds read-only, unwritable and full file
// systems. `what` names the setting in the error.
void probe_write(const fs::path& dir, const std::string& what) {
  const fs::path probe = dir / fmt::format(".carousel-write-probe-{}", ::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  CAROUSEL_CHECK(fd >= 0, "{}: cannot create a file in '{}': {}", what, dir.string(),
                 std::strerror(errno));
  const std::vector<char> block(4096, 0);
  const bool wrote = ::write(fd, block.data(), block.size()) == ssize_t(block.size());
  const int write_errno = errno;
  const bool synced = wrote && ::fsync(fd) == 0;
  const int sync_errno = errno;
  ::close(fd);
  ::unlink(probe.c_str());
  CAROUSEL_CHECK(wrote, "{}: cannot write to '{}': {}", what, dir.string(),
                 std::strerror(write_errno));
  CAROUSEL_CHECK(synced, "{}: cannot write to '{}': {}", what, dir.string(),
                 std::strerror(sync_errno));
}

}  // namespace

std::string save_checkpoint(Backend& be, const Config& cfg, const CheckpointContents& contents,
                            const TrainingState& state, const TokenizerInfo* tokenizer) {
  check_local_path("base_output_directory", cfg.base_output_directory);
  const fs::path root = checkpoints_dir(cfg);
  std::error_code ec;
  fs::create_directories(root, ec);
  CAROUSEL_CHECK(!ec && fs::is_directory(root), "cannot create the checkpoints directory '{}': {}",
                 root.string(), ec ? ec.message() : "a file of that name exists");
  clean_partial_checkpoints(cfg);
  const fs::path final_dir = root / std::to_string(state.step);
  if (fs::exists(final_dir)) {
    // A verified checkpoint is never touched; an unusable one (which latest_checkpoint skipped,
    // so this run retrained its steps) is renamed aside, not deleted.
    std::string problem;
    try {
      verify_manifest(final_dir);
    } catch (const Error& e) {
      problem = e.what();
    }
    CAROUSEL_CHECK(!problem.empty(),
                   "checkpoint directory '{}' already exists; refusing to overwrite it (use "
                   "another run_name or base_output_directory)",
                   final_dir.string());
    fs::path aside;
    for (int i = 0; fs::exists(aside = root / fmt::format("{}.unusable-{}", state.step, i)); ++i) {
    }
    fs::rename(final_dir, aside);
    spdlog::warn("checkpoint '{}' is unusable ({}); moved to '{}' to save step {} in its place",
                 final_dir.string(), problem, aside.string(), state.step);
  }
  const fs::path tmp = root / fmt::format(".tmp-{}-{}", state.step, ::getpid());
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  maybe_slow_save(state.step);
  maybe_kill("begin", state.step);  // test faults: a crash at each point of a save

  std::vector<std::vector<float>> storage;
  std::vector<SafetensorsInput> model_tensors;
  storage.reserve(3 * contents.params->specs.size());
  add_tensors(be, *contents.params, "", storage, model_tensors);
  write_safetensors((tmp / "model.safetensors").string(), model_tensors, {{"format", "pt"}});
  maybe_kill("model", state.step);
  std::vector<std::string> files = {"model.safetensors", "config.json", "state.json"};
  if (contents.adam_m && contents.adam_v) {
    std::vector<SafetensorsInput> opt;
    add_tensors(be, *contents.adam_m, ".exp_avg", storage, opt);
    add_tensors(be, *contents.adam_v, ".exp_avg_sq", storage, opt);
    write_safetensors((tmp / "optimizer.safetensors").string(), opt);
    files.push_back("optimizer.safetensors");
  }
  // The tokenizer travels with the weights, so the directory is a whole Hugging Face model. A
  // tokenizer that vanished since the run started costs its copy, not the checkpoint.
  if (tokenizer) {
    try {
      for (auto& name : copy_tokenizer_files(*tokenizer, tmp, cfg.model.max_target_length)) {
        files.push_back(std::move(name));
      }
    } catch (const std::exception& e) {
      spdlog::warn("checkpoint of step {} is saved without the tokenizer: {}", state.step,
                   e.what());
      tokenizer = nullptr;
    }
  }
  write_text_file(tmp / "config.json", hf_config_json(cfg.model, tokenizer));
  nlohmann::ordered_json st = {{"format_version", kFormatVersion},
                               {"step", state.step},
                               {"skipped_steps", state.skipped_steps}};
  for (const auto& key : config_keys()) st["config"][key.name] = key.get(cfg);
  write_text_file(tmp / "state.json", st.dump(2));

  nlohmann::ordered_json manifest;
  manifest["format_version"] = kFormatVersion;
  for (const auto& f : files) {
    fsync_path(tmp / f);
    manifest["files"][f] = {{"bytes", fs::file_size(tmp / f)}, {"crc32", file_crc32(tmp / f)}};
  }
  write_text_file(tmp / "manifest.json", manifest.dump(2));
  fsync_path(tmp / "manifest.json");
  fsync_path(tmp);
  maybe_kill("manifest", state.step);
  fs::rename(tmp, final_dir);
  maybe_kill("renamed", state.step);
  fsync_path(root);
  return final_dir.string();
}

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
    CAROUSEL_CHECK(!fs::exists(root) || fs::is_directory(root),
                   "'{}' exists but is not a directory: checkpoints are written there (move it "
                   "away, or use another run_name or base_output_directory)",
                   root.string());
    if (fs::is_directory(root)) {
      probe_write(root, "checkpoints");
      clean_partial_checkpoints(cfg);
    }
  }
  const std::string metrics = metrics_file_path(cfg);
  CAROUSEL_CHECK(!fs::is_directory(metrics),
                 "metrics_file '{}' is a directory; give a file path (or leave metrics_file "
                 "empty for <run directory>/metrics.jsonl)",
                 metrics);
  check_output_file("metrics_file", metrics, "the metrics file");
  {
    std::ofstream out(metrics, std::ios::app);
    CAROUSEL_CHECK(out.good(), "metrics_file '{}' cannot be opened for appending: {}", metrics,
                   std::strerror(errno));
  }
  const fs::path parent = fs::absolute(metrics).parent_path();
  struct statvfs vfs {};
  CAROUSEL_CHECK(::statvfs(parent.c_str(), &vfs) != 0 || vfs.f_bavail > 0,
                 "metrics_file '{}': no space left on the file system of '{}'", metrics,
                 parent.string());
}

TrainingState load_checkpoint(Backend& be, const std::string& directory,
                              const CheckpointContents& contents) {
  check_local_path("checkpoint directory", directory);
  const fs::path dir(directory);
  CAROUSEL_CHECK(fs::is_directory(dir), "checkpoint directory '{}' does not exist{}", directory,
                 relative_to_note(directory));
  verify_manifest(dir);
  load_tensors(be, SafetensorsFile((dir / "model.safetensors").string()), *contents.params, "");
  if (contents.adam_m && contents.adam_v) {
    SafetensorsFile opt((dir / "optimizer.safetensors").string());
    load_tensors(be, opt, *contents.adam_m, ".exp_avg");
    load_tensors(be, opt, *contents.adam_v, ".exp_avg_sq");
  }
  const fs::path state_path = dir / "state.json";
  const nlohmann::json st = read_json_file(state_path);
  const std::string where = fmt::format("checkpoint state '{}'", state_path.string());
  TrainingState state;
  state.step = std::int64_t(json_unsigned(json_field(st, "step", where), where, "step",
                                          std::uint64_t(std::numeric_limits<std::int64_t>::max())));
  if (st.contains("skipped_steps")) {  // absent in checkpoints from before it existed
    state.skipped_steps = std::int64_t(
        json_unsigned(st["skipped_steps"], where, "skipped_steps", std::uint64_t(state.step)));
  }
  return state;
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

void load_parameters(Backend& be, const ModelConfig& model, const std::string& directory,
                     const ParamSet& params) {
  check_local_path("load_parameters_path", directory);
  CAROUSEL_CHECK(fs::is_directory(directory), "load_parameters_path='{}' is not a directory{}",
                 directory, relative_to_note(directory));
  if (is_hf_model_directory(directory)) return load_hf_model(be, directory, model, params);
  CAROUSEL_CHECK(fs::exists(fs::path(directory) / "manifest.json") ||
                     fs::exists(fs::path(directory) / "state.json"),
                 "load_parameters_path='{}' is neither a carousel checkpoint (manifest.json) nor "
                 "a Hugging Face model directory (config.json with model.safetensors or "
                 "model.safetensors.index.json)",
                 directory);
  load_checkpoint(be, directory, {&params, nullptr, nullptr});
}

}  // namespace carousel
