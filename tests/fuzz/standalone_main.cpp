// standalone_main.cpp — the bounded run of a libFuzzer target without libFuzzer, so that every
// build runs each target of tests/fuzz/ as a ctest case (label cpu; under ASan + UBSan in
// `scripts/test.sh --sanitize`), while long runs use libFuzzer itself (CAROUSEL_FUZZ=ON,
// docs/reliability.md#fuzzing).
//
//   fuzz_<name>_bounded [-runs=N] [-seed=S] CORPUS_DIR_OR_FILE...
//
// Feeds every seed file given (directories: their files, sorted), then N mutants of them from a
// seeded generator: byte edits (flips, random bytes, inserted tokens such as brackets, quotes,
// huge and negative numbers, deleted, repeated and truncated spans) and, where the seed holds a
// JSON document after a few leading bytes, JSON edits (a value replaced by one of another type
// or an edge value, a key removed or added, an element repeated, a value nested deeply). A
// target that crashes, trips a sanitizer or lets an exception other than carousel::Error escape
// ends the run (std::terminate); the input is written to fuzz-crash-<name> first so that
// libFuzzer's build (or this binary, given only that file) replays it.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

namespace fs = std::filesystem;
using Rng = std::mt19937_64;

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

const char* const kTokens[] = {"{",
                               "}",
                               "[",
                               "]",
                               "\"",
                               ":",
                               ",",
                               "\\",
                               "\\u0000",
                               "\\ud800",
                               "-1",
                               "0",
                               "1e999",
                               "-0",
                               "0.5",
                               "null",
                               "true",
                               "\"\"",
                               "16777216",
                               "4294967296",
                               "9223372036854775807",
                               "18446744073709551616",
                               "\"../\"",
                               "/",
                               "\xff",
                               "\xc3",
                               "NaN",
                               "\"model.safetensors\"",
                               "\"files\"",
                               "\"weight_map\"",
                               "\"added_tokens\"",
                               "\"id\"",
                               "\"vocab\"",
                               "\"content\"",
                               "\"bytes\"",
                               "\"crc32\""};

nlohmann::json edge_value(Rng& rng, const std::vector<nlohmann::json*>& nodes) {
  switch (rng() % 20) {
    case 0:
      return nullptr;
    case 1:
      return true;
    case 2:
      return 0;
    case 3:
      return -1;
    case 4:
      return std::int64_t(1) << 24;
    case 5:
      return std::numeric_limits<std::int64_t>::max();
    case 6:
      return std::numeric_limits<std::uint64_t>::max();
    case 7:
      return std::numeric_limits<std::int64_t>::min();
    case 8:
      return 1e300;
    case 9:
      return 0.5;
    case 10:
      return "";
    case 11:
      return "../outside.safetensors";
    case 12:
      return "model.safetensors";
    case 13:
      return std::string(300, 'x');
    case 14:
      return nlohmann::json::array();
    case 15:
      return nlohmann::json::object();
    case 16: {
      nlohmann::json deep = nlohmann::json::array();
      for (int i = 0; i < 200; ++i) deep = nlohmann::json::array({deep});
      return deep;
    }
    case 17:
      return std::int64_t(rng() % 40) - 5;
    default:
      return *nodes[rng() % nodes.size()];  // a copy of another value of the document
  }
}

// One JSON edit of the document that starts at the first '{' or '[' of `s` (bytes before it,
// such as a target's selector byte, are kept); false when there is none that parses.
bool mutate_json(std::string& s, Rng& rng) {
  const std::size_t at = s.find_first_of("{[");
  if (at == std::string::npos || at > 4) return false;
  nlohmann::json doc = nlohmann::json::parse(s.begin() + at, s.end(), nullptr, false);
  if (doc.is_discarded()) return false;
  std::vector<nlohmann::json*> nodes{&doc};
  for (std::size_t i = 0; i < nodes.size() && nodes.size() < 4096; ++i) {
    if (nodes[i]->is_structured()) {
      for (auto& child : *nodes[i]) nodes.push_back(&child);
    }
  }
  nlohmann::json& node = *nodes[rng() % nodes.size()];
  const int op = int(rng() % 4);
  if (op == 0 && node.is_object() && !node.empty()) {
    auto it = node.begin();
    std::advance(it, rng() % node.size());
    node.erase(it);
  } else if (op == 1 && node.is_object()) {
    const nlohmann::json* other = nodes[rng() % nodes.size()];
    std::string key = "k" + std::to_string(rng() % 8);
    if (other->is_object() && !other->empty()) key = other->begin().key();
    if (rng() % 8 == 0) key = std::string(300, 'k') + ".safetensors";  // past NAME_MAX
    node[key] = edge_value(rng, nodes);
  } else if (op == 2 && node.is_array() && !node.empty()) {
    node.push_back(node[rng() % node.size()]);
  } else {
    node = edge_value(rng, nodes);
  }
  s = s.substr(0, at) + doc.dump(rng() % 2 ? 2 : -1);
  return true;
}

void mutate_bytes(std::string& s, Rng& rng) {
  const std::size_t n = s.size();
  const std::size_t at = n ? rng() % (n + 1) : 0;
  switch (rng() % 7) {
    case 0:
      if (n) s[rng() % n] ^= char(1u << (rng() % 8));
      break;
    case 1:
      if (n) s[rng() % n] = char(rng());
      break;
    case 2:
      s.insert(at, kTokens[rng() % (sizeof(kTokens) / sizeof(kTokens[0]))]);
      break;
    case 3:
      if (n) s.erase(at, 1 + rng() % 16);
      break;
    case 4:
      if (n) s.insert(at, s.substr(rng() % n, 1 + rng() % 32));
      break;
    case 5:
      s.resize(at);
      break;
    default:
      s.insert(at, std::string(1 + rng() % 4, char(rng())));
  }
}

void run_one(const std::string& input, const std::string& crash_file) {
  std::ofstream(crash_file, std::ios::binary | std::ios::trunc) << input;  // replay if it dies
  LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(input.data()), input.size());
}

}  // namespace

int main(int argc, char** argv) {
  long runs = 1000;
  std::uint64_t seed = 1;
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("-runs=", 0) == 0) {
      runs = std::strtol(arg.c_str() + 6, nullptr, 10);
    } else if (arg.rfind("-seed=", 0) == 0) {
      seed = std::strtoull(arg.c_str() + 6, nullptr, 10);
    } else if (fs::is_directory(arg)) {
      std::vector<fs::path> in_dir;
      for (const auto& e : fs::directory_iterator(arg)) {
        if (e.is_regular_file()) in_dir.push_back(e.path());
      }
      std::sort(in_dir.begin(), in_dir.end());
      files.insert(files.end(), in_dir.begin(), in_dir.end());
    } else if (fs::is_regular_file(arg)) {
      files.emplace_back(arg);
    } else {
      std::fprintf(stderr, "error: '%s' is neither -runs=N, -seed=S, a file nor a directory\n",
                   arg.c_str());
      return 2;
    }
  }
  const std::string name = fs::path(argv[0]).filename().string();
  const std::string crash_file =
      (fs::temp_directory_path() / ("fuzz-crash-" + name + "-" + std::to_string(seed))).string();
  std::vector<std::string> seeds;
  for (const auto& f : files) seeds.push_back(read_file(f));
  if (seeds.empty()) seeds.emplace_back();
  const auto start = std::chrono::steady_clock::now();
  for (const auto& s : seeds) run_one(s, crash_file);
  Rng rng(seed);
  long json_edits = 0;
  for (long i = 0; i < runs; ++i) {
    std::string input = seeds[rng() % seeds.size()];
    const int edits = 1 + int(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      if (rng() % 2 && mutate_json(input, rng)) {
        ++json_edits;
      } else {
        mutate_bytes(input, rng);
      }
    }
    run_one(input, crash_file);
  }
  std::remove(crash_file.c_str());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%s: %zu seeds and %ld mutants (%ld JSON edits), seed %llu, %.1f s: no new finding\n",
              name.c_str(), seeds.size(), runs, json_edits, (unsigned long long)seed, seconds);
  return 0;
}
