// test_file_faults.cpp — bad input files are clear errors (docs/reliability.md#files-and-outputs):
// safetensors files with wrong header lengths, offsets, dtypes or JSON types; FIFOs,
// directories and devices as datasets; bad token shard headers; non-finite metrics in JSONL;
// text files that cannot be written.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "host/io/checkpoint.h"
#include "host/data/data.h"
#include "host/io/files.h"
#include "host/io/run_lock.h"
#include "host/io/safetensors.h"
#include "host/run/step_report.h"
#include "tests/support/test_util.h"

namespace carousel {
namespace {

namespace fs = std::filesystem;

fs::path temp(const std::string& name) { return fs::temp_directory_path() / name; }

// A safetensors file from its parts: `declared` is the header length written in the first 8
// bytes (the true length of `header` unless a test lies).
std::string write_raw(const std::string& name, const std::string& header, std::uint64_t declared,
                      const std::string& data) {
  const std::string path = temp(name).string();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  for (int i = 0; i < 8; ++i) out.put(char((declared >> (8 * i)) & 0xff));
  out << header << data;
  return path;
}

std::string write_raw(const std::string& name, const std::string& header, const std::string& data) {
  return write_raw(name, header, header.size(), data);
}

// Two float32 tensors a = [1, 2] and b = [3, 4, 5], back to back, header padded with 5 spaces.
const std::string kHeader = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                            R"("b":{"dtype":"F32","shape":[3],"data_offsets":[8,20]}})"
                            "     ";

std::string floats(std::vector<float> v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

std::string error_loading(const std::string& path) {
  return testing::error_of([&] { SafetensorsFile f(path); });
}

TEST(SafetensorsFaults, WellFormedFileLoadsItsValues) {  // the control for the tests below
  const SafetensorsFile f(write_raw("st_ok.safetensors", kHeader, floats({1, 2, 3, 4, 5})));
  std::vector<float> b(3);
  const std::vector<char> bytes = f.read("b");
  std::memcpy(b.data(), bytes.data(), 12);
  EXPECT_EQ(b, (std::vector<float>{3, 4, 5}));
  EXPECT_EQ(f.entries().at("b").shape, (Shape{3}));
}

TEST(SafetensorsFaults, HeaderLengthAFewBytesOffNeverShiftsTheTensors) {
  const std::string data = floats({1, 2, 3, 4, 5});
  // 3 short: the JSON still parses (the cut bytes are padding) and the data would start 3 bytes
  // early; the 3 bytes left over at the end give it away.
  std::string msg =
      error_loading(write_raw("st_short.safetensors", kHeader, kHeader.size() - 3, data));
  EXPECT_NE(msg.find("3 trailing bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("header length"), std::string::npos) << msg;
  // 3 long over data that starts with spaces: the JSON still parses, the data is 3 bytes short.
  msg = error_loading(write_raw("st_long.safetensors", kHeader, kHeader.size() + 3,
                                "   " + floats({1, 2, 3, 4, 5}).substr(3)));
  EXPECT_NE(msg.find("outside the data section of 17 bytes"), std::string::npos) << msg;
  // 3 long over float data starting with zero bytes (where nlohmann's parser stops): the same.
  msg = error_loading(
      write_raw("st_long2.safetensors", kHeader, kHeader.size() + 3, floats({1, 2, 3, 4, 5})));
  EXPECT_NE(msg.find("outside the data section of 17 bytes"), std::string::npos) << msg;
  // 3 long over other bytes: not JSON.
  msg = error_loading(
      write_raw("st_long3.safetensors", kHeader, kHeader.size() + 3, std::string(20, 'x')));
  EXPECT_NE(msg.find("the safetensors header is not valid JSON"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("json.exception"), std::string::npos) << msg;
}

TEST(SafetensorsFaults, OffsetsMustCoverTheDataExactly) {
  const std::string data = floats({1, 2, 3, 4, 5});
  const auto with_b = [&](const std::string& name, const std::string& b_entry,
                          const std::string& bytes) {
    return error_loading(write_raw(
        name, R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":)" + b_entry + "}",
        bytes));
  };
  std::string msg = with_b("st_overlap.safetensors",
                           R"({"dtype":"F32","shape":[3],"data_offsets":[4,16]})", data);
  EXPECT_NE(msg.find("tensors 'a' and 'b' overlap at data offset 4"), std::string::npos) << msg;
  msg = with_b("st_hole.safetensors", R"({"dtype":"F32","shape":[3],"data_offsets":[12,24]})",
               data + "1234");
  EXPECT_NE(msg.find("4 bytes before tensor 'b' (data offset 8) belong to no tensor"),
            std::string::npos)
      << msg;
  msg =
      with_b("st_range.safetensors", R"({"dtype":"F32","shape":[3],"data_offsets":[8,32]})", data);
  EXPECT_NE(msg.find("data_offsets [8, 32] outside the data section of 20 bytes"),
            std::string::npos)
      << msg;
  msg = with_b("st_reversed.safetensors", R"({"dtype":"F32","shape":[3],"data_offsets":[20,8]})",
               data);
  EXPECT_NE(msg.find("data_offsets [20, 8] outside"), std::string::npos) << msg;
  msg = with_b("st_size.safetensors", R"({"dtype":"F64","shape":[3],"data_offsets":[8,20]})", data);
  EXPECT_NE(msg.find("tensor 'b' (F64 [3]) needs 24 bytes but its data_offsets [8, 20] hold 12"),
            std::string::npos)
      << msg;
  msg = with_b("st_trailing.safetensors", R"({"dtype":"F32","shape":[3],"data_offsets":[8,20]})",
               data + "xyzw");
  EXPECT_NE(msg.find("4 trailing bytes"), std::string::npos) << msg;
}

TEST(SafetensorsFaults, HeaderLengthBeyondTheFileAndNonObjectHeaders) {
  std::string msg = error_loading(write_raw("st_huge.safetensors", "{}", 1000, ""));
  EXPECT_NE(msg.find("header length 1000 exceeds the file size 10"), std::string::npos) << msg;
  msg = error_loading(write_raw("st_array.safetensors", "[1, 2]  ", ""));
  EXPECT_NE(msg.find("is a JSON array, not an object"), std::string::npos) << msg;
  msg = error_loading(write_raw("st_tiny.safetensors", "", 0, "abc"));  // 3 bytes after 8
  EXPECT_NE(msg.find("is not valid JSON"), std::string::npos) << msg;
}

TEST(SafetensorsFaults, JsonTypeErrorsNameTheFileTensorAndField) {
  const std::string data = floats({1, 2});
  const auto load = [&](const std::string& header) {
    const std::string path = write_raw("st_types.safetensors", header, data);
    const std::string msg = error_loading(path);
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_EQ(msg.find("json.exception"), std::string::npos) << msg;
    return msg;
  };
  EXPECT_NE(load(R"({"a":{"dtype":7,"shape":[2],"data_offsets":[0,8]}})")
                .find("tensor 'a': field 'dtype' must be a string, found number 7"),
            std::string::npos);
  EXPECT_NE(load(R"({"a":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,8]}})")
                .find("tensor 'a' has dtype 'F8_E4M3'; supported: F32, F64, BF16, F16, I32"),
            std::string::npos);
  EXPECT_NE(load(R"({"a":{"dtype":"F32","shape":"2","data_offsets":[0,8]}})")
                .find("field 'shape' must be an array, found string"),
            std::string::npos);
  EXPECT_NE(load(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})")
                .find("field 'shape' must be an integer in"),
            std::string::npos);
  EXPECT_NE(load(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0.5,8]}})")
                .find("field 'data_offsets' must be an integer in [0, "),
            std::string::npos);
  EXPECT_NE(load(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})")
                .find("field 'data_offsets' must be an array [begin, end], found [0]"),
            std::string::npos);
  EXPECT_NE(load(R"({"a":{"dtype":"F32","shape":[2]}})").find("field 'data_offsets' is missing"),
            std::string::npos);
  EXPECT_NE(load(R"({"a":"F32"})").find("tensor 'a': expected a JSON object, found string"),
            std::string::npos);
  EXPECT_NE(load(R"({"__metadata__":{"format":1},"a":{"dtype":"F32","shape":[2],)"
                 R"("data_offsets":[0,8]}})")
                .find("__metadata__: field 'format' must be a string, found number 1"),
            std::string::npos);
  EXPECT_NE(load(R"({"a":{"dtype":"F32","shape":[1099511627776, 1099511627776],)"
                 R"("data_offsets":[0,8]}})")
                .find("is too large"),
            std::string::npos);
}

TEST(SafetensorsFaults, FifoAndDirectoryAreRefusedWithoutBlocking) {
  const std::string fifo = temp("carousel_st_fifo").string();
  fs::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string msg = error_loading(fifo);  // opening the FIFO would block this test forever
  EXPECT_NE(msg.find("is not a regular file"), std::string::npos) << msg;
  msg = error_loading(fs::temp_directory_path().string());
  EXPECT_NE(msg.find("is not a regular file"), std::string::npos) << msg;
  msg = error_loading("/nonexistent/model.safetensors");
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
  fs::remove(fifo);
}

Config data_config(const std::string& type, const std::string& path) {
  Config c;
  c.dataset_type = type;
  c.dataset_path = path;
  c.model.max_target_length = 4;
  c.model.vocab_size = 1000;
  return c;
}

std::string data_error(const std::string& type, const std::string& path) {
  return testing::error_of([&] { make_data_loader(data_config(type, path)); });
}

TEST(DataFaults, NonRegularDatasetPathsAreRefused) {
  const std::string fifo = temp("carousel_data_fifo").string();
  fs::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const char* type : {"text", "tokens"}) {  // reading it would block forever
    const std::string msg = data_error(type, fifo);
    EXPECT_NE(msg.find("'" + fifo + "' is a FIFO (named pipe); carousel reads regular files only"),
              std::string::npos)
        << type << ": " << msg;
  }
  fs::remove(fifo);
  EXPECT_NE(data_error("text", fs::temp_directory_path().string()).find("is a directory"),
            std::string::npos);
  EXPECT_NE(data_error("tokens", "/dev/null").find("'/dev/null' is a character device"),
            std::string::npos);
  EXPECT_NE(
      data_error("text", "/nonexistent.txt").find("text file '/nonexistent.txt' does not exist"),
      std::string::npos);
  const std::string msg = data_error("tokens", "gs://bucket/shard_*.bin");
  EXPECT_NE(msg.find("dataset_path='gs://bucket/shard_*.bin' is a remote URL (gs://)"),
            std::string::npos)
      << msg;
}

// An llm.c shard whose header ints 0..2 are given and which holds `tokens` uint16 tokens.
std::string write_shard(const std::string& name, std::int32_t magic, std::int32_t version,
                        std::int32_t count, std::size_t tokens) {
  const std::string path = temp(name).string();
  std::vector<std::int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = count;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(header.data()), 1024);
  const std::vector<std::uint16_t> t(tokens, 5);
  out.write(reinterpret_cast<const char*>(t.data()), std::streamsize(2 * tokens));
  return path;
}

TEST(DataFaults, ShardHeaderErrorsNameTheFileAndWhatWasExpected) {
  std::string p = write_shard("carousel_v2.bin", 20240520, 2, 10, 10);
  std::string msg = data_error("tokens", p);
  EXPECT_NE(msg.find("token shard '" + p +
                     "' has magic 20240520 and version 2; with that magic llm.c writes version 1 "
                     "(GPT-2, uint16 tokens)"),
            std::string::npos)
      << msg;
  p = write_shard("carousel_llama3_v1.bin", 20240801, 1, 10, 20);  // Llama 3 magic, GPT-2 version
  msg = data_error("tokens", p);
  EXPECT_NE(msg.find("with that magic llm.c writes version 7 (Llama 3, uint32 tokens)"),
            std::string::npos)
      << msg;
  p = write_shard("carousel_llama3_short.bin", 20240801, 7, 10, 10);  // 10 uint16 = 5 uint32
  msg = data_error("tokens", p);
  EXPECT_NE(msg.find("says 10 tokens (1064 bytes with its Llama 3, uint32 tokens) but the file is "
                     "1044 bytes"),
            std::string::npos)
      << msg;
  p = write_shard("carousel_zero.bin", 20240520, 1, 0, 0);
  msg = data_error("tokens", p);
  EXPECT_NE(msg.find("'" + p + "' says it holds 0 tokens"), std::string::npos) << msg;
  p = write_shard("carousel_negative.bin", 20240520, 1, -5, 0);
  EXPECT_NE(data_error("tokens", p).find("says it holds -5 tokens"), std::string::npos);
  p = write_shard("carousel_long.bin", 20240520, 1, 10, 12);
  msg = data_error("tokens", p);
  EXPECT_NE(msg.find("says 10 tokens (1044 bytes with its GPT-2, uint16 tokens) but the file is "
                     "1048 bytes"),
            std::string::npos)
      << msg;
  p = temp("carousel_headless.bin").string();
  std::ofstream(p, std::ios::binary | std::ios::trunc) << "tiny";
  EXPECT_NE(data_error("tokens", p).find("is 4 bytes, shorter than its 1024-byte header"),
            std::string::npos);
}

// The metrics JSONL read back by nlohmann's parser: NaN, +inf and -inf stay distinguishable.
TEST(MetricsJsonl, NonFiniteValuesAreDistinctStrings) {
  Config c;
  c.base_output_directory = temp("carousel_metrics_tests").string();
  c.run_name = "nonfinite";
  fs::remove_all(c.run_directory());
  {
    StepReporter reporter(c);
    reporter.report(0, std::nan(""), std::numeric_limits<double>::infinity(), 1e-3, 0.5);
    reporter.report(1, -std::numeric_limits<double>::infinity(), 1.5, 1e-3, 0.0);  // inf tok/s
  }
  std::ifstream in(fs::path(c.run_directory()) / "metrics.jsonl");
  std::string line0, line1;
  std::getline(in, line0);
  std::getline(in, line1);
  const auto r0 = nlohmann::json::parse(line0), r1 = nlohmann::json::parse(line1);
  EXPECT_EQ(r0["loss"], "NaN");
  EXPECT_EQ(r0["grad_norm"], "Infinity");
  EXPECT_TRUE(r0["step_ms"].is_number());
  EXPECT_DOUBLE_EQ(r0["step_ms"].get<double>(), 500.0);
  EXPECT_EQ(r1["loss"], "-Infinity");
  EXPECT_DOUBLE_EQ(r1["grad_norm"].get<double>(), 1.5);
  EXPECT_EQ(r1["tokens_per_s"], "Infinity");
  EXPECT_EQ(line0.find("null"), std::string::npos) << line0;
  // Each record carries its wall-clock time (Unix seconds), between the test's start and now.
  const double now = std::chrono::duration<double>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
  ASSERT_TRUE(r0["time"].is_number()) << line0;
  EXPECT_GT(r0["time"].get<double>(), now - 600);
  EXPECT_LE(r0["time"].get<double>(), now);
  EXPECT_LE(r0["time"].get<double>(), r1["time"].get<double>());
}

TEST(MetricsJsonl, AFullDiskIsAnErrorNamingTheFile) {
  Config c;
  c.base_output_directory = temp("carousel_metrics_tests").string();
  c.run_name = "full";
  fs::remove_all(c.run_directory());
  StepReporter reporter(c);
  // A write that fails as on a full disk: a file-size limit below the record (EFBIG; SIGXFSZ
  // ignored, as `carousel train` ignores it). /dev/full is refused before any write (below).
  struct rlimit saved {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  const auto previous = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit tiny = saved;
  tiny.rlim_cur = 16;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &tiny), 0);
  const std::string msg = testing::error_of([&] { reporter.report(0, 1.0, 1.0, 1e-3, 0.1); });
  ::setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, previous);
  EXPECT_NE(msg.find("writing metrics file '" + c.run_directory() +
                     "/metrics.jsonl' failed at step 0: File too large"),
            std::string::npos)
      << msg;
}

// An output path that is a FIFO is refused before the run starts (opening it for writing would
// block until a reader appears: a run that hangs before step 1); so is a device such as
// /dev/full, which accepts the open and fails every write: carousel writes only regular files.
TEST(MetricsJsonl, AFifoIsRefusedBeforeTheRunStarts) {
  Config c;
  c.base_output_directory = temp("carousel_metrics_tests").string();
  c.run_name = "fifo";
  c.enable_checkpointing = false;
  const std::string fifo = temp("carousel_metrics_fifo").string();
  fs::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  c.metrics_file = fifo;
  std::string msg = testing::error_of([&] { check_outputs_writable(c); });
  EXPECT_NE(msg.find("metrics_file '" + fifo +
                     "' is a FIFO (named pipe): carousel writes only regular files in the run "
                     "directory; remove it"),
            std::string::npos)
      << msg;
  fs::remove(fifo);
  c.metrics_file = "/dev/full";
  msg = testing::error_of([&] { StepReporter reporter(c); });
  EXPECT_NE(msg.find("metrics file '/dev/full' is a character device"), std::string::npos) << msg;
}

// Every text file carousel writes goes through write_text_file: its content, replaced whole,
// or one error naming the path and the system's reason.
TEST(FileFaults, WriteTextFileReplacesOrNamesThePathAndReason) {
  const fs::path path = temp("carousel_write_text.txt");
  write_text_file(path, "first, longer text\n");
  write_text_file(path, "second\n");
  std::ifstream in(path);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "second\n");
  EXPECT_EQ(testing::error_of([] { write_text_file("/nonexistent/dir/file.txt", "x"); }),
            "cannot create file '/nonexistent/dir/file.txt': No such file or directory");
  // Devices and the other kinds that are not regular files: test_output_files.cpp.
}

// The CRC32 of manifests and `carousel inspect`: the standard check value of "123456789"
// (0xCBF43926, the CRC-32 of zlib and PNG), in one call, continued across two, and of a file.
TEST(Files, Crc32MatchesTheStandardCheckValue) {
  const std::string digits = "123456789";
  EXPECT_EQ(crc32_of(digits.data(), digits.size()), 0xCBF43926u);
  EXPECT_EQ(crc32_of(digits.data() + 5, 4, crc32_of(digits.data(), 5)), 0xCBF43926u);
  EXPECT_EQ(crc32_of(nullptr, 0), 0u);
  const fs::path path = temp("carousel_crc_digits.txt");
  write_text_file(path, digits);
  EXPECT_EQ(file_crc32(path), 0xCBF43926u);
}

}  // namespace
}  // namespace carousel

namespace carousel {
namespace {

// The run-directory lock (host/io/run_lock.h): a second holder is refused naming the first
// (flock locks belong to an open file, so a second open in this very process conflicts as a
// second process would), and the lock is free again once the first is released.
TEST(RunLock, ASecondRunOnTheDirectoryIsRefusedNamingTheFirst) {
  const std::string dir = temp("carousel_run_lock").string();
  fs::remove_all(dir);
  {
    RunLock first = RunLock::acquire(dir);
    const std::string msg = testing::error_of([&] { RunLock::acquire(dir); });
    EXPECT_NE(msg.find("is in use by another run (pid " + std::to_string(getpid()) + " on host"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("choose another run_name"), std::string::npos) << msg;
  }
  RunLock again = RunLock::acquire(dir);  // released with the first: no stale lock
}

}  // namespace
}  // namespace carousel
