// fuzz_safetensors.cpp — libFuzzer target: any bytes as a safetensors file must load
// consistently or throw carousel::Error (tests/fuzz/reader_harness.h). Anything else (another
// exception, a crash, an ASan report) is a finding. Run: docs/reliability.md#fuzzing.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "tests/fuzz/reader_harness.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // One file per process, rewritten for every input (the reader takes a path).
  static const std::string path = (std::filesystem::temp_directory_path() /
                                   ("carousel_fuzz_safetensors_" + std::to_string(::getpid())))
                                      .string();
  carousel::fuzz::load_safetensors_bytes(std::string(reinterpret_cast<const char*>(data), size),
                                         path);
  return 0;
}
