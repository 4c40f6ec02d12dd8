// test_trainer_slow.cpp — the learning test: long enough (about 20 s on one core) to carry the
// `slow` label.
#include <gtest/gtest.h>

#include <filesystem>
#include <numeric>

#include "host/config/config.h"
#include "host/report/logging.h"
#include "host/run/trainer.h"

namespace carousel {
namespace {

namespace fs = std::filesystem;

// 200 steps of the tiny model on a 4 KB text: the loss must fall far below the uniform
// log(256) = 5.55 it starts near.
TEST(TrainSlow, TinyLearnsTheTextCorpus) {
  init_logging({.rank = 0, .level = "warn", .file_dir = {}});
  Config c = load_config("", {"dataset_type=text",
                              "dataset_path=" CAROUSEL_TEST_DATA_DIR "/tiny_corpus.txt",
                              "steps=200", "learning_rate=0.003", "enable_checkpointing=false"})
                 .config;
  c.base_output_directory = (fs::temp_directory_path() / "carousel_trainer_tests").string();
  c.run_name = "learns";
  std::vector<double> l;
  for (const auto& s : train(c).steps) l.push_back(s.loss);
  const double first = std::accumulate(l.begin(), l.begin() + 5, 0.0) / 5;
  const double last = std::accumulate(l.end() - 5, l.end(), 0.0) / 5;
  RecordProperty("first5_mean_loss", std::to_string(first));
  RecordProperty("last5_mean_loss", std::to_string(last));
  std::printf("tiny on tiny_corpus.txt: mean loss of steps 1-5 %.4f, of steps 196-200 %.4f\n",
              first, last);
  EXPECT_GT(first, 5.0);
  EXPECT_LT(last, 2.5);
}

}  // namespace
}  // namespace carousel
