// fuzz_safetensors.cpp — libFuzzer target: any bytes as a safetensors file must load
// consistently or throw carousel::Error (tests/fuzz/reader_harness.h). Anything else (another
// exception, a crash, an ASan report) is a finding. Run: docs/reliability.md#fuzzing.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "tests/fuzz/fuzz_util.h"  // and reader_harness.h

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // One file per process, rewritten for every input (the reader takes a path).
  static const std::string path = (carousel::fuzz::scratch_dir("safetensors") / "file.safetensors")
                                      .string();  // removed at exit
  carousel::fuzz::load_safetensors_bytes(std::string(reinterpret_cast<const char*>(data), size),
                                         path);
  return 0;
}
