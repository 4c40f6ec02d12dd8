// perf_report.cpp — the nccl-tests 2.19 table on stdout and the -J JSON file (perf_report.h).
// Column widths follow nccl-tests' printf formats: row "%12li  %12li  %8s  %6s  %6i", then per
// placement "  %7s  %6s  %6s  %6g" (time, algbw, busbw, #wrong) or "    N/A" unchecked.
#include "benchmarks/collectives/perf_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>

#include "compute/error.h"

namespace carousel::perf {

std::string fit_number(double value, int width) {
  int digits = 0;  // digits before the decimal point (0 below 1)
  for (double v = 1; value >= v && digits < 40; v *= 10) ++digits;
  if (digits < width - 2) return fmt::format("{:>{}.2f}", value, width);
  if (digits < width - 1) return fmt::format("{:>{}.1f}", value, width);
  if (digits < width + 1) return fmt::format("{:>{}.0f}", value, width);
  return fmt::format("{:>{}.{}e}", value, width, width >= 7 ? 1 : 0);
}

double time_over_ranks(const std::vector<double>& per_rank, int average) {
  CAROUSEL_ASSERT(!per_rank.empty() && average >= 0 && average <= 3, "-a {} over {} ranks", average,
                  per_rank.size());
  switch (average) {
    case 0:
      return per_rank[0];
    case 2:
      return *std::min_element(per_rank.begin(), per_rank.end());
    case 3:
      return *std::max_element(per_rank.begin(), per_rank.end());
    default: {
      double mean = 0;
      for (double t : per_rank) mean += t / double(per_rank.size());
      return mean;
    }
  }
}

std::string now_string() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char text[64];
  std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M:%S", &local);
  return text;
}

void print_preamble(const Options& o, const std::string& program, int ranks,
                    const std::vector<Device>& devices, const std::string& carousel_note) {
  fmt::print("# {}\n", carousel_note);
  fmt::print("# Collective test starting: {}\n", program);
  const std::string step = o.step_bytes > 0 ? fmt::format("{}(bytes)", o.step_bytes)
                                            : fmt::format("{}(factor)", o.step_factor);
  const bool per_process = o.backend != "local" && ranks != o.ranks();  // one rank per process
  fmt::print(
      "# nThread {} nGpus {} minBytes {} maxBytes {} step: {} warmup iters: {} iters: {} agg "
      "iters: {} validation: {} graph: {} unalign: 0\n",
      per_process ? 1 : o.threads, per_process ? 1 : o.gpus, o.min_bytes, o.max_bytes, step,
      o.warmup, o.iters, o.agg_iters, o.check, o.cuda_graphs);
  if (o.blocking)
    fmt::print("# Blocking Enabled: wait for completion and barrier after each collective \n");
  if (o.parallel_init)
    fmt::print("# Parallel Init Enabled: threads call into NcclInitRank concurrently \n");
  fmt::print("#\n# Using devices\n");
  for (const Device& d : devices) {
    fmt::print("#  Rank {:>2} Group {:>2} Pid {:>6} on {:>10} device {:>2} [{}] {}\n", d.rank, 0,
               d.pid, d.host, d.index, d.id, d.info);
  }
}

void print_table_header(const Options& o) {
  const char* time = o.report_cputime ? "cputime" : "time";
  if (o.report_timestamps) fmt::print("# -S 1: each row ends with the local time it was measured\n");
  fmt::print("#\n");
  fmt::print(
      "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}           out-of-place                       "
      "in-place          \n",
      "", "", "", "", "");
  fmt::print(
      "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  "
      "{:>6}  {:>6} \n",
      "size", "count", "type", "redop", "root", time, "algbw", "busbw", "#wrong", time, "algbw",
      "busbw", "#wrong");
  fmt::print(
      "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  "
      "{:>6}  {:>6} \n",
      "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)",
      "");
}

void print_row(const Options& o, const Row& row) {
  std::string line = fmt::format("{:>12}  {:>12}  {:>8}  {:>6}  {:>6}", row.bytes, row.count,
                                 row.type, row.redop, row.root);
  for (const Measurement& m : row.placement) {
    if (!m.present) {
      line += fmt::format("  {:>7}  {:>6}  {:>6}    N/A", "N/A", "N/A", "N/A");
      continue;
    }
    line += fmt::format("  {}  {}  {}", fit_number(m.time_us, 7), fit_number(m.algbw, 6),
                        fit_number(m.busbw, 6));
    line += o.check ? fmt::format("  {:>6g}", double(m.wrong)) : std::string("    N/A");
  }
  if (o.report_timestamps) line += "  " + now_string();  // -S: when the row was measured
  fmt::print("{}\n", line);
}

Summary summarize(const std::vector<Row>& rows) {
  Summary s;
  int measured = 0;
  for (const Row& r : rows) {
    for (const Measurement& m : r.placement) {
      if (!m.present) continue;
      s.avg_busbw += m.busbw;
      ++measured;
      if (m.wrong > 0) ++s.out_of_bounds;
    }
  }
  if (measured > 0) s.avg_busbw /= measured;
  return s;
}

void print_footer(const Summary& s, const std::string& program) {
  fmt::print("# {:<20} : {} {}\n", "Out of bounds values", s.out_of_bounds,
             s.out_of_bounds ? "FAILED" : "OK");
  fmt::print("# {:<20} : {:g} \n", "Avg bus bandwidth", s.avg_busbw);
  fmt::print("#\n# Collective test concluded: {}\n", program);
}

bool write_json(const Options& o, const std::string& program, int ranks,
                const std::vector<Device>& devices, double memcpy_gbps,
                const std::vector<Row>& rows, const Summary& s, const std::string& start_time) {
  using Json = nlohmann::ordered_json;
  // nccl-tests writes booleans as the strings "true"/"false" and the root as "%6i": kept, so
  // its readers take this file unchanged.
  auto flag = [](bool b) { return b ? "true" : "false"; };
  Json config = {{"nthreads", o.threads},
                 {"ngpus", o.gpus},
                 {"minimum_bytes", o.min_bytes},
                 {"maximum_bytes", o.max_bytes}};
  if (o.step_bytes > 0)
    config["step_bytes"] = o.step_bytes;
  else
    config["step_factor"] = o.step_factor;
  config["warmup_iters"] = o.warmup;
  config["iterations"] = o.iters;
  config["aggregated_iterations"] = o.agg_iters;
  config["validation"] = o.check;
  config["graph"] = o.cuda_graphs;
  config["blocking_collectives"] = flag(o.blocking);
  config["parallel_init"] = flag(o.parallel_init);
  config["devices"] = Json::array();
  for (const Device& d : devices) {
    config["devices"].push_back({{"rank", d.rank},
                                 {"group", 0},
                                 {"pid", d.pid},
                                 {"hostname", d.host},
                                 {"device", d.index},
                                 {"device_hex", d.id},
                                 {"device_info", d.info}});
  }
  Json results = Json::array();
  for (const Row& r : rows) {
    Json j = {{"size", r.bytes},
              {"count", r.count},
              {"type", r.type},
              {"redop", r.redop},
              {"root", fmt::format("{:>6}", r.root)}};
    const char* names[2] = {"out_of_place", "in_place"};
    for (int p = 0; p < 2; ++p) {
      const Measurement& m = r.placement[p];
      if (!m.present) {
        j[names[p]] = nullptr;
        continue;
      }
      j[names[p]] = {{o.report_cputime ? "cpu_time" : "time", m.time_us},
                     {"alg_bw", m.algbw},
                     {"bus_bw", m.busbw},
                     {"nwrong", o.check ? Json(double(m.wrong)) : Json(nullptr)}};
    }
    j["actual_iterations"] = r.iterations;
    j["experiment_name"] = program;
    j["operations_per_rank"] = r.operations_per_rank;  // carousel: timed ops each rank issued
    results.push_back(j);
  }
  Json doc = {{"version", 2}, {"start_time", start_time}, {"args", o.args}, {"config", config}};
  doc["results"] = results;
  doc["out_of_bounds"] = {{"count", s.out_of_bounds}, {"okay", flag(s.out_of_bounds == 0)}};
  doc["average_bus_bandwidth"] = {{"bandwidth", s.avg_busbw}, {"okay", "unchecked"}};
  doc["errors"] = Json::array();
  doc["carousel"] = {
      {"program", program},
      {"backend", o.backend},
      {"ranks", ranks},
      {"time_over_ranks", std::vector<std::string>{"rank0", "mean", "min", "max"}[o.average]},
      {"memcpy_gbps", memcpy_gbps}};
  doc["end_time"] = now_string();
  std::ofstream out(o.json_file, std::ios::trunc);
  out << doc.dump(2) << "\n";
  out.flush();
  if (!out.good()) {
    fmt::print(stderr, "error: writing -J/--output_file '{}' failed: {}\n", o.json_file,
               std::strerror(errno));
    return false;
  }
  return true;
}

}  // namespace carousel::perf
