// fuzz_checkpoint.cpp — libFuzzer target over a checkpoint's JSON files
// (docs/reliability.md#fuzzing): manifest.json, model.safetensors.index.json and state.json of a
// small checkpoint (a one-layer model's parameters in two parts, written once per process). The
// first input byte picks the file (0: manifest, 1: index, 2: state.json), the rest is its text. The
// other files stay valid, and unless the manifest is the fuzzed file it is rewritten with the
// fuzzed file's true size and CRC32, so the parser behind the manifest's check is reached.
// verify_checkpoint, verify_checkpoint_index, `carousel inspect`, read_training_state,
// checkpoint_config and loading (open_checkpoint_tensors) each return or throw carousel::Error; a
// checkpoint that loads gives every tensor of the model. Seeds: tests/fuzz/corpus/checkpoint
// (CAROUSEL_FUZZ_DUMP=DIR writes the valid files as seeds into DIR).
#include <fmt/format.h>

#include <cstdlib>
#include <sstream>

#include "host/io/checkpoint.h"
#include "host/io/inspect.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using namespace carousel;
using namespace carousel::fuzz;

const char* const kFiles[] = {"manifest.json", "model.safetensors.index.json", "state.json"};

struct Template {
  fs::path dir;
  std::vector<ParamSpec> specs;
  std::string valid[3];  // the valid text of each fuzzed file
};

const Template& the_template() {
  static const Template t = [] {
    Template t;
    t.dir = scratch_dir("checkpoint");
    const ModelConfig model = tiny_model();
    t.specs = param_table(model);
    const auto name = [](int k) { return fmt::format("model-{:05}-of-00002.safetensors", k + 1); };
    const nlohmann::json map = write_parts(t.dir, model, 2, name);
    t.valid[1] = nlohmann::json{{"metadata", {{"total_size", 0}}}, {"weight_map", map}}.dump(2);
    t.valid[2] = R"({"step": 3, "format_version": 2, "skipped_steps": 1, "router_bias": [[0.5]],
      "config": {"model_name": "tiny", "steps": "3"}})";
    write_file(t.dir / kFiles[1], t.valid[1]);
    write_file(t.dir / kFiles[2], t.valid[2]);
    nlohmann::json manifest = {{"format_version", 2}, {"files", nlohmann::json::object()}};
    for (const char* f : {kFiles[1], kFiles[2]}) manifest["files"][f] = file_record(t.dir / f);
    for (int k = 0; k < 2; ++k) manifest["files"][name(k)] = file_record(t.dir / name(k));
    t.valid[0] = manifest.dump(2);
    dump_seeds({std::begin(t.valid), std::end(t.valid)},
               [](std::size_t i) { return fmt::format("{}_valid", i); });
    return t;
  }();
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const Template& t = the_template();
  if (size == 0) return 0;
  const int which = data[0] % 3;
  for (int i = 0; i < 3; ++i) write_file(t.dir / kFiles[i], t.valid[i]);
  write_file(t.dir / kFiles[which], bytes_of(data + 1, size - 1));
  if (which != 0) {  // the manifest vouches for the fuzzed file: its parser is what is tested
    nlohmann::json manifest = nlohmann::json::parse(t.valid[0]);
    manifest["files"][kFiles[which]] = file_record(t.dir / kFiles[which]);
    write_file(t.dir / kFiles[0], manifest.dump());
  }
  const std::string dir = t.dir.string();
  accepts([&] { verify_checkpoint(dir); });
  accepts([&] { verify_checkpoint_index(dir); });
  accepts([&] {
    std::ostringstream out;
    const int code = inspect_checkpoint(dir, out);
    if (code != 0 && code != 2) throw HarnessFailure("inspect returned " + std::to_string(code));
  });
  accepts([&] { read_training_state(dir); });
  accepts([&] { checkpoint_config(dir); });
  accepts([&] {
    const TensorFiles tensors = open_checkpoint_tensors(dir, t.specs, /*moments=*/false);
    for (const auto& spec : t.specs) {
      const std::vector<float> v = tensors.read_f32(spec.name, spec.shape);
      if (v.size() != std::size_t(numel(spec.shape)) || v[0] != 0.25f) {
        throw HarnessFailure("tensor '" + spec.name + "' loaded wrong");
      }
    }
  });
  return 0;
}
