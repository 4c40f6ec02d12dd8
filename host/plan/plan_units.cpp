// plan_units.cpp — number-with-unit parsing for `carousel plan`'s flags.
#include "host/plan/plan_units.h"

#include <cmath>
#include <cstdlib>
#include <map>

#include "compute/error.h"

namespace carousel::plan {

namespace {

// The leading number of `text` and the rest (the unit); throws when there is no positive,
// finite number.
std::pair<double, std::string> split(const std::string& flag, const std::string& text,
                                     const char* valid) {
  const char* begin = text.c_str();
  char* end = nullptr;
  const double value = std::strtod(begin, &end);
  CAROUSEL_CHECK(end != begin && std::isfinite(value) && value > 0,
                 "{}='{}' is not valid; it must be a positive number ({})", flag, text, valid);
  return {value, std::string(end)};
}

double scaled(const std::string& flag, const std::string& text, const char* valid,
              const std::map<std::string, double>& units) {
  const auto [value, unit] = split(flag, text, valid);
  const auto it = units.find(unit);
  CAROUSEL_CHECK(it != units.end(),
                 "{}='{}' has an unknown unit '{}'; it must be a positive number ({})", flag, text,
                 unit, valid);
  return value * it->second;
}

}  // namespace

double parse_bytes(const std::string& flag, const std::string& text) {
  static const std::map<std::string, double> units = {
      {"", 1},         {"B", 1},    {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1 << 30},
      {"TiB", 0x1p40}, {"KB", 1e3}, {"MB", 1e6},     {"GB", 1e9},        {"TB", 1e12}};
  return scaled(flag, text, "bytes, with B, KiB, MiB, GiB, TiB, KB, MB, GB or TB", units);
}

double parse_bandwidth(const std::string& flag, const std::string& text) {
  static const std::map<std::string, double> units = {
      {"", 1e9},           {"GB/s", 1e9},     {"MB/s", 1e6},        {"TB/s", 1e12},    {"B/s", 1},
      {"Gbit/s", 1e9 / 8}, {"Gb/s", 1e9 / 8}, {"Tbit/s", 1e12 / 8}, {"Tb/s", 1e12 / 8}};
  return scaled(flag, text,
                "bytes per second per device and direction: GB/s by default, or with GB/s, "
                "MB/s, TB/s, B/s, Gbit/s, Gb/s, Tbit/s or Tb/s",
                units);
}

double parse_count(const std::string& flag, const std::string& text) {
  static const std::map<std::string, double> units = {
      {"", 1}, {"K", 1024.0}, {"M", 1048576.0}, {"G", double(1 << 30)}};
  return scaled(flag, text, "optionally with K, M or G = 2^10, 2^20, 2^30", units);
}

}  // namespace carousel::plan
