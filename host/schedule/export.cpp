// export.cpp — Chrome trace JSON and SVG timeline of a simulated schedule.
#include "host/schedule/export.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

namespace carousel::schedule {

std::string chrome_trace_json(const SimResult& sim, int ranks, double time_unit_us) {
  nlohmann::json events = nlohmann::json::array();
  for (int r = 0; r < ranks; ++r) {
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", r},
                      {"args", {{"name", fmt::format("pipeline rank {}", r)}}}});
  }
  for (const auto& iv : sim.timeline) {
    events.push_back({{"ph", "X"},
                      {"name", to_string(iv.action)},
                      {"cat", iv.action.is_compute() ? "compute" : "collective"},
                      {"pid", iv.rank},
                      {"tid", iv.action.is_compute() ? 0 : 1},
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
      "W olive, collectives grey; numbers are microbatches)</text>\n",
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
      default: break;
    }
    const double x = left + iv.start * scale, w = (iv.end - iv.start) * scale;
    const int y = top + iv.rank * row + (iv.action.is_compute() ? 0 : row / 2);
    const int h = iv.action.is_compute() ? row - 4 : row / 2 - 2;
    out += fmt::format("<rect x=\"{:.1f}\" y=\"{}\" width=\"{:.1f}\" height=\"{}\" fill=\"{}\" "
                       "stroke=\"white\"><title>{}</title></rect>\n",
                       x, y, w, h, color, to_string(iv.action));
    if (iv.action.is_compute() && w > 14) {
      out += fmt::format("<text x=\"{:.1f}\" y=\"{}\" fill=\"white\">{}</text>\n", x + 2, y + 15,
                         iv.action.index);
    }
  }
  return out + "</svg>\n";
}

}  // namespace carousel::schedule
