// test_trainer.cpp — `carousel train` on one device: learning, bitwise reproducibility, exact
// resume from a checkpoint.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "collectives/rendezvous.h"
#include "host/config/config.h"
#include "host/io/checkpoint.h"
#include "host/mesh/launch.h"
#include "host/reliability/fault_injection.h"
#include "host/report/logging.h"
#include "host/run/trainer.h"
#include "tests/support/checkpoint_files.h"
#include "tests/support/log_capture.h"
#include "tests/support/sequential_training.h"
#include "tests/support/test_util.h"

namespace carousel {
namespace {

namespace fs = std::filesystem;

// `more` overrides the keys after the defaults below.
Config small_run(const std::string& run, std::int64_t steps,
                 const std::vector<std::string>& more = {}) {
  init_logging({.rank = 0, .level = "warn", .file_dir = {}});
  std::vector<std::string> keys = {"base_num_decoder_layers=2",
                                   "max_target_length=32",
                                   "per_device_batch_size=4",
                                   "num_pipeline_microbatches=2",
                                   "learning_rate=0.003",
                                   "dataset_type=text",
                                   "dataset_path=" CAROUSEL_TEST_DATA_DIR "/tiny_corpus.txt"};
  keys.insert(keys.end(), more.begin(), more.end());
  Config c = load_config("", keys).config;
  c.steps = steps;
  c.base_output_directory = (fs::temp_directory_path() / "carousel_trainer_tests").string();
  c.run_name = run;
  return c;
}

std::vector<double> losses(const TrainResult& r) {
  std::vector<double> out;
  for (const auto& s : r.steps) out.push_back(s.loss);
  return out;
}

// One device is the trivial mesh of the executor; it must compute what the sequential model
// computes: step 0's loss bitwise (same ops per microbatch, summed in the same order; B x T is
// a power of two, so the mean's scaling is exact either way), the gradient norm to float32
// rounding (its sum of squares is split per parameter group), later steps within 1e-5.
TEST(Train, OneDeviceEqualsTheSequentialModel) {
  for (const char* dtype : {"float32", "bfloat16"}) {
    Config c = small_run("oracle", 4);
    c.enable_checkpointing = false;
    c.dtype = dtype;
    const auto executor = train(c).steps;
    const auto oracle = train_sequentially(c);
    ASSERT_EQ(executor.size(), oracle.size());
    EXPECT_EQ(executor[0].loss, oracle[0].loss) << dtype;
    for (std::size_t s = 0; s < oracle.size(); ++s) {
      EXPECT_NEAR(executor[s].loss, oracle[s].loss, 1e-5 * oracle[s].loss) << dtype << s;
      EXPECT_NEAR(executor[s].grad_norm, oracle[s].grad_norm, 1e-5 * oracle[s].grad_norm)
          << dtype << " step " << s;
    }
  }
}

TEST(Train, TwoRunsGiveBitwiseIdenticalLosses) {
  Config c = small_run("repro", 12);
  c.enable_checkpointing = false;
  fs::remove_all(c.run_directory());
  const auto a = losses(train(c));
  const auto b = losses(train(c));
  ASSERT_EQ(a.size(), 12u);
  EXPECT_EQ(a, b);  // exact: same config and seed give the same bits
}

// dtype=bfloat16 (emulated on the CPU) learns like float32: losses within 1 % at every step of
// 12, and is as reproducible.
TEST(Train, Bfloat16TracksFloat32AndIsReproducible) {
  Config c = small_run("bf16", 12);
  c.enable_checkpointing = false;
  const auto f32 = losses(train(c));
  c.dtype = "bfloat16";
  const auto bf16 = losses(train(c));
  ASSERT_EQ(bf16.size(), f32.size());
  for (std::size_t i = 0; i < f32.size(); ++i) {
    EXPECT_NEAR(bf16[i] / f32[i], 1.0, 0.01) << "step " << i;
  }
  EXPECT_NE(bf16, f32);  // it did run in bfloat16
  EXPECT_LT(bf16.back(), bf16.front() - 0.5);
  EXPECT_EQ(losses(train(c)), bf16);
}

// Started torchrun-style without mpirun, each process would train the whole job into the same
// run directory: one clear error instead. Alone, the process is a group of one.
TEST(Launch, TorchrunStyleStartWithoutMpirunIsAClearError) {
  if (mpi_launch_size() > 0) GTEST_SKIP() << "this test process was started by mpirun";
  const char* before = std::getenv("WORLD_SIZE");
  const std::string saved = before ? before : "";
  setenv("WORLD_SIZE", "4", 1);
  const std::string msg = testing::error_of([] { ProcessGroup::join(5.0); });
  if (before)
    setenv("WORLD_SIZE", saved.c_str(), 1);
  else
    unsetenv("WORLD_SIZE");
  EXPECT_NE(msg.find("started with WORLD_SIZE=4 (torchrun-style)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("mpirun -np 4 carousel train"), std::string::npos) << msg;
  if (!before || std::atoi(saved.c_str()) <= 1) {
    const auto alone = ProcessGroup::join(5.0);
    EXPECT_EQ(alone->size(), 1);
    EXPECT_EQ(alone->world(), nullptr);
  }
}

// Slurm tasks without an MPI rendezvous (srun without --mpi=pmix) would likewise each run the
// whole job: refused, naming the srun flag.
TEST(Launch, SlurmTasksWithoutMpiRendezvousAreAClearError) {
  if (mpi_launch_size() > 0) GTEST_SKIP() << "this test process was started by mpirun";
  const char* before = std::getenv("SLURM_NTASKS");
  const std::string saved = before ? before : "";
  setenv("SLURM_NTASKS", "8", 1);
  const std::string msg = testing::error_of([] { ProcessGroup::join(5.0); });
  if (before)
    setenv("SLURM_NTASKS", saved.c_str(), 1);
  else
    unsetenv("SLURM_NTASKS");
  EXPECT_NE(msg.find("one of SLURM_NTASKS=8 Slurm tasks"), std::string::npos) << msg;
  EXPECT_NE(msg.find("srun --mpi=pmix"), std::string::npos) << msg;
}

// The interrupted run stops after 6 of 10 steps; its learning-rate schedule is that of the
// 10-step run (the schedule follows `steps` unless learning_rate_schedule_steps is set).
void expect_exact_resume(const std::string& name, const std::vector<std::string>& data) {
  Config straight = small_run(name + "_straight", 10, data);
  Config resumed = small_run(name + "_resumed", 6, data);
  for (Config* c : {&straight, &resumed}) {
    c->learning_rate_schedule_steps = 10;
    fs::remove_all(c->run_directory());
  }
  const auto full = losses(train(straight));

  resumed.checkpoint_period = 3;
  const TrainResult first = train(resumed);  // steps 0..5, checkpoints at 3 and 6
  EXPECT_EQ(first.start_step, 0);
  resumed.steps = 10;
  const TrainResult second = train(resumed);  // resumes at 6
  EXPECT_EQ(second.start_step, 6);
  ASSERT_EQ(second.steps.size(), 4u);
  EXPECT_EQ(losses(first), std::vector<double>(full.begin(), full.begin() + 6));
  EXPECT_EQ(losses(second), std::vector<double>(full.begin() + 6, full.end()));
  EXPECT_EQ(testing::checkpoint_data_bytes(fs::path(straight.run_directory()) / "checkpoints/10"),
            testing::checkpoint_data_bytes(fs::path(resumed.run_directory()) / "checkpoints/10"));
}

TEST(Train, ResumeContinuesExactlyAsTheUninterruptedRun) { expect_exact_resume("plain", {}); }

// Mixture of experts with the auxiliary-loss-free bias: the bias, moved by every step's loads,
// is saved in the checkpoint's training state and restored, so the resumed run routes as the
// uninterrupted one (a bias restarting at zero would route the later steps otherwise).
TEST(Train, MoeWithRoutedBiasResumesExactly) {
  expect_exact_resume("moe_bias", {"num_experts=4", "num_experts_per_tok=2", "base_moe_mlp_dim=16",
                                   "routed_score_func=sigmoid", "routed_bias=true",
                                   "routed_bias_update_rate=0.02"});
  const nlohmann::json state = nlohmann::json::parse(
      std::ifstream(fs::temp_directory_path() /
                    "carousel_trainer_tests/moe_bias_resumed/checkpoints/10/state.json"));
  ASSERT_EQ(state["router_bias"].size(), 2u);  // both layers are MoE
  double moved = 0;
  for (const auto& b : state["router_bias"][1]) moved += std::abs(b.get<double>());
  EXPECT_GT(moved, 0.0);  // the loads moved it
}

// Shuffled windows of two datasets mixed 3:1: the data position is still the step.
TEST(Train, ShuffledMixedDataResumesExactly) {
  const std::string corpus = CAROUSEL_TEST_DATA_DIR "/tiny_corpus.txt";
  expect_exact_resume("shuffled", {"dataset_path=" + corpus + ",3;" + corpus + ",1",
                                   "enable_data_shuffling=true", "data_shuffle_seed=5"});
}

// Llama 3's vocabulary (128,256 ids): an llm.c version-7 shard written here byte by byte (not by
// carousel's writer) with ids past uint16, trained on and resumed exactly.
TEST(Train, Llama3VocabularyShardsTrainAndResumeExactly) {
  const std::string path = (fs::temp_directory_path() / "carousel_llama3_vocab.bin").string();
  {
    std::ofstream out(path, std::ios::binary);
    const std::int32_t n = 4096;
    const std::int32_t header[3] = {20240801, 7, n};
    out.write(reinterpret_cast<const char*>(header), sizeof(header));
    out.write(std::string(1024 - sizeof(header), '\0').data(), 1024 - sizeof(header));
    for (std::int32_t i = 0; i < n; ++i) {
      const std::uint32_t id = std::uint32_t(i % 3 == 0 ? 128255 - i : (i * 31) % 128256);
      const unsigned char le[4] = {std::uint8_t(id), std::uint8_t(id >> 8), std::uint8_t(id >> 16),
                                   std::uint8_t(id >> 24)};
      out.write(reinterpret_cast<const char*>(le), 4);
    }
  }
  expect_exact_resume("llama3_vocab",
                      {"dataset_type=tokens", "dataset_path=" + path, "vocab_size=128256",
                       "base_emb_dim=32", "base_mlp_dim=64", "base_num_query_heads=2",
                       "base_num_kv_heads=2", "max_target_length=16", "per_device_batch_size=2"});
}

// async_checkpointing: checkpoint 2's files take 1.5 s longer to write (a slow file system), and
// the next step is recorded well before that; synchronous, it waits. Every checkpoint is
// complete when train() returns.
TEST(Train, AsyncCheckpointsOverlapTheNextSteps) {
  const auto gap_after_first_save = [](bool async) {
    Config c = small_run(
        async ? "async_save" : "sync_save", 4,
        {"checkpoint_period=2", async ? "async_checkpointing=true" : "async_checkpointing=false"});
    fs::remove_all(c.run_directory());
    inject_faults("slowsave:step=2,seconds=1.5");
    train(c);
    inject_faults("");
    std::vector<double> times;
    std::ifstream metrics(fs::path(c.run_directory()) / "metrics.jsonl");
    for (std::string line; std::getline(metrics, line);) {
      times.push_back(nlohmann::json::parse(line)["time"].get<double>());
    }
    EXPECT_EQ(times.size(), 4u);
    for (const char* step : {"2", "4"}) {
      EXPECT_NO_THROW(verify_checkpoint(c.run_directory() + "/checkpoints/" + step)) << step;
    }
    return times.at(2) - times.at(1);  // step 3's record after step 2's (whose save is slow)
  };
  EXPECT_LT(gap_after_first_save(true), 1.0);
  EXPECT_GE(gap_after_first_save(false), 1.5);
}

// packing needs the token that ends a document: eos_id, or the tokenizer's eos token.
TEST(Train, PackingWithoutAnEosTokenIsAClearError) {
  Config c = small_run("packing_no_eos", 1, {"packing=true"});
  EXPECT_NE(testing::error_of([&] { train(c); })
                .find("packing=true needs the token that ends a document: set eos_id=N, or "
                      "tokenizer_path=tokenizer.json"),
            std::string::npos);
}

// max_num_checkpoints_to_keep=2 with a save every step: the two newest complete checkpoints stay,
// across a resume; a directory without a manifest (a crash's leftover) and an unrelated file are
// left alone, and a removal a crash interrupted (.removing-*) is finished.
TEST(Train, RetentionKeepsTheNewestCompleteCheckpoints) {
  Config c = small_run("retention", 4, {"checkpoint_period=1", "max_num_checkpoints_to_keep=2"});
  fs::remove_all(c.run_directory());
  const fs::path root = fs::path(c.run_directory()) / "checkpoints";
  fs::create_directories(root / "100");  // no manifest: not a complete checkpoint
  fs::create_directories(root / ".removing-7-1");
  std::ofstream(root / "notes.txt") << "mine";
  const auto listing = [&] {
    std::set<std::string> names;
    for (const auto& e : fs::directory_iterator(root)) names.insert(e.path().filename().string());
    return names;
  };
  train(c);
  EXPECT_EQ(listing(), (std::set<std::string>{"100", "3", "4", "notes.txt"}));
  c.steps = 6;
  EXPECT_EQ(train(c).start_step, 4);
  EXPECT_EQ(listing(), (std::set<std::string>{"100", "5", "6", "notes.txt"}));
  c.steps = 7;
  c.max_num_checkpoints_to_keep = 0;  // keep all from now on
  train(c);
  EXPECT_EQ(listing(), (std::set<std::string>{"100", "5", "6", "7", "notes.txt"}));
}

// A corrupt newer checkpoint (skipped by the resume) takes no place among those kept and is not
// removed; the checkpoint just written is always kept.
TEST(Train, RetentionIgnoresACorruptNewerCheckpoint) {
  Config c = small_run("retention_corrupt", 4, {"checkpoint_period=2"});
  fs::remove_all(c.run_directory());
  train(c);  // checkpoints 2 and 4
  const fs::path root = fs::path(c.run_directory()) / "checkpoints";
  std::ofstream(root / "4" / "optimizer.safetensors", std::ios::app) << 'x';
  c.steps = 3;
  c.checkpoint_period = 1;
  c.max_num_checkpoints_to_keep = 1;
  EXPECT_EQ(train(c).start_step, 2);  // 4 is skipped
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(root)) names.insert(e.path().filename().string());
  EXPECT_EQ(names, (std::set<std::string>{"3", "4"}));
}

// Resuming a run directory with another model is refused before any tensor is read, naming
// the key and both values; another learning rate resumes (with a warning).
TEST(Train, ResumingAnotherModelIsAClearError) {
  Config first = small_run("resume_other_model", 2);
  fs::remove_all(first.run_directory());
  train(first);
  Config wider = small_run("resume_other_model", 3);
  wider.model.mlp_dim = first.model.mlp_dim * 2;
  const std::string msg = testing::error_of([&] { train(wider); });
  EXPECT_NE(msg.find("holds another model: base_mlp_dim="), std::string::npos) << msg;
  Config other_lr = small_run("resume_other_model", 3);
  other_lr.learning_rate = first.learning_rate * 2;
  EXPECT_EQ(train(other_lr).start_step, 2);
}

// What a changed key means on resume is its ResumeClass, a column of the key table: run control
// (progress_bar, log_period) changes silently, a layout change (remat_policy) is said, a
// training setting (learning_rate) is warned about.
TEST(Train, ResumeTreatsEachChangedKeyByItsClass) {
  Config first = small_run("resume_classes", 2);
  fs::remove_all(first.run_directory());
  train(first);
  Config next = small_run("resume_classes", 3);
  next.progress_bar = "never";
  next.log_period = 2;
  next.remat_policy = "none";
  next.learning_rate = first.learning_rate * 2;
  testing::LogCapture log;
  EXPECT_EQ(train(next).start_step, 2);
  const std::string text = log.text.str();
  EXPECT_NE(text.find("differs from the one it was saved with: learning_rate="), std::string::npos)
      << text;
  EXPECT_NE(text.find("resuming on another layout (remat_policy=none (saved: full))"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("progress_bar="), std::string::npos) << text;
  EXPECT_EQ(text.find("log_period="), std::string::npos) << text;
  // The save says how long it took (the time a SIGUSR1 warning must leave for it).
  const std::regex saved(R"(checkpoint saved: \S+ \(1 part, [0-9]+\.[0-9]{2} s in the background\))");
  EXPECT_TRUE(std::regex_search(text, saved)) << text;
}

// A resume that moves the learning-rate schedule says so: steps=4 -> 8 with the schedule
// following steps (the saved run's rate is 0 from step S = 4 on, docs/training.md; the longer
// schedule's is not), and the key that keeps the saved schedule; with it set, nothing is said.
TEST(Train, ResumeThatChangesTheLearningRateScheduleSaysHow) {
  Config first = small_run("lr_resume", 4);
  fs::remove_all(first.run_directory());
  train(first);
  Config kept = small_run("lr_resume", 6, {"learning_rate_schedule_steps=4"});
  {
    testing::LogCapture log;
    EXPECT_EQ(train(kept).start_step, 4);
    EXPECT_EQ(log.text.str().find("another learning-rate schedule"), std::string::npos)
        << log.text.str();
  }
  Config longer = small_run("lr_resume", 8);
  testing::LogCapture log;
  EXPECT_EQ(train(longer).start_step, 6);
  const std::string text = log.text.str();
  EXPECT_NE(text.find("with another learning-rate schedule: from step 7 the rate is "),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("where the saved run's would be 0 (learning_rate_schedule_steps follows "
                      "steps=8; the saved run's schedule spans 4 steps: set "
                      "learning_rate_schedule_steps=4 to keep it)"),
            std::string::npos)
      << text;
}

TEST(Train, LoadParametersPathStartsFromACheckpoint) {
  Config base = small_run("base", 3);
  fs::remove_all(base.run_directory());
  train(base);
  Config fine = small_run("finetune", 2);
  fs::remove_all(fine.run_directory());
  fine.enable_checkpointing = false;
  fine.load_parameters_path = (fs::path(base.run_directory()) / "checkpoints/3").string();
  Config scratch = fine;
  scratch.load_parameters_path.clear();
  // Same data and steps; only the starting parameters differ, so the first loss must differ.
  EXPECT_NE(losses(train(fine))[0], losses(train(scratch))[0]);
}

}  // namespace
}  // namespace carousel
