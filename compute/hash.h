// hash.h — the one hash of carousel: 64-bit FNV-1a. Parameter initialisation keys each
// parameter's random stream by the hash of its name (models/params.cpp), the ranks of a job
// compare the hash of what they will run before step 1 (host/run/run_setup.cpp), a step trace
// names each arrow by the hash of its text (host/report/step_trace.cpp), and the replica check
// hashes weights (host/run/guards/replica_check.cpp). None needs a cryptographic hash; all need
// one that is the same on every machine and build, so the constants and the order of bytes are
// fixed here once (changing them changes initial weights, so checkpoints and traces).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace carousel {

inline constexpr std::uint64_t kFnvOffsetBasis = 0xcbf29ce484222325ULL;
inline constexpr std::uint64_t kFnvPrime = 0x100000001b3ULL;

// FNV-1a over bytes, one byte a step.
constexpr std::uint64_t fnv1a64(std::string_view bytes) {
  std::uint64_t h = kFnvOffsetBasis;
  for (const char c : bytes) h = (h ^ static_cast<unsigned char>(c)) * kFnvPrime;
  return h;
}

// FNV-1a a 64-bit word a step (the tail shorter than a word byte by byte), words read in the
// machine's byte order: eight times fewer multiplies than fnv1a64 for hashing gigabytes of
// weights. Each step is a bijection of h (xor with a word, then times an odd prime), so any
// change of one word always changes the hash. Not equal to fnv1a64 of the same bytes.
inline std::uint64_t fnv1a64_words(const void* bytes, std::size_t n) {
  const auto* p = static_cast<const unsigned char*>(bytes);
  std::uint64_t h = kFnvOffsetBasis;
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, p + i, sizeof(w));
    h = (h ^ w) * kFnvPrime;
  }
  for (; i < n; ++i) h = (h ^ p[i]) * kFnvPrime;
  return h;
}

}  // namespace carousel
