// test_checkpoint.cpp — safetensors files read back by an independent parser, bitwise
// checkpoint round trips, and the errors for corrupt or mismatched checkpoints.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "compute/cpu_backend.h"
#include "host/io/checkpoint.h"
#include "host/runtime/optimizer.h"
#include "tests/support/test_util.h"

namespace carousel {
namespace {

namespace fs = std::filesystem;

Config small_config(const std::string& run) {
  Config c;
  c.model.num_layers = 2;
  c.model.vocab_size = 32;
  c.base_output_directory = (fs::temp_directory_path() / "carousel_ckpt_tests").string();
  c.run_name = run;
  fs::remove_all(c.run_directory());
  return c;
}

std::vector<char> read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

struct Fixture {
  CpuBackend be;
  Config cfg;
  ParamSet params;
  AdamW opt;
  explicit Fixture(const std::string& run)
      : cfg(small_config(run)),
        params(ParamSet::allocate(be, param_table(cfg.model), DType::F32)),
        opt(AdamW::create(be, param_table(cfg.model))) {
    init_params(be, params, 7);
    be.fill(opt.m.flat, 0.25);
    std::vector<float> v(opt.v.flat.numel());
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = float(i) * 1e-3f;
    be.upload(v.data(), opt.v.flat);
  }
};

// Reads model.safetensors with nothing but the format description: 8-byte little-endian header
// length, a JSON header, tensors back to back.
TEST(Safetensors, IndependentParserReadsNamesDtypesShapesOffsetsAndValues) {
  Fixture f("parse");
  const std::string dir =
      save_checkpoint(f.be, f.cfg, {&f.params, &f.opt.m, &f.opt.v}, {3}, nullptr);
  const auto bytes = read_bytes(fs::path(dir) / "model.safetensors");
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);  // x86-64 is little-endian
  ASSERT_EQ(n % 8, 0u);
  const auto header = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + long(n));
  const std::size_t data_size = bytes.size() - 8 - n;
  std::size_t covered = 0;
  for (std::size_t i = 0; i < f.params.specs.size(); ++i) {
    const ParamSpec& spec = f.params.specs[i];
    ASSERT_TRUE(header.contains(spec.name)) << spec.name;
    const auto& e = header[spec.name];
    EXPECT_EQ(e["dtype"], "F32");
    EXPECT_EQ(e["shape"].get<Shape>(), spec.shape);
    const auto off = e["data_offsets"].get<std::vector<std::size_t>>();
    ASSERT_EQ(off[1] - off[0], std::size_t(numel(spec.shape)) * 4);
    ASSERT_LE(off[1], data_size);
    covered += off[1] - off[0];
    std::vector<float> stored(numel(spec.shape));
    std::memcpy(stored.data(), bytes.data() + 8 + n + off[0], off[1] - off[0]);
    EXPECT_EQ(stored, f.be.to_host<float>(f.params.tensors[i])) << spec.name;
  }
  EXPECT_EQ(covered, data_size);  // no holes, nothing extra
  EXPECT_EQ(header["model.layers.1.mlp.down_proj.weight"]["shape"], (Shape{64, 172}));
  const auto hf = nlohmann::json::parse(std::ifstream(fs::path(dir) / "config.json"));
  EXPECT_EQ(hf["num_key_value_heads"], 2);
  EXPECT_EQ(hf["architectures"][0], "LlamaForCausalLM");
}

TEST(Checkpoint, RoundTripIsBitwise) {
  Fixture f("roundtrip");
  const std::string dir =
      save_checkpoint(f.be, f.cfg, {&f.params, &f.opt.m, &f.opt.v}, {12}, nullptr);
  EXPECT_EQ(latest_checkpoint(f.cfg), dir);
  ParamSet p2 = ParamSet::allocate(f.be, f.params.specs, DType::F32);
  AdamW o2 = AdamW::create(f.be, f.params.specs);
  const TrainingState st = load_checkpoint(f.be, dir, {&p2, &o2.m, &o2.v});
  EXPECT_EQ(st.step, 12);
  EXPECT_TRUE(testing::bitwise_equal(f.be, p2.flat, f.params.flat));
  EXPECT_TRUE(testing::bitwise_equal(f.be, o2.m.flat, f.opt.m.flat));
  EXPECT_TRUE(testing::bitwise_equal(f.be, o2.v.flat, f.opt.v.flat));
  // A second save of the same step is refused: nothing is overwritten.
  EXPECT_NE(testing::error_of([&] {
              save_checkpoint(f.be, f.cfg, {&f.params, nullptr, nullptr}, {12}, nullptr);
            }).find("already exists; refusing to overwrite"),
            std::string::npos);
}

TEST(Checkpoint, CorruptionAndIncompleteDirectoriesAreDetected) {
  Fixture f("corrupt");
  const std::string dir =
      save_checkpoint(f.be, f.cfg, {&f.params, &f.opt.m, &f.opt.v}, {5}, nullptr);
  ParamSet p2 = ParamSet::allocate(f.be, f.params.specs, DType::F32);
  const fs::path model = fs::path(dir) / "model.safetensors";
  {
    std::fstream io(model, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(-3, std::ios::end);
    io.put('\x7f');
  }
  EXPECT_NE(testing::error_of([&] {
              load_checkpoint(f.be, dir, {&p2, nullptr, nullptr});
            }).find("'model.safetensors' fails its CRC32 check"),
            std::string::npos);
  fs::resize_file(model, fs::file_size(model) - 10);
  EXPECT_NE(testing::error_of([&] {
              load_checkpoint(f.be, dir, {&p2, nullptr, nullptr});
            }).find("(truncated?)"),
            std::string::npos);
  // A directory without a manifest is never "latest", nor is the truncated one: none is usable
  // (tests/run/test_checkpoint_faults.cpp: the fallback to an older complete checkpoint).
  fs::create_directories(fs::path(f.cfg.run_directory()) / "checkpoints" / "9");
  EXPECT_EQ(latest_checkpoint(f.cfg), std::nullopt);
}

// A resume verifies the newest checkpoint once (latest_checkpoint reads every file for its
// CRC32) and then opens it without a second full read: a byte flipped after the verification
// is not seen by the open that was told the directory is verified, and is by one that was not.
TEST(Checkpoint, AVerifiedCheckpointOpensWithoutASecondRead) {
  Fixture f("verified_once");
  const std::string dir =
      save_checkpoint(f.be, f.cfg, {&f.params, &f.opt.m, &f.opt.v}, {2}, nullptr);
  ASSERT_EQ(latest_checkpoint(f.cfg), dir);
  {
    std::fstream io(fs::path(dir) / "optimizer.safetensors",
                    std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(-3, std::ios::end);
    io.put('\x3f');
  }
  EXPECT_NO_THROW(open_checkpoint_tensors(dir, f.params.specs, true, /*verified=*/true));
  EXPECT_NE(testing::error_of([&] {
              open_checkpoint_tensors(dir, f.params.specs, true);
            }).find("'optimizer.safetensors' fails its CRC32 check"),
            std::string::npos);
}

TEST(Checkpoint, ShapeMismatchNamesTensorAndShapes) {
  Fixture f("mismatch");
  const std::string dir = save_checkpoint(f.be, f.cfg, {&f.params, nullptr, nullptr}, {1}, nullptr);
  ModelConfig wider = f.cfg.model;
  wider.mlp_dim = 100;
  ParamSet other = ParamSet::allocate(f.be, param_table(wider), DType::F32);
  const std::string msg = testing::error_of([&] {
    load_checkpoint(f.be, dir, {&other, nullptr, nullptr});
  });
  EXPECT_NE(msg.find("tensor 'model.layers.0.mlp.gate_proj.weight' has shape [172,64] but the "
                     "model needs [100,64]"),
            std::string::npos)
      << msg;
  ModelConfig deeper = f.cfg.model;
  deeper.num_layers = 3;
  ParamSet more = ParamSet::allocate(f.be, param_table(deeper), DType::F32);
  EXPECT_NE(testing::error_of([&] {
              load_checkpoint(f.be, dir, {&more, nullptr, nullptr});
            }).find("has no tensor 'model.layers.2.input_layernorm.weight'"),
            std::string::npos);
}

// Parts: tensor i of the table goes to writer i % n, as ranks deal a stage's tensors over FSDP.
CheckpointPart part_of(Fixture& f, int k, int n) {
  CheckpointPart part;
  const ParamSet params = f.params, m = f.opt.m, v = f.opt.v;
  for (std::size_t i = 0; i < params.specs.size(); ++i) {
    if (int(i % std::size_t(n)) != k) continue;
    const ParamSpec& spec = params.specs[i];
    part.params.push_back({spec.name, spec.shape, f.be.to_host<float>(params.tensors[i])});
    part.moments.push_back({spec.name + ".exp_avg", spec.shape, f.be.to_host<float>(m.tensors[i])});
    part.moments.push_back(
        {spec.name + ".exp_avg_sq", spec.shape, f.be.to_host<float>(v.tensors[i])});
  }
  return part;
}

// Three writers write their parts (the last first: order does not matter); the finished
// directory loads bitwise like one writer's, lists every file in the manifest, and its Hugging
// Face index maps each tensor to the part that holds it, so the parameters also load as a
// sharded Hugging Face model.
TEST(Checkpoint, PartsOfSeveralWritersLoadAsOneCheckpoint) {
  Fixture f("parts");
  const std::string tmp = begin_checkpoint(f.cfg, 4, 1234);
  EXPECT_EQ(tmp, checkpoint_temp_dir(f.cfg, 4, 1234));
  for (int k : {2, 0, 1}) write_checkpoint_part(tmp, 4, k, 3, part_of(f, k, 3));
  const std::string dir = finish_checkpoint(f.cfg, tmp, 3, {4, 1}, nullptr, 10.0);
  EXPECT_FALSE(fs::exists(tmp));
  EXPECT_EQ(checkpoint_data_files(dir),
            (std::vector<std::string>{
                "model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                "model-00003-of-00003.safetensors", "optimizer-00001-of-00003.safetensors",
                "optimizer-00002-of-00003.safetensors", "optimizer-00003-of-00003.safetensors"}));
  ParamSet p2 = ParamSet::allocate(f.be, f.params.specs, DType::F32);
  AdamW o2 = AdamW::create(f.be, f.params.specs);
  const TrainingState st = load_checkpoint(f.be, dir, {&p2, &o2.m, &o2.v});
  EXPECT_EQ(st.step, 4);
  EXPECT_EQ(st.skipped_steps, 1);
  EXPECT_TRUE(testing::bitwise_equal(f.be, p2.flat, f.params.flat));
  EXPECT_TRUE(testing::bitwise_equal(f.be, o2.m.flat, f.opt.m.flat));
  EXPECT_TRUE(testing::bitwise_equal(f.be, o2.v.flat, f.opt.v.flat));
  const nlohmann::json manifest =
      nlohmann::json::parse(std::ifstream(fs::path(dir) / "manifest.json"));
  for (const auto& file : checkpoint_data_files(dir)) EXPECT_TRUE(manifest["files"].contains(file));
  EXPECT_TRUE(manifest["files"].contains("model.safetensors.index.json"));
  const nlohmann::json index =
      nlohmann::json::parse(std::ifstream(fs::path(dir) / "model.safetensors.index.json"));
  ASSERT_EQ(index["weight_map"].size(), f.params.specs.size());
  for (std::size_t i = 0; i < f.params.specs.size(); ++i) {
    EXPECT_EQ(index["weight_map"][f.params.specs[i].name],
              fmt::format("model-{:05}-of-00003.safetensors", i % 3 + 1));
  }
  // As a Hugging Face directory (no carousel manifest or state): the index finds each tensor.
  const fs::path hf = fs::path(f.cfg.run_directory()) / "as_hf";
  fs::copy(dir, hf);
  fs::remove(hf / "manifest.json");
  fs::remove(hf / "state.json");
  ParamSet p3 = ParamSet::allocate(f.be, f.params.specs, DType::F32);
  load_parameters(f.be, f.cfg.model, hf.string(), p3);
  EXPECT_TRUE(testing::bitwise_equal(f.be, p3.flat, f.params.flat));
}

// A writer that fails leaves part-<k>.failed: the finisher stops with its message at once, and
// no step directory appears; a part that never comes (a process writing elsewhere) is an error
// after the timeout that says every process must share the checkpoints directory.
TEST(Checkpoint, AMissingOrFailedPartStopsTheFinishNamingIt) {
  Fixture f("failed_part");
  std::string tmp = begin_checkpoint(f.cfg, 2, 1234);
  write_checkpoint_part(tmp, 2, 0, 3, part_of(f, 0, 3));
  fs::create_directory(fs::path(tmp) / "model-00002-of-00003.safetensors");  // cannot be written
  EXPECT_NE(testing::error_of([&] {
              write_checkpoint_part(tmp, 2, 1, 3, part_of(f, 1, 3));
            }).find("is a directory"),
            std::string::npos);
  std::string msg =
      testing::error_of([&] { finish_checkpoint(f.cfg, tmp, 3, {2}, nullptr, 30.0); });
  EXPECT_NE(msg.find("checkpoint 2: writing part 2 of 3 failed: safetensors file"), std::string::npos)
      << msg;
  EXPECT_FALSE(fs::exists(fs::path(f.cfg.run_directory()) / "checkpoints" / "2"));
  tmp = begin_checkpoint(f.cfg, 3, 1234);
  write_checkpoint_part(tmp, 3, 0, 2, part_of(f, 0, 2));
  msg = testing::error_of([&] { finish_checkpoint(f.cfg, tmp, 2, {3}, nullptr, 0.2); });
  EXPECT_NE(msg.find("checkpoint 3: part 2 of 2 did not appear in"), std::string::npos) << msg;
  EXPECT_NE(msg.find("a file system all nodes share"), std::string::npos) << msg;
  EXPECT_EQ(latest_checkpoint(f.cfg), std::nullopt);
}

}  // namespace
}  // namespace carousel
