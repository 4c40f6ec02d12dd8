// perf_report.h — what the collective benchmarks print and write: nccl-tests 2.19's stdout
// layout (preamble, the three header lines, one row per size, the footer) so that parsers
// written for nccl-tests read carousel's tables, and the -J JSON file in nccl-tests' schema
// (version 2) plus a "carousel" object. docs/collectives.md describes both field by field.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "benchmarks/collectives/perf_options.h"

namespace carousel::perf {

// One placement (out of place, in place) of one row.
struct Measurement {
  bool present = false;  // false: the collective has no such placement (sendrecv in place)
  double time_us = 0, algbw = 0, busbw = 0;
  std::int64_t wrong = 0;            // wrong elements summed over ranks (when checked)
  std::vector<double> iteration_us;  // -I: each iteration's time, the slowest rank's
};

// -I's statistics of iteration times (the first `skip` left out), as nccl-tests computes them:
// the p99 is the nearest-rank percentile; cv = stdev / mean (population stdev), in percent.
struct IterationStats {
  double min = 0, max = 0, mean = 0, p50 = 0, p95 = 0, p99 = 0, stdev = 0, cv_pct = 0;
};
IterationStats iteration_stats(const std::vector<double>& times_us, int skip);

struct Row {
  std::int64_t bytes = 0, count = 0;
  std::string type, redop;   // "float", "sum" ("none" for collectives that do not reduce)
  int root = -1;             // -1 for collectives without a root
  Measurement placement[2];  // [0] out of place, [1] in place
  std::int64_t iterations = 0, operations_per_rank = 0;  // timed, as counted by the run loop
};

struct Summary {
  int out_of_bounds = 0;  // measurements with at least one wrong element (nccl-tests' count)
  double avg_busbw = 0;   // mean busbw over every measurement present
};

struct Device {  // one "#  Rank ..." line
  int rank = 0, pid = 0, index = 0;
  std::string host, id, info;
};

// The nccl-tests number column: `width` characters, 2 decimals while they fit, then fewer,
// then an exponent.
std::string fit_number(double value, int width);

void print_preamble(const Options& o, const std::string& program, int ranks,
                    const std::vector<Device>& devices, const std::string& carousel_note);
void print_table_header(const Options& o);
void print_row(const Options& o, const Row& row);
Summary summarize(const std::vector<Row>& rows);
void print_footer(const Summary& s, const std::string& program);

// The time a row reports (-a): 0 rank 0's, 1 the mean over ranks, 2 the min, 3 the max.
double time_over_ranks(const std::vector<double>& per_rank, int average);

// Writes the -J file; false (after one error line) when it cannot be written.
bool write_json(const Options& o, const std::string& program, int ranks,
                const std::vector<Device>& devices, double memcpy_gbps,
                const std::vector<Row>& rows, const Summary& s, const std::string& start_time);
std::string now_string();  // "2026-11-23 02:30:00", local time, as nccl-tests

}  // namespace carousel::perf
