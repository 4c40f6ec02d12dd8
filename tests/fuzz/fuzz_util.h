// fuzz_util.h — what the checkpoint, tokenizer and Hugging Face import fuzz targets share: a
// scratch directory per process, one fuzzed file's bytes written into it, a small model whose
// parameters are written as safetensors parts, and the contract each target checks (a reader
// returns or throws carousel::Error; anything else escapes to libFuzzer or the bounded driver,
// tests/fuzz/standalone_main.cpp, as a crash).
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "compute/error.h"
#include "host/io/files.h"
#include "host/io/safetensors.h"
#include "models/model_config.h"
#include "models/params.h"
#include "tests/fuzz/reader_harness.h"  // HarnessFailure: a reader accepted something inconsistent

namespace carousel::fuzz {

namespace fs = std::filesystem;

// <tmp>/carousel_fuzz_<name>_<pid>, made empty once per process and removed when it exits.
inline fs::path scratch_dir(const std::string& name) {
  static std::vector<fs::path> made;
  const fs::path dir =
      fs::temp_directory_path() / ("carousel_fuzz_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  if (made.empty()) {
    std::atexit([] {
      std::error_code ec;
      for (const auto& d : made) fs::remove_all(d, ec);
    });
  }
  made.push_back(dir);
  return dir;
}

inline void write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  if (!out.flush()) std::abort();  // the harness itself failed: not a finding of the reader
}

inline std::string bytes_of(const std::uint8_t* data, std::size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

// A one-layer Llama small enough to write for every process: vocabulary 16, width 8, 2 query
// heads and 1 kv head (head_dim 4), MLP 8.
inline ModelConfig tiny_model() {
  ModelConfig m;
  m.vocab_size = 16;
  m.emb_dim = 8;
  m.num_layers = 1;
  m.num_query_heads = 2;
  m.num_kv_heads = 1;
  m.mlp_dim = 8;
  m.max_target_length = 16;
  return m;
}

// Writes the parameters of `model` (value 0.25) as `parts` safetensors files named
// name_of(k) in `dir`; returns the weight_map (tensor -> file) and, per file, its tensors.
template <class NameOf>
nlohmann::json write_parts(const fs::path& dir, const ModelConfig& model, int parts,
                           NameOf name_of) {
  const std::vector<ParamSpec> specs = param_table(model);
  nlohmann::json weight_map = nlohmann::json::object();
  std::vector<std::vector<float>> values(specs.size());
  for (int k = 0; k < parts; ++k) {
    std::vector<SafetensorsInput> inputs;
    for (std::size_t i = k; i < specs.size(); i += parts) {
      values[i].assign(std::size_t(numel(specs[i].shape)), 0.25f);
      inputs.push_back({specs[i].name, DType::F32, specs[i].shape, values[i].data()});
      weight_map[specs[i].name] = name_of(k);
    }
    write_safetensors((dir / name_of(k)).string(), inputs);
  }
  return weight_map;
}

// With CAROUSEL_FUZZ_DUMP set (to a folder): writes each valid input, prefixed with the byte that
// selects it, as a seed file `<name(i)>`: how the corpus's valid seeds are made.
template <class Name>
void dump_seeds(const std::vector<std::string>& valid, Name&& name) {
  const char* seeds = std::getenv("CAROUSEL_FUZZ_DUMP");
  if (!seeds) return;
  for (std::size_t i = 0; i < valid.size(); ++i)
    write_file(fs::path(seeds) / name(i), std::string(1, char(i)) + valid[i]);
}

inline nlohmann::json file_record(const fs::path& path) {
  return {{"bytes", fs::file_size(path)}, {"crc32", file_crc32(path)}};
}

// Runs `fn`; true when it returned, false when it threw carousel::Error; anything else escapes
// to the fuzzer as a crash.
template <class Fn>
bool accepts(Fn fn) {
  try {
    fn();
    return true;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace carousel::fuzz
