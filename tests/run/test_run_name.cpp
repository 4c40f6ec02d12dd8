// test_run_name.cpp — run hygiene: a run without a run_name gets a new directory (model name +
// local time, suffixed when taken) and never resumes another run; a named run resumes its own.
#include <gtest/gtest.h>

#include <ctime>
#include <filesystem>

#include "host/config/config.h"
#include "host/config/run_name.h"
#include "host/report/logging.h"
#include "host/run/trainer.h"

namespace carousel {
namespace {

namespace fs = std::filesystem;

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / "carousel_run_name_tests" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// The expected name from the C library's own formatting of the same instant.
std::string strftime_name(const std::string& model, std::time_t t) {
  std::tm local{};
  localtime_r(&t, &local);
  char text[64];
  std::strftime(text, sizeof text, "%Y-%m-%d-%H-%M-%S", &local);
  return model + "_" + text;
}

TEST(RunName, ModelAndLocalTimeSuffixedWhileTaken) {
  const fs::path base = scratch("fresh");
  const std::time_t t = 1795000000;  // a fixed instant
  const std::string first = fresh_run_name("llama2-7b", t, base.string());
  EXPECT_EQ(first, strftime_name("llama2-7b", t));
  fs::create_directory(base / first);
  EXPECT_EQ(fresh_run_name("llama2-7b", t, base.string()), first + "-2");
  fs::create_directory(base / (first + "-2"));
  EXPECT_EQ(fresh_run_name("llama2-7b", t, base.string()), first + "-3");
  // A name is one path component whatever the model name holds.
  EXPECT_EQ(fresh_run_name("org/model", t, base.string()), strftime_name("org-model", t));
}

TEST(RunName, NamedRunKeepsItsName) {
  Config c;
  c.run_name = "mine";
  EXPECT_FALSE(resolve_run_name(c, nullptr));
  EXPECT_EQ(c.run_name, "mine");
}

Config tiny_run(const fs::path& base) {
  init_logging({.rank = 0, .level = "warn", .file_dir = {}});
  Config c = load_config("", {"max_target_length=16", "steps=2", "dataset_type=text",
                              "dataset_path=" CAROUSEL_TEST_DATA_DIR "/tiny_corpus.txt"})
                 .config;
  c.base_output_directory = base.string();
  return c;
}

// Two unnamed runs of the same config in one base directory: two directories, the second starts
// at step 0 although the first left a final checkpoint; naming the first resumes it.
TEST(RunName, UnnamedRunsNeverResumeEachOther) {
  const fs::path base = scratch("train");
  Config c = tiny_run(base);
  ASSERT_TRUE(c.run_name.empty());
  const TrainResult first = train(c);
  const TrainResult second = train(c);
  EXPECT_NE(first.run_directory, second.run_directory);
  EXPECT_EQ(fs::path(first.run_directory).parent_path(), base);
  EXPECT_EQ(fs::path(first.run_directory).filename().string().rfind("tiny_", 0), 0u)
      << first.run_directory;
  EXPECT_EQ(second.start_step, 0);
  EXPECT_TRUE(fs::is_directory(fs::path(first.run_directory) / "checkpoints" / "2"));
  EXPECT_TRUE(fs::is_regular_file(fs::path(second.run_directory) / "metrics.jsonl"));

  c.run_name = fs::path(first.run_directory).filename().string();
  c.steps = 3;
  const TrainResult resumed = train(c);
  EXPECT_EQ(resumed.start_step, 2);
  EXPECT_EQ(resumed.run_directory, first.run_directory);
}

}  // namespace
}  // namespace carousel
