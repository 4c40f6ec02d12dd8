// fuzz_config.cpp — libFuzzer target over the config parser, for long runs (docs/reliability.md):
// the input is loaded as a YAML config file, and its lines as key=value arguments. Either must
// load or throw carousel::Error; any other exception escapes and libFuzzer reports it, and
// AddressSanitizer reports memory errors. Built with -DCAROUSEL_FUZZ=ON and clang, and as the
// bounded ctest case fuzz_config (tests/fuzz/CMakeLists.txt).
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "compute/error.h"
#include "host/config/config.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  static const std::string path = (carousel::fuzz::scratch_dir("config") / "config.yml").string();
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  try {  // a config file on which yaml-cpp's LoadAll never ended (",x") is refused (read_yaml)
    carousel::load_config(path, {});
  } catch (const carousel::Error&) {
  }
  std::vector<std::string> args;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) args.push_back(line);
  try {
    carousel::load_config("", args);
  } catch (const carousel::Error&) {
  }
  return 0;
}
