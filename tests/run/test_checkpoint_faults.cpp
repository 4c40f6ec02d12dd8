// test_checkpoint_faults.cpp — checkpoints under faults (docs/reliability.md#files-and-outputs):
// a corrupt newest checkpoint falls back to the previous one, partial save directories are
// reported and cleaned, malformed manifests and state files are clear errors, remote URLs and
// unwritable outputs are refused before training.
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "compute/cpu_backend.h"
#include "host/io/checkpoint.h"
#include "tests/support/log_capture.h"
#include "tests/support/test_util.h"

namespace carousel {
namespace {

namespace fs = std::filesystem;

using testing::LogCapture;

// CRC-32 (IEEE, reflected, as zlib computes it), bit by bit: independent of the code under test.
std::uint32_t crc32_of(const std::string& bytes) {
  std::uint32_t crc = 0xffffffffu;
  for (unsigned char c : bytes) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

struct TestRun {
  CpuBackend be;
  Config cfg;
  ParamSet params;
  explicit TestRun(const std::string& name) {
    cfg.model.num_layers = 1;
    cfg.model.vocab_size = 32;
    cfg.base_output_directory = (fs::temp_directory_path() / "carousel_ckpt_faults").string();
    cfg.run_name = name;
    fs::remove_all(cfg.run_directory());
    params = ParamSet::allocate(be, param_table(cfg.model), DType::F32);
    init_params(be, params, 3);
  }
  std::string save(std::int64_t step) {
    return save_checkpoint(be, cfg, {&params, nullptr, nullptr}, {step}, nullptr);
  }
  fs::path checkpoints() const { return fs::path(cfg.run_directory()) / "checkpoints"; }
  std::string load_error(const std::string& dir) {
    ParamSet p = ParamSet::allocate(be, params.specs, DType::F32);
    return testing::error_of([&] { load_checkpoint(be, dir, {&p, nullptr, nullptr}); });
  }
};

TEST(CheckpointFaults, CorruptNewestFallsBackToThePreviousWithAWarning) {
  TestRun r("fallback");
  const std::string two = r.save(2), four = r.save(4), six = r.save(6);
  {
    std::fstream io(fs::path(six) / "model.safetensors",
                    std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(100);
    io.put('\x55');
  }
  fs::remove(fs::path(four) / "state.json");
  LogCapture log;
  EXPECT_EQ(latest_checkpoint(r.cfg), two);
  const std::string warnings = log.text.str();
  EXPECT_NE(warnings.find("checkpoint '" + six + "' is skipped: checkpoint '" + six +
                          "': 'model.safetensors' fails its CRC32 check"),
            std::string::npos)
      << warnings;
  EXPECT_NE(warnings.find("'state.json' listed in the manifest is missing"), std::string::npos)
      << warnings;
  // Nothing was deleted; the next save of step 4 moves the unusable one aside, and a verified
  // checkpoint is still never overwritten.
  EXPECT_TRUE(fs::exists(fs::path(six) / "model.safetensors"));
  EXPECT_EQ(r.save(4), four);
  EXPECT_TRUE(fs::exists(r.checkpoints() / "4.unusable-0" / "model.safetensors"));
  EXPECT_EQ(latest_checkpoint(r.cfg), four);
  EXPECT_NE(testing::error_of([&] { r.save(2); }).find("already exists; refusing to overwrite"),
            std::string::npos);
  // A step directory name too long for an integer is ignored, not a crash.
  fs::create_directories(r.checkpoints() / "123456789012345678901234567890");
  EXPECT_EQ(latest_checkpoint(r.cfg), four);
}

TEST(CheckpointFaults, PartialSaveDirectoriesAreReportedAndCleaned) {
  TestRun r("partial");
  const std::string one = r.save(1);
  // An interrupted save of step 3 by a process that is gone (pids stop below 2^22).
  const fs::path dead = r.checkpoints() / ".tmp-3-999999999";
  fs::create_directories(dead);
  std::ofstream(dead / "model.safetensors") << "half a file";
  // A save that finished its manifest but not its rename: complete, so it is kept.
  const fs::path complete = r.checkpoints() / ".tmp-5-999999998";
  fs::copy(one, complete);
  {
    LogCapture log;
    const auto removed = clean_partial_checkpoints(r.cfg);
    EXPECT_EQ(removed, std::vector<std::string>{dead.string()});
    EXPECT_NE(log.text.str().find("removed partial checkpoint '" + dead.string() +
                                  "' left by an interrupted save"),
              std::string::npos)
        << log.text.str();
    EXPECT_NE(log.text.str().find("moved into place as '" + (r.checkpoints() / "5").string()),
              std::string::npos)
        << log.text.str();
  }
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_FALSE(fs::exists(complete));
  EXPECT_EQ(latest_checkpoint(r.cfg), (r.checkpoints() / "5").string());
  // Saving cleans too.
  fs::create_directories(r.checkpoints() / ".tmp-7-999999999");
  r.save(8);
  EXPECT_FALSE(fs::exists(r.checkpoints() / ".tmp-7-999999999"));
  // The directory of a live process (this one's parent) is left alone.
  const fs::path live = r.checkpoints() / fmt::format(".tmp-9-{}", ::getppid());
  fs::create_directories(live);
  EXPECT_TRUE(clean_partial_checkpoints(r.cfg).empty());
  EXPECT_TRUE(fs::exists(live));
}

// A manifest of another format version (a newer carousel's) is refused by name when the
// checkpoint is loaded, and when the run directory's newest is chosen it stops the run instead of
// being skipped for the older checkpoint beside it.
TEST(CheckpointFaults, AnotherFormatVersionIsRefusedNotSkipped) {
  TestRun r("format_version");
  r.save(1);
  const fs::path dir = r.save(2);
  std::string manifest = read_text(dir / "manifest.json");
  const std::string current = "\"format_version\": 2";
  const auto at = manifest.find(current);
  ASSERT_NE(at, std::string::npos) << manifest;
  manifest.replace(at, current.size(), "\"format_version\": 3");
  std::ofstream(dir / "manifest.json", std::ios::trunc) << manifest;
  std::string msg = r.load_error(dir.string());
  EXPECT_NE(msg.find("format_version 3 is not one this carousel reads (1 to 2)"),
            std::string::npos)
      << msg;
  msg = testing::error_of([&] { latest_checkpoint(r.cfg); });
  EXPECT_NE(msg.find("format_version 3"), std::string::npos) << msg;
}

// A checkpoint whose files verify but whose weights hold a non-finite value (saved from a run
// that diverged, or written by another tool) is refused at load, naming the file, the tensor and
// the first bad element, instead of loading and failing at step 1 on another parameter's name.
TEST(CheckpointFaults, NonFiniteWeightsAreRefusedNamingTheTensorAndFile) {
  TestRun r("nonfinite");
  const std::size_t last = r.params.specs.size() - 1;
  const float minus_inf = -std::numeric_limits<float>::infinity();
  const Tensor& t = r.params.tensors[last];
  r.be.upload(&minus_inf, t.reshape({t.numel()}).view(3, {1}));
  const std::string dir = r.save(1);
  const std::string msg = r.load_error(dir);
  EXPECT_NE(msg.find("model.safetensors': tensor '" + r.params.specs[last].name + "'"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("holds -inf at ["), std::string::npos) << msg;
  EXPECT_NE(msg.find("(1 non-finite value of"), std::string::npos) << msg;
}

TEST(CheckpointFaults, MalformedManifestAndStateAreErrorsNamingFileAndField) {
  TestRun r("manifest");
  const fs::path dir = r.save(1);
  const std::string state = read_text(dir / "state.json");
  const auto manifest_with = [&](const std::string& state_entry) {
    const std::string model = read_text(dir / "model.safetensors");
    std::ofstream(dir / "manifest.json", std::ios::trunc)
        << R"({"files": {"model.safetensors": {"bytes": )" << model.size() << R"(, "crc32": )"
        << crc32_of(model) << R"(}, "state.json": )" << state_entry << "}}";
  };
  manifest_with(R"({"bytes": "12", "crc32": 1})");
  std::string msg = r.load_error(dir.string());
  EXPECT_NE(msg.find("manifest '" + (dir / "manifest.json").string() +
                     "': files.state.json: field 'bytes' must be an integer in [0, "),
            std::string::npos)
      << msg;
  EXPECT_EQ(msg.find("json.exception"), std::string::npos) << msg;
  manifest_with(R"({"bytes": 12})");
  EXPECT_NE(r.load_error(dir.string()).find("field 'crc32' is missing"), std::string::npos);
  std::ofstream(dir / "manifest.json", std::ios::trunc) << R"({"files": []})";
  EXPECT_NE(r.load_error(dir.string()).find("field 'files' must be an object, found array"),
            std::string::npos);
  std::ofstream(dir / "manifest.json", std::ios::trunc) << R"({"files": {)";
  msg = r.load_error(dir.string());
  EXPECT_NE(msg.find("manifest.json' is not valid JSON"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("json.exception"), std::string::npos) << msg;
  // state.json with a string step, listed with its true size and CRC: the manifest passes.
  const std::string bad_state = R"({"format_version": 1, "step": "7"})";
  std::ofstream(dir / "state.json", std::ios::trunc) << bad_state;
  manifest_with(
      fmt::format(R"({{"bytes": {}, "crc32": {}}})", bad_state.size(), crc32_of(bad_state)));
  msg = r.load_error(dir.string());
  EXPECT_NE(msg.find("checkpoint state '" + (dir / "state.json").string() +
                     "': field 'step' must be an integer in [0, 9223372036854775807], found "
                     "string \"7\""),
            std::string::npos)
      << msg;
}

TEST(CheckpointFaults, RemoteUrlsAreRefused) {
  for (const std::string url :
       {"gs://bucket/runs", "s3://b/x", "http://host/x", "https://h/y", "hdfs://nn/path"}) {
    const std::string msg =
        testing::error_of([&] { check_local_path("base_output_directory", url); });
    EXPECT_NE(msg.find("base_output_directory='" + url + "' is a remote URL (" +
                       url.substr(0, url.find(':')) + "://)"),
              std::string::npos)
        << msg;
  }
  for (const std::string local : {"", "/tmp/x", "runs/out", "weird:name/x"}) {
    EXPECT_EQ(testing::error_of([&] { check_local_path("metrics_file", local); }), "<no error>")
        << local;
  }
  TestRun r("remote");
  EXPECT_NE(r.load_error("gs://bucket/ckpt/10")
                .find("checkpoint directory='gs://bucket/ckpt/10' is a remote URL"),
            std::string::npos);
  r.cfg.base_output_directory = "s3://bucket/out";
  EXPECT_NE(testing::error_of([&] { r.save(1); }).find("is a remote URL (s3://)"),
            std::string::npos);
  EXPECT_FALSE(fs::exists("s3:"));  // no local folder named after the URL
}

std::string outputs_error(const Config& cfg) {
  return testing::error_of([&] { check_outputs_writable(cfg); });
}

TEST(CheckpointFaults, UnwritableOutputsAreFoundBeforeTraining) {
  TestRun r("outputs");
  r.cfg.enable_checkpointing = true;
  EXPECT_EQ(outputs_error(r.cfg), "<no error>");
  EXPECT_TRUE(fs::is_directory(r.cfg.run_directory()));
  EXPECT_EQ(std::distance(fs::directory_iterator(r.cfg.run_directory()), {}),
            1);  // metrics.jsonl only: the probe file is gone
  // checkpoints/ is a file.
  fs::create_directories(r.cfg.run_directory());
  std::ofstream(r.checkpoints()) << "not a directory";
  std::string msg = outputs_error(r.cfg);
  EXPECT_NE(msg.find("'" + r.checkpoints().string() + "' exists but is not a directory"),
            std::string::npos)
      << msg;
  fs::remove(r.checkpoints());
  // base_output_directory below a regular file, and in a file system that refuses new entries.
  Config c = r.cfg;
  c.base_output_directory = (r.checkpoints().parent_path() / "metrics.jsonl" / "sub").string();
  msg = outputs_error(c);
  EXPECT_NE(msg.find("base_output_directory='" + c.base_output_directory +
                     "': cannot create the run directory"),
            std::string::npos)
      << msg;
  c.base_output_directory = "/proc/carousel-not-writable";
  EXPECT_NE(outputs_error(c).find("cannot create the run directory"), std::string::npos);
  // metrics_file: a directory, in a missing directory, a remote URL.
  c = r.cfg;
  c.metrics_file = r.cfg.run_directory();
  EXPECT_NE(outputs_error(c).find("metrics_file '" + c.metrics_file + "' is a directory"),
            std::string::npos);
  c.metrics_file = "/nonexistent-dir/metrics.jsonl";
  msg = outputs_error(c);
  EXPECT_NE(msg.find("metrics_file '/nonexistent-dir/metrics.jsonl' cannot be opened for "
                     "appending: No such file or directory"),
            std::string::npos)
      << msg;
  c.metrics_file = "gs://bucket/metrics.jsonl";
  EXPECT_NE(outputs_error(c).find("metrics_file='gs://bucket/metrics.jsonl' is a remote URL"),
            std::string::npos);
  // Partial checkpoints are cleaned at the start of a run too.
  fs::create_directories(r.checkpoints() / ".tmp-2-999999999");
  EXPECT_EQ(outputs_error(r.cfg), "<no error>");
  EXPECT_FALSE(fs::exists(r.checkpoints() / ".tmp-2-999999999"));
}

}  // namespace
}  // namespace carousel
