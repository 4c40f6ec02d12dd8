// export.cpp — Chrome trace JSON and SVG timeline of a simulated schedule.
#include "host/schedule/export.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

namespace carousel::schedule {

namespace {

// An action's name inside SVG text: the '&' of an overlapped pair's forward is markup there.
std::string svg_text(const Action& a) {
  std::string out;
  for (const char c : to_string(a)) out += c == '&' ? std::string("&amp;") : std::string(1, c);
  return out;
}

}  // namespace

std::string chrome_trace_json(const SimResult& sim, int ranks, double time_unit_us) {
  nlohmann::json events = nlohmann::json::array();
  for (int r = 0; r < ranks; ++r) {
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", r},
                      {"args", {{"name", fmt::format("pipeline rank {}", r)}}}});
  }
  for (const auto& iv : sim.timeline) {
    events.push_back({{"ph", "X"},
                      {"name", to_string(iv.action)},
                      {"cat", iv.action.is_compute()    ? "compute"
                              : iv.action.is_exchange() ? "expert exchange"
                                                        : "collective"},
                      {"pid", iv.rank},
                      {"tid", iv.action.is_compute() ? 0 : iv.action.is_exchange() ? 2 : 1},
                      {"ts", iv.start * time_unit_us},
                      {"dur", (iv.end - iv.start) * time_unit_us},
                      {"args", {{"stage", iv.action.stage}, {"index", iv.action.index}}}});
  }
  return nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump();
}

std::string timeline_svg(const SimResult& sim, int ranks, const std::string& title) {
  const double scale = sim.step_time > 0 ? 1000.0 / sim.step_time : 1.0;  // 1000 px wide
  const int row = 28, left = 70, top = 30;
  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "font-family=\"monospace\" font-size=\"10\">\n<rect width=\"100%\" height=\"100%\" "
      "fill=\"white\"/>\n<text x=\"4\" y=\"16\" font-size=\"12\">{}   (F blue, B/I green, "
      "W olive, layers outside the pipeline purple, collectives grey; numbers are microbatches; a "
      "black border: an overlapped F&amp;B "
      "pair)</text>\n",
      left + 1010, top + ranks * row + 10, title);
  for (int r = 0; r < ranks; ++r) {
    out += fmt::format("<text x=\"4\" y=\"{}\">rank {}</text>\n", top + r * row + 17, r);
  }
  for (const auto& iv : sim.timeline) {
    const char* color = "#9e9e9e";
    switch (iv.action.kind) {
      case Kind::F: color = "#4e79a7"; break;
      case Kind::B:
      case Kind::I: color = "#59a14f"; break;
      case Kind::W: color = "#b6992d"; break;
      case Kind::OUTSIDE:
        color = "#af7aa1";
        break;
      default: break;
    }
    const double x = left + iv.start * scale, w = (iv.end - iv.start) * scale;
    const int y = top + iv.rank * row + (iv.action.is_compute() ? 0 : row / 2);
    const int h = iv.action.is_compute() ? row - 4 : row / 2 - 2;
    out += fmt::format(
        "<rect x=\"{:.1f}\" y=\"{}\" width=\"{:.1f}\" height=\"{}\" fill=\"{}\" "
        "stroke=\"white\"><title>{}</title></rect>\n",
        x, y, w, h, color, svg_text(iv.action));
    if (iv.action.is_compute() && w > 14) {
      out += fmt::format("<text x=\"{:.1f}\" y=\"{}\" fill=\"white\">{}</text>\n", x + 2, y + 15,
                         iv.action.index);
    }
  }
  // Overlapped F&B pairs (Action::overlap), as DeepSeek draws them: one black border around
  // the forward and the rank's next compute action, its partner — from the forward's first part
  // to the last part of either (halves taking turns run in parts, interleaved).
  struct Pair {
    const Interval* forward = nullptr;
    std::optional<Action> partner;
    bool forward_done = false, partner_done = false;
    double end = 0;
  };
  std::vector<Pair> open(static_cast<std::size_t>(ranks));  // per rank
  for (const auto& iv : sim.timeline) {
    if (!iv.action.is_compute()) continue;
    Pair& p = open[std::size_t(iv.rank)];
    const bool last_part = iv.part == iv.parts - 1;
    if (!p.forward) {
      if (iv.action.overlap && iv.part == 0) p = {&iv, std::nullopt, last_part, false, iv.end};
      continue;
    }
    if (iv.action == p.forward->action) {
      p.forward_done = p.forward_done || last_part;
    } else {
      if (!p.partner) p.partner = iv.action;
      p.partner_done = p.partner_done || (iv.action == *p.partner && last_part);
    }
    p.end = std::max(p.end, iv.end);
    if (!p.forward_done || !p.partner_done) continue;
    out += fmt::format(
        "<rect class=\"pair\" x=\"{:.1f}\" y=\"{}\" width=\"{:.1f}\" height=\"{}\" "
        "fill=\"none\" stroke=\"black\" stroke-width=\"2\"><title>{} {} "
        "overlapped</title></rect>\n",
        left + p.forward->start * scale, top + iv.rank * row, (p.end - p.forward->start) * scale,
        row - 4, svg_text(p.forward->action), svg_text(*p.partner));
    p = {};
  }
  return out + "</svg>\n";
}

}  // namespace carousel::schedule
