// plan_units.h — the quantities `carousel plan` reads from its command line: bytes ("80GiB"),
// bandwidths ("450GB/s", "400Gbit/s") and counts ("4M"), each refused with one clear error.
#pragma once

#include <string>

namespace carousel::plan {

// "80GiB", "80GB", "81920MiB", "8e10" (bytes); binary (KiB, MiB, GiB, TiB) or decimal (KB, MB,
// GB, TB) units. `flag` names the option in errors.
double parse_bytes(const std::string& flag, const std::string& text);

// Bytes per second: "450GB/s", "450" (GB/s), "400Gbit/s" or "400Gb/s" (bits: / 8), "50e9B/s".
double parse_bandwidth(const std::string& flag, const std::string& text);

// A count with an optional binary suffix: "4M" = 4 x 2^20, "512K", "1024".
double parse_count(const std::string& flag, const std::string& text);

}  // namespace carousel::plan
