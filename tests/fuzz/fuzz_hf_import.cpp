// fuzz_hf_import.cpp — libFuzzer target over the Hugging Face import (host/io/huggingface/;
// docs/reliability.md#fuzzing): config.json and model.safetensors.index.json of a small Llama
// directory (a one-layer model in two safetensors shards, written once per process). The first
// input byte picks the file (0: config.json, 1: the index), the rest is its text; the other stays
// valid. model_from_hf_config, check_hf_config and open_hf_tensors (what load_parameters_path
// reads) each return or throw carousel::Error; weights that open give every tensor of the model.
// Seeds: tests/fuzz/corpus/hf_import (CAROUSEL_FUZZ_DUMP=DIR writes the valid files into DIR).
#include <spdlog/spdlog.h>

#include <cstdlib>

#include "host/io/huggingface/hf_architectures.h"
#include "host/io/huggingface/hf_import.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using namespace carousel;
using namespace carousel::fuzz;

struct Template {
  fs::path dir;
  ModelConfig model;
  std::string valid[2];  // config.json, the index
};

const Template& the_template() {
  static const Template t = [] {
    spdlog::set_level(
        spdlog::level::off);  // warnings (positions, ignored tensors) are not findings
    Template t;
    t.dir = scratch_dir("hf_import");
    t.model = tiny_model();
    const auto name = [](int k) {
      return "model-0000" + std::to_string(k + 1) + "-of-00002.safetensors";
    };
    const nlohmann::json map = write_parts(t.dir, t.model, 2, name);
    t.valid[0] = nlohmann::json{
        {"architectures", {"LlamaForCausalLM"}},
        {"model_type", "llama"},
        {"hidden_size", t.model.emb_dim},
        {"intermediate_size", t.model.mlp_dim},
        {"num_hidden_layers", t.model.num_layers},
        {"num_attention_heads", t.model.num_query_heads},
        {"num_key_value_heads", t.model.num_kv_heads},
        {"vocab_size", t.model.vocab_size},
        {"max_position_embeddings", t.model.max_target_length},
        {"rms_norm_eps", t.model.norm_eps},
        {"rope_theta", t.model.rope_max_timescale},
        {"tie_word_embeddings", false},
        {"hidden_act", "silu"},
        {"torch_dtype",
         "float32"}}.dump(2);
    t.valid[1] = nlohmann::json{{"metadata", {{"total_size", 0}}}, {"weight_map", map}}.dump(2);
    dump_seeds({std::begin(t.valid), std::end(t.valid)},
               [](std::size_t i) { return "valid_" + std::to_string(i); });
    return t;
  }();
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const Template& t = the_template();
  if (size == 0) return 0;
  const int which = data[0] % 2;
  const std::string config = which == 0 ? bytes_of(data + 1, size - 1) : t.valid[0];
  write_file(t.dir / "config.json", config);
  write_file(t.dir / "model.safetensors.index.json",
             which == 1 ? bytes_of(data + 1, size - 1) : t.valid[1]);
  const std::string dir = t.dir.string();
  accepts([&] { model_from_hf_config(dir); });
  accepts([&] { check_hf_config(dir, t.model); });
  accepts([&] {
    const TensorFiles tensors = open_hf_tensors(dir, t.model);
    for (const auto& spec : param_table(t.model)) {
      const std::vector<float> v = tensors.read_f32(spec.name, spec.shape);
      if (v.size() != std::size_t(numel(spec.shape)) || v[0] != 0.25f) {
        throw HarnessFailure("tensor '" + spec.name + "' loaded wrong");
      }
    }
  });
  return 0;
}
