// generators.cpp — circular, gpipe, 1f1b, interleaved_1f1b, zb_h1, looped_bfs and zbv compute
// programs. Their constraints are checked by the registry (registry.cpp) before they run.
#include "host/schedule/generators/generators.h"

#include <algorithm>

namespace carousel::schedule {

namespace {

Action compute(Kind k, int stage, int mb) { return Action{k, stage, mb, -1}; }

}  // namespace

Program generate_circular(const ScheduleSpec& spec) {
  const Layout& l = spec.layout;
  Program p{l, std::vector<std::vector<Action>>(l.ranks)};
  for (int s = 0; s < l.ranks; ++s) {
    auto& prog = p.ranks[s];
    for (int r = 0; r < l.repeats; ++r)
      for (int m = 0; m < l.microbatches; ++m) prog.push_back(compute(Kind::F, r * l.ranks + s, m));
    const std::size_t forwards = prog.size();
    for (std::size_t i = forwards; i-- > 0;)
      prog.push_back(compute(Kind::B, prog[i].stage, prog[i].index));
  }
  return p;
}

// GPipe is the circular schedule with one repeat (R = 1, checked by the registry).
Program generate_gpipe(const ScheduleSpec& spec) { return generate_circular(spec); }

// PipeDream-flush 1F1B: S-s-1 warmup forwards, then alternate one forward and one backward.
Program generate_1f1b(const ScheduleSpec& spec) {
  const Layout& l = spec.layout;
  Program p{l, std::vector<std::vector<Action>>(l.ranks)};
  const int M = l.microbatches;
  for (int s = 0; s < l.ranks; ++s) {
    auto& prog = p.ranks[s];
    const int warmup = std::min(l.ranks - s - 1, M);
    for (int m = 0; m < warmup; ++m) prog.push_back(compute(Kind::F, s, m));
    for (int j = 0; j < M; ++j) {
      if (warmup + j < M) prog.push_back(compute(Kind::F, s, warmup + j));
      prog.push_back(compute(Kind::B, s, j));
    }
  }
  return p;
}

// ZB-H1 (Qi et al., Zero Bubble Pipeline Parallelism, 2023): 1F1B with the backward split into
// I (input gradient, on the critical path) and W (weight gradient, free to move). Rank s keeps
// 1F1B's warmup and F/I alternation and runs W of microbatch j - s after I of microbatch j: the
// later ranks, which wait longest in 1F1B's cooldown, defer their Ws into it. With equal F, I, W
// costs the bubble is (S-1)(F + I - W) and every rank holds at most S activations (1F1B's peak).
Program generate_zb_h1(const ScheduleSpec& spec) {
  const Layout& l = spec.layout;
  const int S = l.ranks, M = l.microbatches;
  Program p{l, std::vector<std::vector<Action>>(S)};
  for (int s = 0; s < S; ++s) {
    auto& prog = p.ranks[s];
    const int warmup = std::min(S - s - 1, M);
    for (int m = 0; m < warmup; ++m) prog.push_back(compute(Kind::F, s, m));
    int next_w = 0;
    for (int j = 0; j < M; ++j) {
      if (warmup + j < M) prog.push_back(compute(Kind::F, s, warmup + j));
      prog.push_back(compute(Kind::I, s, j));
      if (j >= s) prog.push_back(compute(Kind::W, s, next_w++));
    }
    while (next_w < M) prog.push_back(compute(Kind::W, s, next_w++));
  }
  return p;
}

// Megatron's interleaved 1F1B: chunk c of rank s is virtual stage c S + s; microbatches in groups
// of g (S <= g <= M, M % g == 0, checked by the registry). With split_backward (interleaved_zb)
// each B becomes an I, and rank s runs the W of its k-th backward right after its (k + s)-th I
// (ZB-H1's deferral, by backward count), the rest at the end.
static Program interleaved(const ScheduleSpec& spec, bool split_backward) {
  const Layout& l = spec.layout;
  const int S = l.ranks, M = l.microbatches, v = l.repeats, g = spec.group();
  Program p{l, std::vector<std::vector<Action>>(S)};
  const int n = M * v;  // (chunk, microbatch) pairs per rank
  auto mb_of = [&](int k) { return (k / (g * v)) * g + k % g; };
  auto chunk_of = [&](int k, bool backward) {
    const int c = (k % (g * v)) / g;
    return backward ? v - 1 - c : c;
  };
  for (int s = 0; s < S; ++s) {
    auto& prog = p.ranks[s];
    // Interleaved 1F1B warms up with 2(S-s-1) + (v-1)g forwards. With the I/W split a rank's
    // first I comes back sooner (no W on the critical path), so PyTorch's interleaved zero
    // bubble warms up with (S-s-1) + (v-1)g: the same step time, and the s-step W deferral then
    // holds S + (v-1)g chunk activations on every rank instead of 2S-1-s + (v-1)g.
    const int warmup =
        std::min(n, (split_backward ? 1 : 2) * (S - s - 1) + (v - 1) * g);
    auto fwd = [&](int k) {
      prog.push_back(compute(Kind::F, chunk_of(k, false) * S + s, mb_of(k)));
    };
    int next_w = 0;
    auto weight = [&] {
      prog.push_back(compute(Kind::W, chunk_of(next_w, true) * S + s, mb_of(next_w)));
      ++next_w;
    };
    auto bwd = [&](int k) {
      prog.push_back(
          compute(split_backward ? Kind::I : Kind::B, chunk_of(k, true) * S + s, mb_of(k)));
      if (split_backward && k >= s) weight();
    };
    for (int k = 0; k < warmup; ++k) fwd(k);
    for (int k = 0; k < n - warmup; ++k) {
      fwd(warmup + k);
      bwd(k);
    }
    for (int k = n - warmup; k < n; ++k) bwd(k);
    while (split_backward && next_w < n) weight();
  }
  return p;
}

Program generate_interleaved_1f1b(const ScheduleSpec& spec) { return interleaved(spec, false); }

// Interleaved zero bubble (PyTorch's ScheduleInterleavedZeroBubble without its timing pass, which
// the list scheduling here makes implicit): interleaved 1F1B with B split into I and W.
Program generate_interleaved_zb(const ScheduleSpec& spec) { return interleaved(spec, true); }

// PyTorch's ScheduleLoopedBFS (Lamy-Poirier, Breadth-First Pipeline Parallelism, 2022): rank s
// runs every microbatch of its first local stage s, then of s + S, ...; the backward takes the
// local stages in reverse, microbatches in reverse within each. Loop placement, any R and M.
// With one forwarding step (d = 1) this is exactly MaxText's circular order, which
// LoopedBfs.IsMaxTextsCircularOrderWithoutTheDelay checks; the row exists under PyTorch's name.
Program generate_looped_bfs(const ScheduleSpec& spec) {
  const Layout& l = spec.layout;
  const int S = l.ranks, M = l.microbatches, R = l.repeats;
  Program p{l, std::vector<std::vector<Action>>(S)};
  for (int s = 0; s < S; ++s) {
    auto& prog = p.ranks[s];
    for (int c = 0; c < R; ++c)
      for (int m = 0; m < M; ++m) prog.push_back(compute(Kind::F, c * S + s, m));
    for (int c = R; c-- > 0;)
      for (int m = M; m-- > 0;) prog.push_back(compute(Kind::B, c * S + s, m));
  }
  return p;
}

// ZB-V (Qi et al., Pipeline Parallelism with Controllable Memory, 2024; PyTorch's
// ScheduleZBVZeroBubble): two chunks per rank in V placement, chunk 0 = stage s on the way down,
// chunk 1 = stage 2S-1-s on the way back up, so rank 0 holds the first and the last stage.
// Phases on rank s (c0 = chunk 0, c1 = chunk 1, Ix/Wx the split backward of chunk x):
//   warmup  2(S-s)-1 F c0; then s times (F c1, F c0); then S-s times (F c1, I c1, W c1)
//   steady  while forwards remain: F c0 (if any left), I c0, W c0, F c1, I c1, W c1
//   cooldown s times (I c0, I c1); S-s times (I c0, W c0); the remaining W c1, then W c0.
// Needs R = 2 and M >= 2S (checked by the registry).
Program generate_zbv(const ScheduleSpec& spec) {
  Layout l = spec.layout;
  l.placement = Placement::V;
  const int S = l.ranks, M = l.microbatches;
  Program p{l, std::vector<std::vector<Action>>(S)};
  for (int s = 0; s < S; ++s) {
    auto& prog = p.ranks[s];
    const int c0 = s, c1 = 2 * S - 1 - s;
    int f0 = 0, f1 = 0, i0 = 0, i1 = 0, w0 = 0, w1 = 0;
    auto F = [&](int stage, int& n) { prog.push_back(compute(Kind::F, stage, n++)); };
    auto I = [&](int stage, int& n) { prog.push_back(compute(Kind::I, stage, n++)); };
    auto W = [&](int stage, int& n) { prog.push_back(compute(Kind::W, stage, n++)); };
    for (int k = 0; k < 2 * (S - s) - 1; ++k) F(c0, f0);
    for (int k = 0; k < s; ++k) F(c1, f1), F(c0, f0);
    for (int k = 0; k < S - s; ++k) F(c1, f1), I(c1, i1), W(c1, w1);
    while (f1 < f0 || f0 < M) {
      if (f0 < M) F(c0, f0);
      I(c0, i0), W(c0, w0);
      F(c1, f1), I(c1, i1), W(c1, w1);
    }
    for (int k = 0; k < s; ++k) I(c0, i0), I(c1, i1);
    for (int k = 0; k < S - s; ++k) I(c0, i0), W(c0, w0);
    while (w1 < i1) W(c1, w1);
    while (w0 < i0) W(c0, w0);
  }
  return p;
}

}  // namespace carousel::schedule
