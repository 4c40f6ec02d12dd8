// hash.h — the one hash of carousel: 64-bit FNV-1a over bytes. Parameter initialisation keys
// each parameter's random stream by the hash of its name (models/params.cpp), and the ranks of a
// job compare the hash of what they will run before step 1 (host/run/run_plan.cpp). Neither
// needs a cryptographic hash; both need one that is the same on every machine and build.
#pragma once

#include <cstdint>
#include <string_view>

namespace carousel {

constexpr std::uint64_t fnv1a64(std::string_view bytes) {
  std::uint64_t h = 0xcbf29ce484222325ULL;  // the FNV offset basis
  for (const char c : bytes) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  return h;
}

}  // namespace carousel
