// test_output_files.cpp — the one way carousel opens what it writes (host/io/files.h OutputFile,
// docs/reliability.md#files-and-outputs): a symlink, FIFO, directory or device in an output's
// place is one error naming it, never written through or waited on; the run lock holds when its
// dotfile is deleted; the TensorBoard directory removed or replaced mid-run stops the run like a
// lost metrics file; a safetensors header naming a tensor twice is refused.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <iterator>
#include <thread>

#include "host/config/config.h"
#include "host/io/checkpoint.h"
#include "host/io/files.h"
#include "host/io/run_lock.h"
#include "host/io/safetensors.h"
#include "host/report/logging.h"
#include "host/report/tensorboard.h"
#include "host/run/trainer.h"
#include "tests/support/test_util.h"

namespace carousel {
namespace {

namespace fs = std::filesystem;

// A fresh directory under /tmp, with a file outside it whose content must survive every test.
struct Place {
  fs::path dir, outside;
  explicit Place(const std::string& name)
      : dir(fs::temp_directory_path() / ("carousel_outputs_" + name)),
        outside(fs::temp_directory_path() / ("carousel_outputs_" + name + "_target.txt")) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream(outside, std::ios::trunc) << "another user's file\n";
  }
  std::string outside_text() const {
    std::ifstream in(outside);
    return {std::istreambuf_iterator<char>(in), {}};
  }
};

// The error of opening `path` in `mode`, bounded in time: a FIFO opened the usual way blocks
// until a reader comes, which would hang the test rather than fail it.
std::string open_error(const fs::path& path, OutputMode mode, const fs::path& within = {}) {
  auto result = std::async(std::launch::async, [=] {
    return testing::error_of([&] { OutputFile(path, "test output", mode, within); });
  });
  if (result.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    ADD_FAILURE() << "opening '" << path << "' blocked (a FIFO opened blocking?)";
    std::quick_exit(1);  // the thread is stuck in open(2): nothing else can end it
  }
  return result.get();
}

const char* kTail = ": carousel writes only regular files in the run directory; remove it";

TEST(OutputFiles, ASymlinkIsRefusedAndItsTargetUntouched) {
  const Place p("symlink");
  const fs::path link = p.dir / "trace.json";
  fs::create_symlink(p.outside, link);
  for (OutputMode mode : {OutputMode::Replace, OutputMode::Append, OutputMode::Update}) {
    EXPECT_EQ(open_error(link, mode), "test output '" + link.string() + "' is a symlink (to '" +
                                          p.outside.string() + "')" + kTail);
  }
  EXPECT_EQ(p.outside_text(), "another user's file\n");  // before: truncated or appended to
  // write_text_file, used by traces, costs, op times and `carousel schedule`, goes the same way.
  EXPECT_NE(testing::error_of([&] {
              write_text_file(link, "x", "profiler trace");
            }).find("profiler trace '" + link.string() + "' is a symlink"),
            std::string::npos);
  EXPECT_EQ(p.outside_text(), "another user's file\n");
  // A dangling symlink: not a way to create a file elsewhere either.
  const fs::path dangling = p.dir / "op_times.json";
  fs::create_symlink(p.dir / "nowhere" / "x.json", dangling);
  EXPECT_NE(open_error(dangling, OutputMode::Replace).find("is a symlink"), std::string::npos);
}

TEST(OutputFiles, AFifoIsRefusedWithoutBlockingWithOrWithoutAReader) {
  const Place p("fifo");
  const fs::path fifo = p.dir / "schedule_costs.yml";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string expected = "test output '" + fifo.string() + "' is a FIFO (named pipe)" + kTail;
  EXPECT_EQ(open_error(fifo, OutputMode::Replace), expected);      // no reader: open would block
  EXPECT_EQ(open_error(fifo, OutputMode::Update), expected);       // O_RDWR opens a FIFO at once
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);  // with a reader it opens
  ASSERT_GE(reader, 0);
  EXPECT_EQ(open_error(fifo, OutputMode::Append), expected);
  ::close(reader);
}

TEST(OutputFiles, DirectoriesDevicesAndSocketsAreRefusedByKind) {
  const Place p("kinds");
  fs::create_directory(p.dir / "metrics.jsonl");
  EXPECT_EQ(open_error(p.dir / "metrics.jsonl", OutputMode::Append),
            "test output '" + (p.dir / "metrics.jsonl").string() + "' is a directory" + kTail);
  // /dev/full accepts the open and fails every write: refused as a device before any write.
  if (::access("/dev/full", W_OK) == 0) {
    EXPECT_EQ(open_error("/dev/full", OutputMode::Append),
              std::string("test output '/dev/full' is a character device") + kTail);
    EXPECT_EQ(testing::error_of([] { write_text_file("/dev/full", "x"); }),
              std::string("file '/dev/full' is a character device") + kTail);
  }
  // A listening Unix socket's path: open(2) says ENXIO, named here by its kind.
  const fs::path socket_path = p.dir / "op_times.json";
  const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::snprintf(address.sun_path, sizeof(address.sun_path), "%s", socket_path.c_str());
  ASSERT_EQ(::bind(s, reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0);
  EXPECT_EQ(open_error(socket_path, OutputMode::Replace),
            "test output '" + socket_path.string() + "' is a socket" + kTail);
  ::close(s);
  EXPECT_EQ(testing::error_of([] { write_text_file("/nonexistent/dir/file.txt", "x"); }),
            "cannot create file '/nonexistent/dir/file.txt': No such file or directory");
  EXPECT_EQ(open_error("/nonexistent/metrics.jsonl", OutputMode::Append),
            "test output '/nonexistent/metrics.jsonl' cannot be opened for appending: No such "
            "file or directory");
}

// Below the run directory, no directory on the way is followed through a symlink either: a
// symlinked tensorboard/ or checkpoints/ would put the run's files in another user's directory.
TEST(OutputFiles, DirectoriesBelowTheRunDirectoryAreNotFollowed) {
  const Place p("below");
  const fs::path elsewhere = p.dir.string() + "_elsewhere";
  fs::remove_all(elsewhere);
  fs::create_directories(elsewhere);
  fs::create_symlink(elsewhere, p.dir / "tensorboard");
  const fs::path event = p.dir / "tensorboard" / "events.out.tfevents.1.host.2.carousel";
  EXPECT_EQ(open_error(event, OutputMode::Append, p.dir),
            "test output '" + event.string() + "': '" + (p.dir / "tensorboard").string() +
                "' is a symlink (to '" + elsewhere.string() +
                "'): carousel writes only into real directories in the run directory; remove it");
  EXPECT_TRUE(fs::is_empty(elsewhere));
  // The TensorBoard writer refuses the directory before making anything in it.
  EXPECT_NE(
      testing::error_of([&] {
        TensorBoardWriter((p.dir / "tensorboard").string(), 0);
      }).find("the TensorBoard directory '" + (p.dir / "tensorboard").string() + "' is a symlink"),
      std::string::npos);
  EXPECT_TRUE(fs::is_empty(elsewhere));
  // The run directory itself may be a symlink the user made; real directories below it work.
  const fs::path run_link = p.dir.string() + "_link";
  fs::remove(run_link);
  fs::create_symlink(p.dir, run_link);
  fs::create_directories(p.dir / "logs");
  OutputFile(run_link / "logs" / "rank0.log", "log", OutputMode::Append, run_link).write("ok\n");
  EXPECT_TRUE(fs::is_regular_file(p.dir / "logs" / "rank0.log"));
}

// Replace empties a regular file (never one it then refuses), Append keeps what was there.
TEST(OutputFiles, ReplaceAndAppendKeepWorking) {
  const Place p("modes");
  const fs::path f = p.dir / "out.txt";
  write_text_file(f, "first, longer text\n");
  write_text_file(f, "second\n");
  OutputFile(f, "out", OutputMode::Append).write("third\n");
  std::ifstream in(f);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "second\nthird\n");
}

// A checkpoint part planted with a symlink in its temporary directory: the writer refuses it
// and the target is untouched (safetensors.cpp's writer goes through OutputFile).
TEST(OutputFiles, CheckpointFilesAreNotWrittenThroughSymlinks) {
  const Place p("checkpoint");
  Config cfg;
  cfg.base_output_directory = p.dir.string();
  cfg.run_name = "run";
  fs::create_directories(cfg.run_directory());
  const std::string tmp = begin_checkpoint(cfg, 1, ::getpid());
  fs::create_symlink(p.outside, fs::path(tmp) / "model.safetensors");
  CheckpointPart part;
  part.params.push_back({"w", {2}, {1.0f, 2.0f}});
  const std::string msg = testing::error_of([&] { write_checkpoint_part(tmp, 1, 0, 1, part); });
  EXPECT_NE(msg.find("safetensors file '" + tmp + "/model.safetensors' is a symlink"),
            std::string::npos)
      << msg;
  EXPECT_EQ(p.outside_text(), "another user's file\n");
  // checkpoints/ itself a symlink: refused before a save and before the run (the saves would
  // land in the target).
  fs::remove_all(fs::path(cfg.run_directory()) / "checkpoints");
  fs::create_symlink(p.dir, fs::path(cfg.run_directory()) / "checkpoints");
  EXPECT_NE(
      testing::error_of([&] {
        begin_checkpoint(cfg, 2, ::getpid());
      }).find("the checkpoints directory '" + cfg.run_directory() + "/checkpoints' is a symlink"),
      std::string::npos);
  EXPECT_NE(testing::error_of([&] { check_outputs_writable(cfg); }).find("is a symlink"),
            std::string::npos);
}

// A header naming a tensor twice loaded the last entry (nlohmann keeps the last duplicate key):
// the reader refuses it, naming the file and the tensor.
TEST(SafetensorsFaults, AHeaderNamingATensorTwiceIsRefused) {
  const fs::path path = fs::temp_directory_path() / "carousel_st_twice.safetensors";
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("a":{"dtype":"I32","shape":[1,2],"data_offsets":[0,8]}})";
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    const std::uint64_t n = header.size();
    out.write(reinterpret_cast<const char*>(&n), 8);  // little-endian, as x86-64 and aarch64
    out << header;
    const float data[2] = {1, 2};
    out.write(reinterpret_cast<const char*>(data), 8);
  }
  const std::string msg = testing::error_of([&] { SafetensorsFile f(path.string()); });
  EXPECT_NE(msg.find("'" + path.string() + "': the safetensors header names 'a' twice"),
            std::string::npos)
      << msg;
  // The same name in a nested object (a tensor's fields) is not a duplicate tensor.
  const fs::path ok = fs::temp_directory_path() / "carousel_st_nested.safetensors";
  const float one = 1;
  write_safetensors(ok.string(), {{"a", DType::F32, {1}, &one}, {"b", DType::F32, {1}, &one}});
  EXPECT_EQ(SafetensorsFile(ok.string()).entries().size(), 2u);
}

// The run lock is on the run directory itself: deleting or replacing its dotfile (a cleanup job)
// does not admit a second run. Before, the lock went with the deleted file and a second run
// trained on the same directory.
TEST(RunLock, DeletingTheLockFileDoesNotAdmitASecondRun) {
  const Place p("lock");
  const std::string dir = (p.dir / "run").string();
  const fs::path dotfile = fs::path(dir) / ".carousel.lock";
  RunLock first = RunLock::acquire(dir);
  fs::remove(dotfile);
  std::string msg = testing::error_of([&] { RunLock::acquire(dir); });
  EXPECT_NE(msg.find("run directory '" + dir + "' is in use by another run"), std::string::npos)
      << msg;
  EXPECT_FALSE(fs::exists(dotfile));  // the refused run wrote nothing
  // At the holder's next save the record is written again, so the refusal names it.
  RunLock::check_held(dir);
  msg = testing::error_of([&] { RunLock::acquire(dir); });
  EXPECT_NE(msg.find("in use by another run (pid " + std::to_string(::getpid()) + " on host"),
            std::string::npos)
      << msg;
  // Replaced by another file: the same.
  fs::remove(dotfile);
  std::ofstream(dotfile) << "someone else\n";
  EXPECT_NE(testing::error_of([&] { RunLock::acquire(dir); }).find("is in use by another run"),
            std::string::npos);
  RunLock::check_held(dir);
  std::ifstream in(dotfile);
  EXPECT_NE(
      std::string(std::istreambuf_iterator<char>(in), {}).find("pid " + std::to_string(::getpid())),
      std::string::npos);
}

TEST(RunLock, ASymlinkOrFifoAsTheLockFileIsRefused) {
  const Place p("lock_kinds");
  const fs::path dir = p.dir / "run";
  const fs::path dotfile = dir / ".carousel.lock";
  fs::create_directories(dir);
  fs::create_symlink(p.outside, dotfile);
  EXPECT_EQ(testing::error_of([&] { RunLock::acquire(dir.string()); }),
            "the run directory's lock file '" + dotfile.string() + "' is a symlink (to '" +
                p.outside.string() + "')" + kTail);
  EXPECT_EQ(p.outside_text(), "another user's file\n");  // before: truncated, then our pid
  fs::remove(dotfile);
  ASSERT_EQ(::mkfifo(dotfile.c_str(), 0600), 0);
  auto result = std::async(std::launch::async, [&] {
    return testing::error_of([&] { RunLock::acquire(dir.string()); });
  });
  ASSERT_EQ(result.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  EXPECT_NE(result.get().find("is a FIFO (named pipe)"), std::string::npos);
  fs::remove(dotfile);
  RunLock ok = RunLock::acquire(dir.string());  // the directory is free: nothing stale
}

// A tiny TensorBoard-enabled run that saves only when it stops.
Config tensorboard_run(const std::string& name) {
  init_logging({.rank = 0, .level = "off", .file_dir = {}});
  Config c =
      load_config("",
                  {"base_num_decoder_layers=2", "max_target_length=16", "per_device_batch_size=2",
                   "enable_tensorboard=true", "steps=400", "checkpoint_period=1000000",
                   "base_output_directory=/tmp/carousel_output_tests", "run_name=" + name})
          .config;
  fs::remove_all(c.run_directory());
  return c;
}

// Runs `change` on the run directory once 3 metrics records are written, while `c` trains.
std::string train_while(const Config& c, const std::function<void(const fs::path&)>& change) {
  const fs::path run = c.run_directory();
  std::thread changer([&] {
    for (int i = 0; i < 20000; ++i) {  // at most 20 s
      std::ifstream in(run / "metrics.jsonl");
      if (std::count(std::istreambuf_iterator<char>(in), {}, '\n') >= 3) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    change(run);
  });
  const std::string msg = testing::error_of([&] { train(c); });
  changer.join();
  return msg;
}

// The TensorBoard directory removed mid-run (a cleanup job): the run stops as for a lost metrics
// file, saves, and fails naming the event file. Before, every later event went nowhere and the
// run ended with status 0.
TEST(TensorBoardFaults, RemovingTheDirectoryStopsTheRunAfterSaving) {
  const Config c = tensorboard_run("tb_removed");
  const std::string msg =
      train_while(c, [](const fs::path& run) { fs::remove_all(run / "tensorboard"); });
  EXPECT_NE(msg.find("TensorBoard event file '" + c.run_directory() + "/tensorboard/events.out."),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("was removed during the run"), std::string::npos) << msg;
  EXPECT_NE(msg.find("checkpoint saved: run the same command to resume"), std::string::npos) << msg;
  EXPECT_TRUE(latest_checkpoint(c).has_value());
}

TEST(TensorBoardFaults, ReplacingTheEventFileStopsTheRun) {
  const Config c = tensorboard_run("tb_replaced");
  const std::string msg = train_while(c, [](const fs::path& run) {
    for (const auto& e : fs::directory_iterator(run / "tensorboard")) {
      const fs::path other = e.path().string() + ".new";
      std::ofstream(other) << "not the run's events";
      fs::rename(other, e.path());
    }
  });
  EXPECT_NE(msg.find("' was replaced by another file during the run: the events written since "
                     "went to the old one"),
            std::string::npos)
      << msg;
}

}  // namespace
}  // namespace carousel
