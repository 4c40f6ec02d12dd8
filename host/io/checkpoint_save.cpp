// checkpoint_save.cpp — writing a checkpoint: the writers' parts, then the finishing process's
// small files, manifest and rename (host/io/checkpoint.h).
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "compute/error.h"
#include "host/io/checkpoint.h"
#include "host/io/checkpoint_layout.h"
#include "host/io/files.h"
#include "host/io/huggingface/hf_architectures.h"
#include "host/io/json_fields.h"
#include "host/io/run_lock.h"
#include "host/io/safetensors.h"
#include "host/reliability/fault_injection.h"

namespace carousel {

namespace fs = std::filesystem;
using namespace checkpoint_layout;

namespace {

std::string hf_config_json(const ModelConfig& m, const TokenizerInfo* tokenizer) {
  const HfArchitecture& row = hf_architecture_of(m);
  nlohmann::ordered_json j = {
      {"architectures", {row.class_name}},
      {"model_type", row.model_type},
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
  for (const HfField& f : row.fields) j[f.hf_key] = f.get(m);
  if (m.is_moe()) {  // DeepSeekMoE's balancing fields: carousel's loss is per sequence
    j["moe_layer_freq"] = 1;
    j["aux_loss_alpha"] = m.load_balance_loss_weight;
    j["seq_aux"] = true;
  }
  if (tokenizer && tokenizer->bos_id) j["bos_token_id"] = *tokenizer->bos_id;
  if (tokenizer && tokenizer->eos_id) j["eos_token_id"] = *tokenizer->eos_id;
  return j.dump(2);
}

// The tensors of a set as whole tensors, names suffixed by `suffix`.
void add_tensors(Backend& be, const ParamSet& set, const std::string& suffix,
                 std::vector<WholeTensor>& out) {
  for (std::size_t i = 0; i < set.specs.size(); ++i) {
    out.push_back(
        {set.specs[i].name + suffix, set.specs[i].shape, be.to_host<float>(set.tensors[i])});
  }
}

std::vector<SafetensorsInput> inputs(const std::vector<WholeTensor>& tensors) {
  std::vector<SafetensorsInput> out;
  for (const auto& t : tensors) out.push_back({t.name, DType::F32, t.shape, t.values.data()});
  return out;
}

nlohmann::json file_record(const fs::path& p) {
  return {{"bytes", fs::file_size(p)}, {"crc32", file_crc32(p)}};
}

// The run directory of a checkpoint's temporary directory (<run>/checkpoints/.tmp-<step>-<pid>):
// its files are opened below it, no directory on the way followed through a symlink.
fs::path run_directory_of(const fs::path& temp_dir) { return temp_dir.parent_path().parent_path(); }

// Written whole or not at all: a finisher polling for the file never reads half of it.
void write_file_atomically(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".writing";
  OutputFile out(tmp, "checkpoint file", OutputMode::Replace, run_directory_of(path.parent_path()));
  out.write(text);
  out.sync();
  fs::rename(tmp, path);
}

}  // namespace

std::string checkpoint_temp_dir(const Config& cfg, std::int64_t step, long owner_pid) {
  return (checkpoints_dir(cfg) / fmt::format(".tmp-{}-{}", step, owner_pid)).string();
}

std::string begin_checkpoint(const Config& cfg, std::int64_t step, long owner_pid) {
  check_local_path("base_output_directory", cfg.base_output_directory);
  // The run is still the directory's only one (its lock file may have been removed: run_lock.h).
  RunLock::check_held(cfg.run_directory());
  const fs::path root = checkpoints_dir(cfg);
  check_output_directory(root, "the checkpoints directory");
  std::error_code ec;
  fs::create_directories(root, ec);
  CAROUSEL_CHECK(!ec && fs::is_directory(root), "cannot create the checkpoints directory '{}': {}",
                 root.string(), ec ? ec.message() : "a file of that name exists");
  clean_partial_checkpoints(cfg);
  const fs::path final_dir = root / std::to_string(step);
  if (fs::exists(final_dir)) {
    // A verified checkpoint is never touched; an unusable one (which latest_checkpoint skipped,
    // so this run retrained its steps) is renamed aside, not deleted.
    std::string problem;
    try {
      verify_checkpoint(final_dir.string());
    } catch (const Error& e) {
      problem = e.what();
    }
    CAROUSEL_CHECK(!problem.empty(),
                   "checkpoint directory '{}' already exists; refusing to overwrite it (use "
                   "another run_name or base_output_directory)",
                   final_dir.string());
    fs::path aside;
    for (int i = 0; fs::exists(aside = root / fmt::format("{}.unusable-{}", step, i)); ++i) {
    }
    fs::rename(final_dir, aside);
    spdlog::warn("checkpoint '{}' is unusable ({}); moved to '{}' to save step {} in its place",
                 final_dir.string(), problem, aside.string(), step);
  }
  const fs::path tmp = checkpoint_temp_dir(cfg, step, owner_pid);
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  maybe_kill("begin", step);  // test faults: a crash at each point of a save
  return tmp.string();
}

void write_checkpoint_part(const std::string& temp_dir, std::int64_t step, int k, int n,
                           const CheckpointPart& part) {
  const fs::path tmp(temp_dir);
  const std::string run = run_directory_of(tmp).string();
  try {
    if (k == 0) maybe_slow_save(step);
    nlohmann::ordered_json record;
    const std::string model = part_file_name("model", k, n);
    write_safetensors((tmp / model).string(), inputs(part.params), {{"format", "pt"}}, run);
    fsync_path(tmp / model);
    record["files"][model] = file_record(tmp / model);
    record["tensors"] = nlohmann::json::array();
    for (const auto& t : part.params) record["tensors"].push_back(t.name);
    if (k == 0) maybe_kill("model", step);
    if (!part.moments.empty()) {
      const std::string optimizer = part_file_name("optimizer", k, n);
      write_safetensors((tmp / optimizer).string(), inputs(part.moments), {}, run);
      fsync_path(tmp / optimizer);
      record["files"][optimizer] = file_record(tmp / optimizer);
    }
    write_file_atomically(tmp / fmt::format("part-{}.json", k), record.dump());
  } catch (const std::exception& e) {
    try {  // the finisher stops waiting and names this part's failure
      write_file_atomically(tmp / fmt::format("part-{}.failed", k), e.what());
    } catch (...) {
    }
    throw;
  }
}

std::string finish_checkpoint(const Config& cfg, const std::string& temp_dir, int n,
                              const TrainingState& state, const TokenizerInfo* tokenizer,
                              double timeout_seconds) {
  const fs::path tmp(temp_dir), root = checkpoints_dir(cfg), run = cfg.run_directory();
  // Every writer's part: its record appears (atomically) once its files are on disk.
  nlohmann::ordered_json manifest;
  manifest["format_version"] = kFormatVersion;
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  std::uint64_t model_bytes = 0;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  for (int k = 0; k < n; ++k) {
    const fs::path record_path = tmp / fmt::format("part-{}.json", k);
    const fs::path failed = tmp / fmt::format("part-{}.failed", k);
    while (!fs::exists(record_path)) {
      if (fs::exists(failed)) {
        std::ifstream in(failed);
        const std::string why((std::istreambuf_iterator<char>(in)), {});
        fail("checkpoint {}: writing part {} of {} failed: {}", state.step, k + 1, n, why);
      }
      CAROUSEL_CHECK(std::chrono::steady_clock::now() < deadline,
                     "checkpoint {}: part {} of {} did not appear in '{}' within {} s "
                     "(collective_timeout_seconds): every process must write into the same "
                     "checkpoints directory (a file system all nodes share)",
                     state.step, k + 1, n, tmp.string(), timeout_seconds);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    const nlohmann::json record = read_json_file(record_path);
    const std::string model = part_file_name("model", k, n);
    for (const auto& [file, info] : record.at("files").items()) {
      manifest["files"][file] = info;
      if (file == model) model_bytes += info.at("bytes").get<std::uint64_t>();
    }
    for (const auto& name : record.at("tensors")) weight_map[name.get<std::string>()] = model;
    fs::remove(record_path);
  }
  std::vector<std::string> files = {"config.json", "state.json"};
  if (n > 1) {  // Hugging Face's index of a sharded model: transformers loads the directory
    const nlohmann::ordered_json index = {{"metadata", {{"total_size", model_bytes}}},
                                          {"weight_map", weight_map}};
    write_text_file(tmp / "model.safetensors.index.json", index.dump(2), "checkpoint file", run);
    files.push_back("model.safetensors.index.json");
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
  write_text_file(tmp / "config.json", hf_config_json(cfg.model, tokenizer), "checkpoint file",
                  run);
  nlohmann::ordered_json st = {{"format_version", kFormatVersion},
                               {"step", state.step},
                               {"skipped_steps", state.skipped_steps}};
  if (!state.router_bias.empty()) st["router_bias"] = state.router_bias;  // doubles round-trip
  for (const auto& key : config_keys()) st["config"][key.name] = key.get(cfg);
  write_text_file(tmp / "state.json", st.dump(2), "checkpoint file", run);
  for (const auto& f : files) {
    fsync_path(tmp / f);
    manifest["files"][f] = file_record(tmp / f);
  }
  write_text_file(tmp / "manifest.json", manifest.dump(2), "checkpoint file", run);
  fsync_path(tmp / "manifest.json");
  fsync_path(tmp);
  maybe_kill("manifest", state.step);
  const fs::path final_dir = root / std::to_string(state.step);
  fs::rename(tmp, final_dir);
  maybe_kill("renamed", state.step);
  fsync_path(root);
  return final_dir.string();
}

std::string save_checkpoint(Backend& be, const Config& cfg, const CheckpointContents& contents,
                            const TrainingState& state, const TokenizerInfo* tokenizer) {
  const std::string tmp = begin_checkpoint(cfg, state.step, ::getpid());
  CheckpointPart part;
  add_tensors(be, *contents.params, "", part.params);
  if (contents.adam_m && contents.adam_v) {
    add_tensors(be, *contents.adam_m, ".exp_avg", part.moments);
    add_tensors(be, *contents.adam_v, ".exp_avg_sq", part.moments);
  }
  write_checkpoint_part(tmp, state.step, 0, 1, part);
  return finish_checkpoint(cfg, tmp, 1, state, tokenizer, cfg.collective_timeout_seconds);
}

}  // namespace carousel
