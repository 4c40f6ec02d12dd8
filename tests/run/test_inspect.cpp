// test_inspect.cpp — `carousel inspect` on a checkpoint written by a real training run, and on
// corrupted copies of it: the report names the step, the tensors and the mismatching file; a
// Hugging Face index is checked like the manifest.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "compute/error.h"
#include "host/config/config.h"
#include "host/io/files.h"
#include "host/io/inspect.h"
#include "host/io/safetensors.h"
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

// Lists `file` of `dir` in its manifest with its true size and CRC32, as a save would have, so that
// only the index check can object.
void list_in_manifest(const fs::path& dir, const std::string& file) {
  nlohmann::json manifest = nlohmann::json::parse(std::ifstream(dir / "manifest.json"));
  manifest["files"][file] = {{"bytes", fs::file_size(dir / file)},
                             {"crc32", file_crc32(dir / file)}};
  std::ofstream(dir / "manifest.json", std::ios::trunc) << manifest.dump(2);
}

// A Hugging Face index of the checkpoint's model.safetensors: every tensor to `file`, except
// `odd` to `odd_file` when given.
void write_index(const fs::path& dir, const std::string& file, const std::string& odd = "",
                 const std::string& odd_file = "") {
  nlohmann::json map = nlohmann::json::object();
  const SafetensorsFile model((dir / "model.safetensors").string());
  for (const auto& [name, e] : model.entries()) {
    map[name] = name == odd ? odd_file : file;
  }
  std::ofstream(dir / "model.safetensors.index.json")
      << nlohmann::json{{"metadata", {{"total_size", 0}}}, {"weight_map", map}}.dump(2);
}

// transformers follows the index: a checkpoint whose index sends a tensor out of the directory,
// to a file the manifest does not list, or through a symlink, is not "verified", even when the
// index itself is listed with its true CRC32; an index the manifest does not list is refused too.
TEST(Inspect, TheIndexIsCheckedLikeTheManifest) {
  const std::string tensor = "model.embed_tokens.weight";
  const auto failed = [&](const fs::path& dir, const std::string& words) {
    const Report r = inspect(dir);
    EXPECT_EQ(r.code, 2) << r.text;
    const std::string verdict =
        "manifest: FAILED: checkpoint index '" + (dir / "model.safetensors.index.json").string();
    const auto at = r.text.find(verdict);
    EXPECT_NE(at, std::string::npos) << r.text;
    EXPECT_NE(r.text.find(words, at), std::string::npos) << words << "\n" << r.text;
    EXPECT_EQ(r.text.find("manifest: verified"), std::string::npos) << r.text;
  };
  fs::path dir = corrupt_copy("index_ok");
  write_index(dir, "model.safetensors");
  list_in_manifest(dir, "model.safetensors.index.json");
  const Report ok = inspect(dir);
  EXPECT_EQ(ok.code, 0) << ok.text;
  EXPECT_NE(ok.text.find("\nmanifest: verified\n"), std::string::npos) << ok.text;

  dir = corrupt_copy("index_outside");
  write_index(dir, "model.safetensors", tensor, "../../../../../etc/passwd");
  list_in_manifest(dir, "model.safetensors.index.json");
  failed(dir, ": weight_map[\"" + tensor +
                  "\"] = \"../../../../../etc/passwd\" is not a file name inside the checkpoint "
                  "directory");

  dir = corrupt_copy("index_unlisted_file");
  fs::copy_file(dir / "model.safetensors", dir / "model-00001-of-00001.safetensors");
  write_index(dir, "model-00001-of-00001.safetensors");
  list_in_manifest(dir, "model.safetensors.index.json");
  failed(dir,
         "= \"model-00001-of-00001.safetensors\" names a file that manifest.json does not list");

  dir = corrupt_copy("index_symlink");  // listed with the bytes behind the link
  fs::copy_file(dir / "model.safetensors", scratch() / "elsewhere.safetensors",
                fs::copy_options::overwrite_existing);
  fs::create_symlink(scratch() / "elsewhere.safetensors", dir / "model-00001-of-00001.safetensors");
  write_index(dir, "model-00001-of-00001.safetensors");
  list_in_manifest(dir, "model-00001-of-00001.safetensors");
  list_in_manifest(dir, "model.safetensors.index.json");
  failed(dir, "\"model-00001-of-00001.safetensors\" names a file that is a symbolic link");

  dir = corrupt_copy("index_not_in_manifest");
  write_index(dir, "model.safetensors");
  failed(dir, " is not listed in manifest.json");

  dir = corrupt_copy("index_other_file");  // a listed file that is not a model file
  write_index(dir, "model.safetensors", tensor, "optimizer.safetensors");
  list_in_manifest(dir, "model.safetensors.index.json");
  failed(dir, "\"optimizer.safetensors\" is not a model file of the checkpoint");

  // A tensor the index puts in a file without it, and one of the file the index leaves out
  // (transformers would not load it).
  const auto edit_index = [&](const fs::path& d, const std::function<void(nlohmann::json&)>& f) {
    write_index(d, "model.safetensors");
    nlohmann::json index = nlohmann::json::parse(std::ifstream(d / "model.safetensors.index.json"));
    f(index["weight_map"]);
    std::ofstream(d / "model.safetensors.index.json", std::ios::trunc) << index.dump(2);
    list_in_manifest(d, "model.safetensors.index.json");
  };
  dir = corrupt_copy("index_extra_tensor");
  edit_index(dir, [](nlohmann::json& map) { map["model.no_such.weight"] = "model.safetensors"; });
  failed(dir,
         ": weight_map puts tensor 'model.no_such.weight' in 'model.safetensors', which does "
         "not hold it");
  dir = corrupt_copy("index_missing_tensor");
  edit_index(dir, [&](nlohmann::json& map) { map.erase(tensor); });
  failed(dir, ": tensor '" + tensor + "' of 'model.safetensors' is not in weight_map");
}

// Every table keeps its columns whatever its names' lengths: in each, the crc32 column of every
// row starts where its header's does (a part file name longer than 24 characters shifted the
// manifest's rows before).
TEST(Inspect, ColumnsStayAlignedWithLongNames) {
  const fs::path copy = corrupt_copy("long_names");
  nlohmann::json manifest = nlohmann::json::parse(std::ifstream(copy / "manifest.json"));
  manifest["files"]["optimizer-state-part-00001-of-00016.safetensors"] = {{"bytes", 1},
                                                                          {"crc32", 0}};
  std::ofstream(copy / "manifest.json") << manifest.dump();
  const Report r = inspect(copy);
  std::istringstream lines(r.text);
  std::string line;
  std::size_t column = std::string::npos;  // the current table's crc32 column
  int tables = 0, rows = 0;
  while (std::getline(lines, line)) {
    if (line.rfind("  name ", 0) == 0 || line.rfind("  file ", 0) == 0) {
      column = line.find("crc32");
      ++tables;
    } else if (line.empty() || line[0] != ' ') {
      column = std::string::npos;
    } else if (column != std::string::npos) {
      ASSERT_GE(line.size(), column + 8) << line;
      EXPECT_EQ(line.substr(column - 2, 2), "  ") << line;
      EXPECT_EQ(line.find_first_not_of("0123456789abcdef?", column), std::string::npos) << line;
      ++rows;
    }
  }
  EXPECT_GE(tables, 3) << r.text;  // manifest, parameters, optimizer state
  EXPECT_GT(rows, 10) << r.text;
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

