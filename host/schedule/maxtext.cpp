// maxtext.cpp — the (iteration, stage) -> (microbatch, repeat, layer) table of the circular
// pipeline, with Buffer Sliding Window slot choice.
#include "host/schedule/maxtext.h"

#include <fmt/format.h>

#include "compute/error.h"

namespace carousel::schedule {

std::vector<std::vector<CircularCell>> circular_table(int S, int M, int R, int d, int L) {
  return circular_table(S, M, R, d, StageLayers::even(S * R, L));
}

std::vector<std::vector<CircularCell>> circular_table(int S, int M, int R, int d,
                                                      const StageLayers& layers) {
  CAROUSEL_ASSERT(layers.stages() == S * R, "{} stage counts for S x R = {} x {} stages",
                  layers.stages(), S, R);
  const int T = M * R + d * (S - 1);
  std::vector<std::vector<CircularCell>> table(T, std::vector<CircularCell>(S));
  for (int t = 0; t < T; ++t) {
    for (int s = 0; s < S; ++s) {
      const int p = t - d * s;
      if (p < 0 || p >= M * R) continue;
      CircularCell& c = table[t][s];
      c.real = true;
      c.microbatch = p % M;
      c.repeat = p / M;
      c.first_layer = layers.first(c.repeat * S + s);
      c.last_layer = c.first_layer + layers.count(c.repeat * S + s) - 1;
      // Block k = t / M (the bubble block after the last repeat uses repeat R-1 = slot 1).
      c.bsw_slot = (t >= M * R || c.repeat == t / M) ? 1 : 0;
    }
  }
  return table;
}

std::string format_circular_table(const std::vector<std::vector<CircularCell>>& table,
                                  bool show_bsw) {
  if (table.empty()) return {};
  const int S = int(table[0].size());
  std::string out = fmt::format("{:>4} |", "t");
  for (int s = 0; s < S; ++s) out += fmt::format(" {:<18}|", fmt::format("stage {}", s));
  out += "\n";
  for (std::size_t t = 0; t < table.size(); ++t) {
    out += fmt::format("{:>4} |", t);
    for (const auto& c : table[t]) {
      std::string cell = "--";
      if (c.real) {
        const std::string layers = c.first_layer == c.last_layer
                                       ? fmt::format("L{}", c.first_layer)
                                       : fmt::format("L{}-{}", c.first_layer, c.last_layer);
        cell = fmt::format("m{}/r{} ({})", c.microbatch, c.repeat, layers);
        if (show_bsw) cell += fmt::format(" s{}", c.bsw_slot);
      }
      out += fmt::format(" {:<18}|", cell);
    }
    out += "\n";
  }
  return out;
}

}  // namespace carousel::schedule
