// generators.cpp — circular, gpipe, 1f1b, interleaved_1f1b and zb_h1 compute programs.
#include "host/schedule/generators.h"

#include <algorithm>

#include "cuda/error.h"

namespace carousel::schedule {

namespace {

Action compute(Kind k, int stage, int mb) { return Action{k, stage, mb, -1}; }

Program circular(const Layout& l) {
  Program p{l, std::vector<std::vector<Action>>(l.ranks)};
  for (int s = 0; s < l.ranks; ++s) {
    auto& prog = p.ranks[s];
    for (int r = 0; r < l.repeats; ++r)
      for (int m = 0; m < l.microbatches; ++m) prog.push_back(compute(Kind::F, r * l.ranks + s, m));
    const std::size_t forwards = prog.size();
    for (std::size_t i = forwards; i-- > 0;) prog.push_back(compute(Kind::B, prog[i].stage, prog[i].index));
  }
  return p;
}

// PipeDream-flush 1F1B: S-s-1 warmup forwards, then alternate one forward and one backward.
Program one_f_one_b(const Layout& l) {
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
Program zb_h1(const Layout& l) {
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

Program interleaved(const Layout& l, int g) {
  const int S = l.ranks, M = l.microbatches, v = l.repeats;
  CAROUSEL_CHECK(g >= S && g <= M && M % g == 0,
                 "interleaved_1f1b needs a microbatch group size g with S <= g <= M and M % g == "
                 "0 (S={}, M={}, g={}); set pipeline_microbatch_group_size or num_pipeline_"
                 "microbatches",
                 S, M, g);
  Program p{l, std::vector<std::vector<Action>>(S)};
  const int n = M * v;  // (chunk, microbatch) pairs per rank
  auto mb_of = [&](int k) { return (k / (g * v)) * g + k % g; };
  auto chunk_of = [&](int k, bool backward) {
    const int c = (k % (g * v)) / g;
    return backward ? v - 1 - c : c;
  };
  for (int s = 0; s < S; ++s) {
    auto& prog = p.ranks[s];
    const int warmup = std::min(n, 2 * (S - s - 1) + (v - 1) * g);
    auto fwd = [&](int k) { prog.push_back(compute(Kind::F, chunk_of(k, false) * S + s, mb_of(k))); };
    auto bwd = [&](int k) { prog.push_back(compute(Kind::B, chunk_of(k, true) * S + s, mb_of(k))); };
    for (int k = 0; k < warmup; ++k) fwd(k);
    for (int k = 0; k < n - warmup; ++k) {
      fwd(warmup + k);
      bwd(k);
    }
    for (int k = n - warmup; k < n; ++k) bwd(k);
  }
  return p;
}

}  // namespace

Program generate(const ScheduleSpec& spec) {
  const Layout& l = spec.layout;
  CAROUSEL_CHECK(l.ranks >= 1 && l.microbatches >= 1 && l.repeats >= 1,
                 "schedule needs ranks, microbatches and repeats >= 1 (got S={}, M={}, R={})",
                 l.ranks, l.microbatches, l.repeats);
  if (spec.kind == "circular") return circular(l);
  if (spec.kind == "interleaved_1f1b") {
    return interleaved(l, spec.group_size > 0 ? spec.group_size : l.ranks);
  }
  if (spec.kind == "gpipe" || spec.kind == "1f1b" || spec.kind == "zb_h1") {
    CAROUSEL_CHECK(l.repeats == 1,
                   "pipeline_schedule={} runs one stage per rank (num_pipeline_repeats=1), got "
                   "R={}; for repeats use circular or interleaved_1f1b",
                   spec.kind, l.repeats);
    if (spec.kind == "gpipe") return circular(l);
    return spec.kind == "1f1b" ? one_f_one_b(l) : zb_h1(l);
  }
  fail("pipeline_schedule='{}' is not valid; use circular, gpipe, 1f1b, interleaved_1f1b or "
       "zb_h1",
       spec.kind);
}

}  // namespace carousel::schedule
