// test_config_fuzz.cpp — bounded, deterministic fuzzing of the config parser (runs in CI in about
// a second): random key=value arguments and mutations of configs/demo.yml (byte flips,
// truncations, inserted quotes, colons, brackets, newlines). Every input must either load or
// throw carousel::Error: never another exception, never a crash. tests/fuzz/fuzz_config.cpp is
// the libFuzzer target for long runs (docs/reliability.md).
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "compute/error.h"
#include "host/config/config.h"

namespace carousel {
namespace {

// "ok", "error" or a failure description.
std::string outcome(const std::string& file, const std::vector<std::string>& args) {
  try {
    load_config(file, args);
    return "ok";
  } catch (const Error&) {
    return "error";
  } catch (const std::exception& e) {
    return std::string("non-carousel exception: ") + e.what();
  } catch (...) {
    return "non-std exception";
  }
}

std::string show(const std::string& s) {
  std::string out;
  for (const unsigned char c : s) {
    out += (c >= 32 && c < 127) ? std::string(1, char(c)) : fmt::format("\\x{:02x}", c);
  }
  return out;
}

TEST(ConfigFuzz, RandomKeyValueArguments) {
  std::mt19937_64 rng(20240611);
  const std::vector<std::string> values = {"",
                                           "0",
                                           "-1",
                                           "1",
                                           "2",
                                           "-2",
                                           "7",
                                           "8",
                                           "64",
                                           "1e99",
                                           "1e-400",
                                           "inf",
                                           "-inf",
                                           "nan",
                                           "9223372036854775807",
                                           "-9223372036854775808",
                                           "99999999999999999999",
                                           "1_000",
                                           "_1",
                                           "1__0",
                                           "0.5",
                                           "2.5",
                                           "+3",
                                           "+-3",
                                           "true",
                                           "false",
                                           "True",
                                           "maybe",
                                           "llama2-7b",
                                           "tiny",
                                           "circular",
                                           "1f1b",
                                           "gpipe",
                                           "zb_h1",
                                           "interleaved_1f1b",
                                           "bfloat16",
                                           "text",
                                           "tokens",
                                           "4611686018427387904",
                                           "65536",
                                           "1048576",
                                           "\"",
                                           "'",
                                           "[1,2]",
                                           "{a: 1}",
                                           "a=b",
                                           " ",
                                           "\n"};
  const auto& keys = config_keys();
  std::uniform_int_distribution<int> count(1, 4), byte(0, 255);
  for (int i = 0; i < 2500; ++i) {
    std::vector<std::string> args;
    for (int a = count(rng); a > 0; --a) {
      std::string key = keys[rng() % keys.size()].name;
      if (rng() % 10 == 0) key[rng() % key.size()] = char(byte(rng));  // a misspelt key
      std::string value = values[rng() % values.size()];
      if (rng() % 8 == 0) value += char(byte(rng));
      args.push_back(rng() % 20 == 0 ? key : key + "=" + value);
    }
    const std::string result = outcome("", args);
    ASSERT_TRUE(result == "ok" || result == "error")
        << result << " for " << show(fmt::format("{}", fmt::join(args, " ")));
  }
}

TEST(ConfigFuzz, MutatedYamlFiles) {
  std::ifstream in(CAROUSEL_SOURCE_DIR "/configs/demo.yml");
  const std::string demo((std::istreambuf_iterator<char>(in)), {});
  ASSERT_FALSE(demo.empty());
  ASSERT_EQ(outcome("", {}), "ok");
  const auto path = (std::filesystem::temp_directory_path() /
                     ("carousel_fuzz_" + std::to_string(::getpid()) + ".yml"))
                        .string();
  std::mt19937_64 rng(7);
  const std::string inserts[] = {"\"", "'",  ":",       ": ", "[",   "]",  "{",
                                 "}",  "\n", "\n---\n", "#",  "&a ", "*a", "!!str ",
                                 "- ", "  ", "\t",      "?",  "|",   ">"};
  int loaded = 0;
  for (int i = 0; i < 2500; ++i) {
    std::string text = demo;
    for (int m = 1 + int(rng() % 4); m > 0; --m) {
      const std::size_t at = rng() % (text.size() + 1);
      switch (rng() % 4) {
        case 0:  // flip a byte
          if (at < text.size()) text[at] = char(text[at] ^ (1 << (rng() % 8)));
          break;
        case 1:  // truncate
          text.resize(at);
          break;
        case 2:  // insert YAML syntax
          text.insert(at, inserts[rng() % std::size(inserts)]);
          break;
        default:  // delete a few bytes
          text.erase(at, rng() % 8);
      }
    }
    std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
    const std::string result = outcome(path, {});
    loaded += result == "ok";
    ASSERT_TRUE(result == "ok" || result == "error") << result << " for:\n" << show(text);
  }
  std::filesystem::remove(path);
  EXPECT_GT(loaded, 0);  // some mutations (in comments, say) still load
}

}  // namespace
}  // namespace carousel
