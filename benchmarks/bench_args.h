// bench_args.h — command-line list parsing shared by the benchmarks' drivers.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

namespace carousel::bench {

// "a,b,,c" -> {"a", "b", "c"}: the comma-separated items of a flag's value, empty ones skipped.
inline std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t comma = std::min(list.find(',', start), list.size());
    if (comma > start) out.push_back(list.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

}  // namespace carousel::bench
