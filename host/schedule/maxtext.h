// maxtext.h — MaxText's iteration view of the circular pipeline (docs/circular-pipeline.md,
// sections "The iteration table" and "Slot rule"): at loop iteration t, stage s works on
// (microbatch, repeat) = ((t - d s) mod M, floor((t - d s) / M)) when 0 <= t - d s < M R, and
// uses the weights of layers r S L + s L .. + L - 1. With the Buffer Sliding Window, in repeat block k = floor(t / M) slot 1
// holds repeat k's weights and slot 0 repeat k-1's; stage s reads slot 1 once
// (t mod M) >= d s (it has crossed into the new repeat), slot 0 before (the fixed rule; MaxText's
// original rule fills slot 1 per stage and is wrong for S >= 3: "The original slot rule and its
// bug").
#pragma once

#include <string>
#include <vector>

#include "host/schedule/stage_layers.h"

namespace carousel::schedule {

struct CircularCell {
  bool real = false;  // false: a bubble iteration for this stage
  int microbatch = -1, repeat = -1, first_layer = -1;
  int last_layer = -1;  // the stage's layers are [first_layer, last_layer]
  int bsw_slot = -1;    // which BSW slot the stage reads (real cells)
};

// table[t][s] for t in [0, M R + d (S - 1)); every stage L layers, or (the second form) the
// layers the map gives virtual stage r S + s (uneven stages).
std::vector<std::vector<CircularCell>> circular_table(int S, int M, int R, int d, int L);
std::vector<std::vector<CircularCell>> circular_table(int S, int M, int R, int d,
                                                      const StageLayers& layers);

// The MaxText-style table as text: one row per iteration, "m3/r1 (L5)" or "m3/r1 (L4-6)" cells
// (each cell's own layers), "--" for bubbles.
std::string format_circular_table(const std::vector<std::vector<CircularCell>>& table,
                                  bool show_bsw);

}  // namespace carousel::schedule
