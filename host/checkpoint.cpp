// checkpoint.cpp — atomic checkpoint directories with manifests; loading with validation.
#include "host/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cuda/error.h"
#include "host/safetensors.h"

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

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::trunc);
  out << text;
  out.flush();
  CAROUSEL_CHECK(out.good(), "writing '{}' failed (disk full?)", p.string());
}

std::uint32_t file_crc32(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> buf(1 << 20);
  uLong crc = crc32(0L, Z_NULL, 0);
  while (in) {
    in.read(buf.data(), std::streamsize(buf.size()));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(buf.data()), uInt(in.gcount()));
  }
  return std::uint32_t(crc);
}

std::string hf_config_json(const ModelConfig& m) {
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
  return j.dump(2);
}

std::vector<float> download(Backend& be, const Tensor& t) { return be.to_host<float>(t); }

// safetensors inputs for every tensor of a set, names suffixed by `suffix`.
void add_tensors(Backend& be, const ParamSet& set, const std::string& suffix,
                 std::vector<std::vector<float>>& storage, std::vector<SafetensorsInput>& out) {
  for (std::size_t i = 0; i < set.specs.size(); ++i) {
    storage.push_back(download(be, set.tensors[i]));
  }
  const std::size_t first = storage.size() - set.specs.size();
  for (std::size_t i = 0; i < set.specs.size(); ++i) {
    out.push_back({set.specs[i].name + suffix, DType::F32, set.specs[i].shape,
                   storage[first + i].data()});
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
                   "checkpoint '{}': tensor '{}' has shape {} but the model needs {}",
                   file.path(), name, shape_str(it->second.shape),
                   shape_str(set.specs[i].shape));
    CAROUSEL_CHECK(it->second.dtype == DType::F32,
                   "checkpoint '{}': tensor '{}' is {} but carousel stores float32",
                   file.path(), name, safetensors_dtype(it->second.dtype));
    be.upload(file.data(name), set.tensors[i]);
  }
  for (const auto& [name, entry] : file.entries()) {
    if (name.size() < suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(),
                                                    suffix) != 0) {
      continue;
    }
    CAROUSEL_CHECK(set.index_of(name.substr(0, name.size() - suffix.size())) >= 0,
                   "checkpoint '{}' has tensor '{}' which this model does not have (a "
                   "checkpoint of another model shape?)",
                   file.path(), name);
  }
}

fs::path checkpoints_dir(const Config& cfg) { return fs::path(cfg.run_directory()) / "checkpoints"; }

void verify_manifest(const fs::path& dir) {
  const fs::path manifest_path = dir / "manifest.json";
  CAROUSEL_CHECK(fs::is_regular_file(manifest_path),
                 "'{}' is not a complete checkpoint: manifest.json is missing", dir.string());
  nlohmann::json manifest;
  try {
    manifest = nlohmann::json::parse(std::ifstream(manifest_path));
  } catch (const nlohmann::json::exception& e) {
    fail("checkpoint manifest '{}' is not valid JSON: {}", manifest_path.string(), e.what());
  }
  for (const auto& [file, info] : manifest.at("files").items()) {
    const fs::path p = dir / file;
    CAROUSEL_CHECK(fs::is_regular_file(p), "checkpoint '{}': file '{}' listed in the manifest is "
                   "missing", dir.string(), file);
    const auto size = fs::file_size(p);
    CAROUSEL_CHECK(size == info.at("bytes").get<std::uintmax_t>(),
                   "checkpoint '{}': '{}' is {} bytes but the manifest says {} (truncated?)",
                   dir.string(), file, size, info.at("bytes").get<std::uintmax_t>());
    CAROUSEL_CHECK(file_crc32(p) == info.at("crc32").get<std::uint32_t>(),
                   "checkpoint '{}': '{}' fails its CRC32 check (corrupt)", dir.string(), file);
  }
}

}  // namespace

std::string save_checkpoint(Backend& be, const Config& cfg, const CheckpointContents& contents,
                            const TrainingState& state) {
  const fs::path root = checkpoints_dir(cfg);
  const fs::path final_dir = root / std::to_string(state.step);
  CAROUSEL_CHECK(!fs::exists(final_dir), "checkpoint directory '{}' already exists; refusing to "
                 "overwrite it (use another run_name or base_output_directory)",
                 final_dir.string());
  const fs::path tmp = root / fmt::format(".tmp-{}-{}", state.step, ::getpid());
  fs::remove_all(tmp);
  fs::create_directories(tmp);

  std::vector<std::vector<float>> storage;
  std::vector<SafetensorsInput> model_tensors;
  storage.reserve(3 * contents.params->specs.size());
  add_tensors(be, *contents.params, "", storage, model_tensors);
  write_safetensors((tmp / "model.safetensors").string(), model_tensors, {{"format", "pt"}});
  std::vector<std::string> files = {"model.safetensors", "config.json", "state.json"};
  if (contents.adam_m && contents.adam_v) {
    std::vector<SafetensorsInput> opt;
    add_tensors(be, *contents.adam_m, ".exp_avg", storage, opt);
    add_tensors(be, *contents.adam_v, ".exp_avg_sq", storage, opt);
    write_safetensors((tmp / "optimizer.safetensors").string(), opt);
    files.push_back("optimizer.safetensors");
  }
  write_text(tmp / "config.json", hf_config_json(cfg.model));
  nlohmann::ordered_json st = {{"format_version", kFormatVersion}, {"step", state.step}, {"skipped_steps", state.skipped_steps}};
  for (const auto& key : config_keys()) st["config"][key.name] = key.get(cfg);
  write_text(tmp / "state.json", st.dump(2));

  nlohmann::ordered_json manifest;
  manifest["format_version"] = kFormatVersion;
  for (const auto& f : files) {
    fsync_path(tmp / f);
    manifest["files"][f] = {{"bytes", fs::file_size(tmp / f)}, {"crc32", file_crc32(tmp / f)}};
  }
  write_text(tmp / "manifest.json", manifest.dump(2));
  fsync_path(tmp / "manifest.json");
  fsync_path(tmp);
  fs::rename(tmp, final_dir);
  fsync_path(root);
  return final_dir.string();
}

std::optional<std::string> latest_checkpoint(const Config& cfg) {
  const fs::path root = checkpoints_dir(cfg);
  if (!fs::is_directory(root)) return std::nullopt;
  std::int64_t best = -1;
  for (const auto& entry : fs::directory_iterator(root)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    if (!fs::is_regular_file(entry.path() / "manifest.json")) continue;
    best = std::max<std::int64_t>(best, std::stoll(name));
  }
  if (best < 0) return std::nullopt;
  return (root / std::to_string(best)).string();
}

TrainingState load_checkpoint(Backend& be, const std::string& directory,
                              const CheckpointContents& contents) {
  const fs::path dir(directory);
  CAROUSEL_CHECK(fs::is_directory(dir), "checkpoint directory '{}' does not exist", directory);
  verify_manifest(dir);
  load_tensors(be, SafetensorsFile((dir / "model.safetensors").string()), *contents.params, "");
  if (contents.adam_m && contents.adam_v) {
    SafetensorsFile opt((dir / "optimizer.safetensors").string());
    load_tensors(be, opt, *contents.adam_m, ".exp_avg");
    load_tensors(be, opt, *contents.adam_v, ".exp_avg_sq");
  }
  nlohmann::json st;
  try {
    st = nlohmann::json::parse(std::ifstream(dir / "state.json"));
  } catch (const nlohmann::json::exception& e) {
    fail("checkpoint '{}': state.json is not valid JSON: {}", directory, e.what());
  }
  TrainingState state;
  state.step = st.at("step").get<std::int64_t>();
  state.skipped_steps = st.value("skipped_steps", std::int64_t(0));  // absent before it existed
  return state;
}

}  // namespace carousel
