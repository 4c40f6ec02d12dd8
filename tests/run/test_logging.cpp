// test_logging.cpp — log lines carry the rank; each rank can write its own file; a bad level is
// one clear error.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "compute/error.h"
#include "host/report/logging.h"
#include "host/report/progress_bar.h"

namespace carousel {
namespace {

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(Logging, PerRankFileCarriesTheRank) {
  const auto dir = std::filesystem::temp_directory_path() / "carousel_test_logging";
  std::filesystem::remove_all(dir);
  init_logging({.rank = 3, .level = "info", .file_dir = dir.string()});
  spdlog::info("hello from a stage");
  spdlog::debug("details for the file only");
  spdlog::default_logger()->flush();
  const std::string text = read_file(dir / "rank3.log");
  EXPECT_NE(text.find("[rank 3] hello from a stage"), std::string::npos) << text;
  EXPECT_NE(text.find("details for the file only"), std::string::npos) << text;
  std::filesystem::remove_all(dir);
}

TEST(Logging, UnknownLevelIsAClearError) {
  try {
    init_logging({.rank = 0, .level = "verbose", .file_dir = {}});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("log level 'verbose' is not valid"), std::string::npos);
  }
}

}  // namespace
}  // namespace carousel

namespace carousel {
namespace {

TEST(StepReport, DurationsReadLikeAClock) {
  EXPECT_EQ(format_duration(0), "0s");
  EXPECT_EQ(format_duration(59.4), "59s");
  EXPECT_EQ(format_duration(187), "3m07s");
  EXPECT_EQ(format_duration(7500), "2h05m");
}

}  // namespace
}  // namespace carousel
