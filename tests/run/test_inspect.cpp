// test_inspect.cpp — `carousel inspect` on a checkpoint written by a real training run, and on
// corrupted copies of it: the report names the step, the tensors and the mismatching file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "compute/error.h"
#include "host/config/config.h"
#include "host/io/inspect.h"
#include "host/report/logging.h"
#include "host/run/trainer.h"
#include "tests/support/test_util.h"

namespace carousel {
namespace {

namespace fs = std::filesystem;

struct Report {
  int code;
  std::string text;
};

Report inspect(const fs::path& dir) {
  std::ostringstream out;
  const int code = inspect_checkpoint(dir.string(), out);
  return {code, out.str()};
}

// This process's scratch directory: ctest runs each test case as its own process, in parallel.
fs::path scratch() {
  return fs::temp_directory_path() / fmt::format("carousel_inspect_tests_{}", ::getpid());
}

// A 2-layer tiny model trained 3 steps; its run directory (checkpoint of step 3 at the end).
fs::path trained_run() {
  static const fs::path run = [] {
    init_logging({.rank = 0, .level = "warn", .file_dir = {}});
    Config c = load_config("", {"base_num_decoder_layers=2", "max_target_length=16",
                                "per_device_batch_size=2", "steps=3"})
                   .config;
    c.base_output_directory = scratch().string();
    c.run_name = "run";
    fs::remove_all(c.run_directory());
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(scratch(), ec);
    });
    train(c);
    return fs::path(c.run_directory());
  }();
  return run;
}

fs::path corrupt_copy(const std::string& name) {
  const fs::path copy = scratch() / name;
  fs::remove_all(copy);
  fs::copy(trained_run() / "checkpoints" / "3", copy, fs::copy_options::recursive);
  return copy;
}

void flip_byte(const fs::path& file, std::streamoff from_end) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-from_end, std::ios::end);
  char c = 0;
  f.get(c);
  f.seekp(-from_end, std::ios::end);
  f.put(char(c ^ 0x01));
}

TEST(Inspect, ReportsStepTensorsAndVerifiedManifest) {
  const Report r = inspect(trained_run() / "checkpoints" / "3");
  EXPECT_EQ(r.code, 0) << r.text;
  EXPECT_NE(r.text.find("step: 3\n"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("format_version: 2\n"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("model.embed_tokens.weight"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("[256,64]"), std::string::npos) << r.text;  // V x E
  EXPECT_NE(r.text.find(" F32 "), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("optimizer state (AdamW)"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("model.layers.1.mlp.up_proj.weight.exp_avg_sq"), std::string::npos);
  EXPECT_EQ(r.text.find("model.layers.2."), std::string::npos) << "only 2 layers were trained";
  EXPECT_NE(r.text.find("\nmanifest: verified\n"), std::string::npos) << r.text;
}

TEST(Inspect, RunDirectoryMeansItsNewestCheckpoint) {
  const Report r = inspect(trained_run());
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.text.find("checkpoint: " + (trained_run() / "checkpoints" / "3").string()),
            std::string::npos)
      << r.text;
}

TEST(Inspect, OneFlippedByteNamesTheMismatchingFile) {
  const fs::path dir = corrupt_copy("flipped");
  flip_byte(dir / "model.safetensors", 5);  // inside the last tensor's data
  const Report r = inspect(dir);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.text.find("manifest: FAILED: checkpoint '" + dir.string() +
                        "': 'model.safetensors' fails its CRC32 check (corrupt)"),
            std::string::npos)
      << r.text;
  EXPECT_EQ(r.text.find("manifest: verified"), std::string::npos);
}

TEST(Inspect, UnreadableFilesAreReportedAndTheRestStillListed) {
  const fs::path dir = corrupt_copy("truncated");
  fs::resize_file(dir / "optimizer.safetensors", 100);  // header cut: the file cannot be parsed
  const Report r = inspect(dir);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.text.find("optimizer.safetensors: cannot be read"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("model.embed_tokens.weight"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("'optimizer.safetensors' is 100 bytes but the manifest says"),
            std::string::npos)
      << r.text;
}

TEST(Inspect, NotACheckpointIsAnError) {
  const fs::path empty = scratch() / "empty";
  fs::remove_all(empty);
  fs::create_directories(empty);
  EXPECT_NE(testing::error_of([&] { inspect(empty); }).find("is not a checkpoint"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { inspect(empty / "missing"); }).find("does not exist"),
            std::string::npos);
  fs::remove_all(scratch());
}

}  // namespace
}  // namespace carousel
