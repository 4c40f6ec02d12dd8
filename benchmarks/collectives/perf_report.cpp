// perf_report.cpp — the nccl-tests 2.19 table on stdout and the -J JSON file (perf_report.h).
// Column widths follow nccl-tests' printf formats: row "%12li  %12li  %8s  %6s  %6i", then per
// placement "  %7s  %6s  %6s  %6g" (time, algbw, busbw, #wrong) or "    N/A" unchecked.
#include "benchmarks/collectives/perf_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
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
  const std::string step = o.step_factor > 1 ? fmt::format("{}(factor)", o.step_factor)
                                             : fmt::format("{}(bytes)", o.step_bytes);
  const bool per_process = o.backend != "local" && ranks != o.ranks();  // one rank per process
  fmt::print(
      "# nThread {} nGpus {} minBytes {} maxBytes {} step: {} warmup iters: {} iters: {} agg "
      "iters: {} validation: {} graph: {} unalign: {}\n",
      per_process ? 1 : o.threads, per_process ? 1 : o.gpus, o.min_bytes, o.max_bytes, step,
      o.warmup, o.iters, o.agg_iters, o.check, o.cuda_graphs, o.unalign);
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
  if (o.report_timestamps)
    fmt::print("# -S 1: each row ends with the local time it was measured\n");
  fmt::print("#\n");
  if (o.per_iter_timing) {  // nccl-tests 2.19.6's -I layout: 4 more columns per placement
    fmt::print(
        "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}              out-of-place (+ per-iteration)      "
        "                          in-place (+ per-iteration)\n",
        "", "", "", "", "");
    const auto line = [](const std::vector<std::string>& c) {
      fmt::print(
          "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>7}  "
          "{:>7}  {:>7}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>7}  {:>7}  {:>7} \n",
          c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], c[10], c[11], c[12], c[13],
          c[14], c[15], c[16], c[17], c[18], c[19], c[20]);
    };
    line({"size",  "count",  "type",   "redop", "root",  time,    "algbw",
          "busbw", "#wrong", "i_min",  "i_max", "i_p99", "i_cv%", time,
          "algbw", "busbw",  "#wrong", "i_min", "i_max", "i_p99", "i_cv%"});
    line({"(B)",    "(elements)", "",     "",     "",     "(us)", "(GB/s)",
          "(GB/s)", "",           "(us)", "(us)", "(us)", "(%)",  "(us)",
          "(GB/s)", "(GB/s)",     "",     "(us)", "(us)", "(us)", "(%)"});
    return;
  }
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
      if (o.per_iter_timing) line += fmt::format("  {0:>7}  {0:>7}  {0:>7}  {0:>7}", "N/A");
      continue;
    }
    line += fmt::format("  {}  {}  {}", fit_number(m.time_us, 7), fit_number(m.algbw, 6),
                        fit_number(m.busbw, 6));
    line += o.check ? fmt::format("  {:>6g}", double(m.wrong)) : std::string("    N/A");
    if (o.per_iter_timing) {
      const IterationStats st = iteration_stats(m.iteration_us, o.per_iter_skip);
      line += fmt::format("  {}  {}  {}  {}", fit_number(st.min, 7), fit_number(st.max, 7),
                          fit_number(st.p99, 7), fit_number(st.cv_pct, 7));
    }
  }
  if (o.report_timestamps) line += "  " + now_string();  // -S: when the row was measured
  fmt::print("{}\n", line);
}

IterationStats iteration_stats(const std::vector<double>& times_us, int skip) {
  IterationStats s;
  std::vector<double> t(
      times_us.begin() + std::min<std::size_t>(std::size_t(skip), times_us.size()), times_us.end());
  if (t.empty()) return s;
  std::sort(t.begin(), t.end());
  const std::size_t n = t.size();
  const auto rank = [&](std::size_t percent) {  // nearest rank: ceil(n p / 100), 1-based
    return t[std::min(n - 1, (n * percent + 99) / 100 - 1)];
  };
  s.min = t.front();
  s.max = t.back();
  s.p50 = t[n / 2];
  s.p95 = rank(95);
  s.p99 = rank(99);
  for (const double v : t) s.mean += v / double(n);
  for (const double v : t) s.stdev += (v - s.mean) * (v - s.mean) / double(n);
  s.stdev = std::sqrt(s.stdev);
  s.cv_pct = s.mean > 0 ? 100 * s.stdev / s.mean : 0;
  return s;
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
  if (o.step_factor > 1) {  // the step the sweep used, as the preamble says it
    config["step_factor"] = o.step_factor;
  } else {
    config["step_bytes"] = o.step_bytes;
  }
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
      if (o.per_iter_timing) {  // nccl-tests' "<placement>_per_iter" object
        const IterationStats st = iteration_stats(m.iteration_us, o.per_iter_skip);
        j[std::string(names[p]) + "_per_iter"] = {{"skipped_iterations", o.per_iter_skip},
                                                  {"min_us", st.min},
                                                  {"max_us", st.max},
                                                  {"avg_us", st.mean},
                                                  {"p50_us", st.p50},
                                                  {"p95_us", st.p95},
                                                  {"p99_us", st.p99},
                                                  {"stdev_us", st.stdev},
                                                  {"cv_pct", st.cv_pct},
                                                  {"times_us", m.iteration_us}};
      }
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
