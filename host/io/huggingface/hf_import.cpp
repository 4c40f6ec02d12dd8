// hf_import.cpp — reading a Hugging Face Llama directory (config.json + safetensors, single
// file or sharded) into the parameter table; see hf_import.h.
#include "host/io/huggingface/hf_import.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "compute/error.h"
#include "host/io/huggingface/hf_architectures.h"
#include "host/io/json_fields.h"
#include "host/io/safetensors.h"

namespace carousel {

namespace fs = std::filesystem;

namespace {

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

// "a, b, c and 7 more": names in errors and debug lines stay one readable line.
std::string name_list(const std::vector<std::string>& names, std::size_t shown = 12) {
  std::string s;
  for (std::size_t i = 0; i < names.size() && i < shown; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > shown) s += fmt::format(" and {} more", names.size() - shown);
  return s;
}

// config.json fields, with errors naming the file and the field.
struct HfConfig {
  nlohmann::json j;
  std::string where;  // "'<dir>/config.json'"

  bool has(const char* key) const { return j.contains(key) && !j[key].is_null(); }
  std::int64_t integer(const char* key) const {
    CAROUSEL_CHECK(has(key), "{}: field '{}' is missing (a Llama config.json has it)", where, key);
    const auto& v = j[key];
    CAROUSEL_CHECK(v.is_number_integer(), "{}: field '{}' must be an integer, found {} {}", where,
                   key, v.type_name(), v.dump());
    return v.get<std::int64_t>();
  }
  std::int64_t integer(const char* key, std::int64_t fallback) const {
    return has(key) ? integer(key) : fallback;
  }
  double number(const nlohmann::json& obj, const char* key, double fallback) const {
    if (!obj.contains(key) || obj[key].is_null()) return fallback;
    const auto& v = obj[key];
    CAROUSEL_CHECK(v.is_number(), "{}: field '{}' must be a number, found {} {}", where, key,
                   v.type_name(), v.dump());
    return v.get<double>();
  }
  bool boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    CAROUSEL_CHECK(j[key].is_boolean(), "{}: field '{}' must be true or false, found {}", where,
                   key, j[key].dump());
    return j[key].get<bool>();
  }
};

// A rope_scaling / rope_parameters object other than plain RoPE, or "".
std::string rope_variant(const HfConfig& c, const char* key) {
  if (!c.has(key)) return "";
  const auto& r = c.j[key];
  if (!r.is_object()) return r.dump();
  for (const char* field : {"rope_type", "type"}) {
    if (r.contains(field) && r[field].is_string()) {
      const std::string type = r[field].get<std::string>();
      return type == "default" ? "" : type;
    }
  }
  return r.dump();
}

HfConfig read_hf_config(const fs::path& path) {
  HfConfig c{read_json_file(path), fmt::format("'{}'", path.string())};
  CAROUSEL_CHECK(c.j.is_object(), "{} must hold a JSON object, found {}", c.where, c.j.type_name());
  return c;
}

// rope_theta, or (transformers >= 5) rope_parameters.rope_theta; 10000 when neither is there.
double rope_theta(const HfConfig& c) {
  if (!c.has("rope_theta") && c.has("rope_parameters") && c.j["rope_parameters"].is_object()) {
    return c.number(c.j["rope_parameters"], "rope_theta", 10000.0);
  }
  return c.number(c.j, "rope_theta", 10000.0);
}

// What carousel does not implement (no key fixes these), one line each.
std::vector<std::string> unsupported_features(const HfConfig& c) {
  std::vector<std::string> unsupported;
  if (!c.has("model_type")) {  // every transformers config names its architecture
    unsupported.push_back(
        "model_type is missing (carousel trains \"llama\"; add \"model_type\": \"llama\" if this "
        "is a Llama)");
  } else if (!c.j["model_type"].is_string()) {
    unsupported.push_back(fmt::format("model_type={} (a string)", c.j["model_type"].dump()));
  } else {
    try {
      const auto more = hf_architecture(c.j["model_type"].get<std::string>()).unsupported(c.j);
      unsupported.insert(unsupported.end(), more.begin(), more.end());
    } catch (const Error& e) {
      unsupported.push_back(e.what());
    }
  }
  if (c.has("hidden_act") && c.j["hidden_act"] != "silu") {
    unsupported.push_back(
        fmt::format("hidden_act={} (carousel's MLP uses \"silu\")", c.j["hidden_act"].dump()));
  }
  for (const char* bias : {"attention_bias", "mlp_bias"}) {
    if (c.boolean(bias, false)) {
      unsupported.push_back(fmt::format("{}=true (carousel's projections have no bias)", bias));
    }
  }
  for (const char* rope : {"rope_scaling", "rope_parameters"}) {
    const std::string variant = rope_variant(c, rope);
    if (!variant.empty()) {
      unsupported.push_back(
          fmt::format("{} of type {} (carousel implements plain RoPE only)", rope, variant));
    }
  }
  const std::int64_t heads = c.has("head_dim") ? c.integer("num_attention_heads") : 0;
  if (heads > 0) {
    const std::int64_t hidden = c.integer("hidden_size");
    const std::int64_t head_dim = c.integer("head_dim");
    if (head_dim != hidden / heads || hidden % heads != 0) {
      unsupported.push_back(fmt::format(
          "head_dim={} is not hidden_size / num_attention_heads = {} / {} (carousel's head "
          "dimension is always base_emb_dim / base_num_query_heads; there is no head_dim key)",
          head_dim, hidden, heads));
    }
  }
  return unsupported;
}

// The config's architecture row, or nullptr when carousel does not read it (unsupported_features
// says why).
const HfArchitecture* architecture_of(const HfConfig& c) {
  if (!c.has("model_type") || !c.j["model_type"].is_string()) return nullptr;
  try {
    return &hf_architecture(c.j["model_type"].get<std::string>());
  } catch (const Error&) {
    return nullptr;
  }
}

// A config value as a key=value setting takes it (strings unquoted).
std::string setting_text(const nlohmann::json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

// The value of a row's field in the config (its default when absent; null when it has none).
nlohmann::json field_value(const HfConfig& c, const HfField& f) {
  return c.has(f.hf_key.c_str()) ? c.j[f.hf_key] : f.absent;
}

// One error listing every key that differs (`differ`, with the `settings` that fix them) and
// every unsupported feature; nothing when all are empty.
void fail_on_mismatch(const std::string& directory, const std::vector<std::string>& differ,
                      const std::vector<std::string>& settings,
                      const std::vector<std::string>& unsupported) {
  if (differ.empty() && unsupported.empty()) return;
  std::string msg =
      fmt::format("load_parameters_path='{}': config.json does not match this run", directory);
  for (const auto& d : differ) msg += "\n  " + d;
  for (const auto& u : unsupported) msg += "\n  not supported: " + u;
  if (!settings.empty()) {
    std::string all;
    for (const auto& s : settings) all += (all.empty() ? "" : " ") + s;
    msg += "\n  (all on the command line: " + all + ")";
  }
  fail("{}", msg);
}

// The model `c` describes (max_target_length: max_position_embeddings, 2048 when absent).
ModelConfig hf_model(const HfConfig& c) {
  ModelConfig m;
  m.vocab_size = c.integer("vocab_size");
  m.emb_dim = c.integer("hidden_size");
  m.num_layers = c.integer("num_hidden_layers");
  m.num_query_heads = c.integer("num_attention_heads");
  m.num_kv_heads = c.integer("num_key_value_heads", m.num_query_heads);
  m.mlp_dim = c.integer("intermediate_size");
  m.max_target_length = c.integer("max_position_embeddings", 2048);
  m.norm_eps = c.number(c.j, "rms_norm_eps", 1e-6);
  m.rope_max_timescale = rope_theta(c);
  m.logits_via_embedding = c.boolean("tie_word_embeddings", false);
  if (const HfArchitecture* row = architecture_of(c)) {
    for (const HfField& f : row->fields) {
      const nlohmann::json v = field_value(c, f);
      CAROUSEL_CHECK(!v.is_null(), "{}: field '{}' is missing (a {} config.json has it)", c.where,
                     f.hf_key, row->model_type);
      try {
        f.set(m, v);
      } catch (const nlohmann::json::exception&) {
        fail("{}: field '{}' = {} is not a value of {}", c.where, f.hf_key, v.dump(), f.key);
      }
    }
    for (const HfField& f : row->implied) f.set(m, f.absent);
  }
  return m;
}

// m.validate() with the message naming the config.json field that set the invalid key: a damaged
// or foreign file (num_hidden_layers=-8) is refused as such, where the comparison with a run
// advised setting base_num_decoder_layers=-8.
void validate_hf_model(const HfConfig& c, const ModelConfig& m) {
  try {
    m.validate();
  } catch (const Error& e) {
    const std::string message = e.what();
    std::map<std::string, std::string> field_of = {
        {"vocab_size", "vocab_size"},
        {"base_emb_dim", "hidden_size"},
        {"base_num_decoder_layers", "num_hidden_layers"},
        {"base_num_query_heads", "num_attention_heads"},
        {"base_num_kv_heads", "num_key_value_heads"},
        {"base_mlp_dim", "intermediate_size"},
        {"max_target_length", "max_position_embeddings"},
        {"normalization_layer_epsilon", "rms_norm_eps"},
        {"rope_max_timescale", "rope_theta"}};
    if (const HfArchitecture* row = architecture_of(c)) {
      for (const HfField& f : row->fields) field_of[f.key] = f.hf_key;
    }
    const auto eq = message.find('=');
    const auto it = eq == std::string::npos ? field_of.end() : field_of.find(message.substr(0, eq));
    if (it == field_of.end()) fail("{} describes no model carousel can build: {}", c.where, message);
    const nlohmann::json value = c.has(it->second.c_str()) ? c.j[it->second] : nlohmann::json();
    fail("{}: {}={} is not a valid value (carousel reads it as {}: {}); the file is damaged or "
         "not a model's config.json",
         c.where, it->second, value.is_null() ? "(absent)" : value.dump(), it->first, message);
  }
}

}  // namespace

bool is_hf_model_directory(const std::string& directory) {
  const fs::path dir(directory);
  return fs::is_regular_file(dir / "config.json") && !fs::exists(dir / "manifest.json") &&
         !fs::exists(dir / "state.json");
}

void check_hf_config(const std::string& directory, const ModelConfig& model) {
  const fs::path path = fs::path(directory) / "config.json";
  const HfConfig c = read_hf_config(path);
  CAROUSEL_CHECK(model.is_llama(),
                 "decoder_block={} cannot start from the Hugging Face Llama model in '{}' "
                 "(set decoder_block=llama)",
                 model.decoder_block, directory);
  std::vector<std::string> unsupported = unsupported_features(c);
  // The file's own model first: advice to set a key to an invalid value helps no one. The run's
  // length stands in for max_position_embeddings, which may differ (a warning below).
  std::optional<ModelConfig> described;
  try {
    described = hf_model(c);
  } catch (const Error&) {  // a missing or mistyped field: the comparison below names it
  }
  if (described) {
    described->max_target_length = model.max_target_length;
    validate_hf_model(c, *described);
  }

  // Keys that must equal the run's: (HF key, HF value, carousel key, carousel value).
  std::vector<std::string> differ, settings;
  const auto compare = [&](const char* hf_key, const std::string& hf, const char* key,
                           const std::string& ours, bool equal) {
    if (equal) return;
    differ.push_back(fmt::format("{}={} but {}={}: set {}={}", hf_key, hf, key, ours, key, hf));
    settings.push_back(fmt::format("{}={}", key, hf));
  };
  const auto compare_int = [&](const char* hf_key, std::int64_t hf, const char* key,
                               std::int64_t ours) {
    compare(hf_key, std::to_string(hf), key, std::to_string(ours), hf == ours);
  };
  const std::int64_t heads = c.integer("num_attention_heads");
  compare_int("hidden_size", c.integer("hidden_size"), "base_emb_dim", model.emb_dim);
  compare_int("intermediate_size", c.integer("intermediate_size"), "base_mlp_dim", model.mlp_dim);
  compare_int("num_hidden_layers", c.integer("num_hidden_layers"), "base_num_decoder_layers",
              model.num_layers);
  compare_int("num_attention_heads", heads, "base_num_query_heads", model.num_query_heads);
  compare_int("num_key_value_heads", c.integer("num_key_value_heads", heads), "base_num_kv_heads",
              model.num_kv_heads);
  compare_int("vocab_size", c.integer("vocab_size"), "vocab_size", model.vocab_size);
  const double eps = c.number(c.j, "rms_norm_eps", 1e-6);
  compare("rms_norm_eps", fmt::format("{}", eps), "normalization_layer_epsilon",
          fmt::format("{}", model.norm_eps), same_hf_value(eps, model.norm_eps));
  const double theta = rope_theta(c);
  compare("rope_theta", fmt::format("{}", theta), "rope_max_timescale",
          fmt::format("{}", model.rope_max_timescale),
          same_hf_value(theta, model.rope_max_timescale));
  const bool tied = c.boolean("tie_word_embeddings", false);
  compare("tie_word_embeddings", tied ? "true" : "false", "logits_via_embedding",
          model.logits_via_embedding ? "true" : "false", tied == model.logits_via_embedding);
  // The architecture's own fields (experts) and what it implies.
  if (const HfArchitecture* row = architecture_of(c)) {
    const auto fixed = [&](const std::string& key, const nlohmann::json& value,
                           const nlohmann::json& ours) {
      if (same_hf_value(value, ours)) return;
      differ.push_back(fmt::format("model_type={} has {}={} but {}={}: set {}={}", row->model_type,
                                   key, setting_text(value), key, setting_text(ours), key,
                                   setting_text(value)));
      settings.push_back(fmt::format("{}={}", key, setting_text(value)));
    };
    if (row->fields.empty()) fixed("num_experts", 1, model.num_experts);  // a dense model
    for (const HfField& f : row->fields) {
      const nlohmann::json hf = field_value(c, f);
      if (hf.is_null()) {
        unsupported.push_back(
            fmt::format("{} is missing (a {} config.json has it)", f.hf_key, row->model_type));
        continue;
      }
      compare(f.hf_key.c_str(), setting_text(hf), f.key.c_str(), setting_text(f.get(model)),
              same_hf_value(hf, f.get(model)));
    }
    for (const HfField& f : row->implied) fixed(f.key, f.absent, f.get(model));
  }
  fail_on_mismatch(directory, differ, settings, unsupported);
  const std::int64_t max_positions = c.integer("max_position_embeddings", 2048);
  if (model.max_target_length > max_positions) {
    spdlog::warn(
        "max_target_length={} is longer than the model's max_position_embeddings={} ('{}'): "
        "it was not trained on positions that far",
        model.max_target_length, max_positions, path.string());
  }
}

ModelConfig model_from_hf_config(const std::string& path) {
  const fs::path file = fs::is_directory(path) ? fs::path(path) / "config.json" : fs::path(path);
  CAROUSEL_CHECK(fs::is_regular_file(file),
                 "'{}' is not a Hugging Face config.json (nor a directory holding one)", path);
  const HfConfig c = read_hf_config(file);
  const ModelConfig m = hf_model(c);
  validate_hf_model(c, m);
  // The model is this file's, so only what carousel does not implement can differ.
  fail_on_mismatch(file.parent_path().string(), {}, {}, unsupported_features(c));
  return m;
}

TensorFiles open_hf_tensors(const std::string& directory, const ModelConfig& model) {
  const fs::path dir(directory);
  const bool one_file = fs::exists(dir / kSingleFile);
  CAROUSEL_CHECK(one_file || fs::exists(dir / kIndexFile),
                 "load_parameters_path='{}' has config.json but neither {} nor {} (weights in "
                 "pytorch_model.bin are not read: save them with safe_serialization=True)",
                 directory, kSingleFile, kIndexFile);
  check_hf_config(directory, model);  // before reading gigabytes of weights
  // The architecture's names for carousel's tensors (checked above: it is one carousel reads).
  const HfArchitecture& row = *architecture_of(read_hf_config(dir / "config.json"));
  // Which file holds each tensor: one file, or the index's weight_map (as transformers does,
  // model.safetensors wins when both exist).
  std::map<std::string, std::string> file_of;  // tensor name -> file name in `dir`
  if (one_file) {
    const SafetensorsFile single((dir / kSingleFile).string());  // its header only
    for (const auto& [name, entry] : single.entries()) file_of[name] = kSingleFile;
  } else {
    const fs::path index_path = dir / kIndexFile;
    const nlohmann::json index = read_json_file(index_path);
    const std::string where = fmt::format("'{}'", index_path.string());
    const auto& map = json_field(index, "weight_map", where);
    CAROUSEL_CHECK(map.is_object(), "{}: field 'weight_map' must be an object, found {}", where,
                   map.type_name());
    for (const auto& [name, file] : map.items()) {
      const std::string f = json_string(file, where, "weight_map." + name);
      CAROUSEL_CHECK(!f.empty() && f.find('/') == std::string::npos && f != "." && f != "..",
                     "{}: weight_map.{} = '{}' is not a file name inside the directory", where,
                     name, f);
      file_of[name] = f;
    }
  }
  const std::vector<ParamSpec> specs = param_table(model);
  std::set<std::string> files;  // those holding a tensor the model needs
  std::vector<std::string> missing, extra;
  for (const auto& spec : specs) {
    const auto it = file_of.find(row.file_name(spec.name));
    if (it == file_of.end()) {
      missing.push_back(row.file_name(spec.name));
      continue;
    }
    std::error_code ec;  // a name the file system refuses (too long) does not exist either
    CAROUSEL_CHECK(fs::exists(dir / it->second, ec),
                   "'{}': weight_map puts tensor '{}' in '{}', which does not exist in '{}' (a "
                   "shard missing from the download?)",
                   (dir / kIndexFile).string(), it->first, it->second, directory);
    files.insert(it->second);
  }
  CAROUSEL_CHECK(missing.empty(),
                 "load_parameters_path='{}' lacks {} tensor(s) the model needs: {} (weights of "
                 "another model, or a partial save?)",
                 directory, missing.size(), name_list(missing));
  TensorFiles tensors(dir, {files.begin(), files.end()}, /*widen=*/true);
  tensors.use_file_names(row.file_name);
  for (const auto& spec : specs) {
    const SafetensorsEntry* e = tensors.find(spec.name);
    const std::string& file = file_of[row.file_name(spec.name)];
    CAROUSEL_CHECK(e && tensors.path_of(spec.name) == (dir / file).string(),
                   "'{}': weight_map puts tensor '{}' in '{}', but that file does not hold it",
                   (dir / kIndexFile).string(), row.file_name(spec.name), file);
    CAROUSEL_CHECK(e->shape == spec.shape,
                   "'{}': tensor '{}' has shape {} but the model needs {} (config.json and the "
                   "weights disagree?)",
                   tensors.path_of(spec.name), spec.name, shape_str(e->shape),
                   shape_str(spec.shape));
  }
  for (const auto& entry : file_of) {
    const std::string& name = entry.first;  // not a structured binding: clang 14 (the fuzz
                                            // build) cannot capture one in a lambda
    if (std::none_of(specs.begin(), specs.end(),
                     [&](const ParamSpec& p) { return row.file_name(p.name) == name; }))
      extra.push_back(name);
  }
  if (!extra.empty()) {
    spdlog::debug("'{}': ignoring {} tensor(s) the model does not use: {}", directory, extra.size(),
                  name_list(extra));
  }
  return tensors;
}

void load_hf_model(Backend& be, const std::string& directory, const ModelConfig& model,
                   const ParamSet& params) {
  const TensorFiles tensors = open_hf_tensors(directory, model);
  for (std::size_t i = 0; i < params.specs.size(); ++i) {
    CAROUSEL_CHECK(params.tensors[i].dtype() == DType::F32,
                   "Hugging Face weights load into float32 parameters, not {}",
                   dtype_name(params.tensors[i].dtype()));
    be.upload(tensors.read_f32(params.specs[i].name, params.specs[i].shape).data(),
              params.tensors[i]);
  }
  spdlog::info("loaded {} Hugging Face tensors from '{}'", params.specs.size(), directory);
}

}  // namespace carousel
