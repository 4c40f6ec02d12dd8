// config_limits.h — the bounds validation holds keys to (docs/reliability.md#config-and-launch-
// errors), shared by config_validate*.cpp and config_load.cpp (the dcn_* factors).
#pragma once

#include <cstdint>

#include "compute/error.h"

namespace carousel {

inline constexpr std::int64_t kMaxSteps = 1'000'000'000'000;  // 1e12 steps (and periods)
inline constexpr std::int64_t kMaxMeshAxis = 4096;            // S, F, D, T each (ici x dcn)
inline constexpr std::int64_t kMaxDevices = 65536;            // S x F x D x T
inline constexpr std::int64_t kMaxMicrobatches = 65536;       // M (and g)
inline constexpr double kMaxPerDeviceBatch = 65536;           // sequences per device
inline constexpr std::int64_t kMaxGlobalBatch = std::int64_t(1) << 24;
inline constexpr double kMaxScheduleCost = 1e12;

// -1 (automatic) or lo..hi.
inline void check_auto_or_range(const char* key, std::int64_t v, std::int64_t lo, std::int64_t hi,
                                const char* auto_means) {
  CAROUSEL_CHECK(v == -1 || (v >= lo && v <= hi),
                 "{}={} is not valid; it must be -1 ({}) or in [{}, {}]", key, v, auto_means, lo,
                 hi);
}

}  // namespace carousel
