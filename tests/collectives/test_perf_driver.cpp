// test_perf_driver.cpp — the pieces of the collective benchmarks' driver that decide what a row
// says: the inputs each rank sends, the tolerance of the result check and that the check counts
// a wrong element, nccl-tests' number columns, and -a's time over ranks. Expected values are
// worked out by hand from the rules in benchmarks/collectives/perf_types.h and nccl-tests'
// printf formats.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "benchmarks/collectives/perf_options.h"
#include "benchmarks/collectives/perf_report.h"
#include "benchmarks/collectives/perf_types.h"
#include "compute/cpu_backend.h"

namespace carousel::perf {
namespace {

// --backend auto as nccl-tests users expect; local under a multi-process mpirun is refused.
TEST(PerfBackend, AutoFollowsTheLaunchAndTheGpus) {
  const LaunchFacts cpu{.mpi_processes = 0, .mpi_built = true, .nccl_built = true, .gpus = 0};
  EXPECT_EQ(choose_backend("auto", cpu), "local");
  LaunchFacts f = cpu;
  f.mpi_processes = 4;
  EXPECT_EQ(choose_backend("auto", f), "mpi");
  f.gpus = 8;
  EXPECT_EQ(choose_backend("auto", f), "nccl");
  f.mpi_processes = 0;
  EXPECT_EQ(choose_backend("auto", f), "nccl");
  f.nccl_built = false;  // GPUs but no NCCL in this build: threads on CPU devices
  EXPECT_EQ(choose_backend("auto", f), "local");
  f.mpi_processes = 1;  // mpirun -np 1 is one rank: local is fine
  EXPECT_EQ(choose_backend("local", f), "local");
  f.mpi_processes = 2;
  EXPECT_EQ(choose_backend("local", f), std::nullopt);
  EXPECT_EQ(choose_backend("mpi", f), "mpi");
  f.mpi_built = false;
  EXPECT_EQ(choose_backend("auto", f), std::nullopt);  // no MPI, no GPUs: nothing joins them
}

TEST(PerfInputs, FollowTheDocumentedFormulas) {
  // sum/avg/min/max: ((3r + j) mod 11) - 5 signed, + 1 unsigned. r = 2, j = 4: 10.
  EXPECT_EQ(input_value(DType::I8, ReduceOp::Sum, 2, 3, 4), 5);
  EXPECT_EQ(input_value(DType::U8, ReduceOp::Sum, 2, 3, 4), 11);
  EXPECT_EQ(input_value(DType::F16, ReduceOp::Min, 0, 3, 0), -5);
  // prod: rank j mod n sends 2 + j mod 5; rank (j + 1) mod n sends -1 (signed); others 1.
  EXPECT_EQ(input_value(DType::F32, ReduceOp::Prod, 1, 3, 4), 6);
  EXPECT_EQ(input_value(DType::F32, ReduceOp::Prod, 2, 3, 4), -1);
  EXPECT_EQ(input_value(DType::U8, ReduceOp::Prod, 2, 3, 4), 1);
  EXPECT_EQ(input_value(DType::I32, ReduceOp::Prod, 0, 3, 4), 1);
}

TEST(PerfCheck, ToleranceCoversPerStepRoundingAndNothingMore) {
  // Integers, prod, min and max are exact.
  EXPECT_EQ(tolerance(DType::I8, ReduceOp::Sum, 8, 100), 0);
  EXPECT_EQ(tolerance(DType::F16, ReduceOp::Prod, 8, 100), 0);
  EXPECT_EQ(tolerance(DType::BF16, ReduceOp::Max, 8, 100), 0);
  // half 2048 + 1 + 1 rounded every step gives 2048 (reduction_table.h): error 2 against
  // gamma(2) * 2050 = 2 * 2^-11 * 2050 / (1 - 2^-10) = 2.0039...
  EXPECT_NEAR(tolerance(DType::F16, ReduceOp::Sum, 3, 2050), 2.00391, 1e-5);
  // bfloat16 256 + 1 + 1 = 256: gamma(2) * 258 = 2 * 2^-8 * 258 / (1 - 2^-7) = 2.03150...
  EXPECT_NEAR(tolerance(DType::BF16, ReduceOp::Sum, 3, 258), 2.03150, 1e-5);
  // avg over 3: gamma(4) * sum / 3; half, sum 7: 4 * 2^-11 * 7 / 3 / (1 - 2^-9) = 0.004566...
  EXPECT_NEAR(tolerance(DType::F16, ReduceOp::Avg, 3, 7), 0.0045662, 1e-6);
  // float32, 1024 ranks, sum 1e4: 1023 * 2^-24 * 1e4 / (1 - 1023 * 2^-24) = 0.60979...
  EXPECT_NEAR(tolerance(DType::F32, ReduceOp::Sum, 1024, 1e4), 0.609793, 1e-5);
  // 300 bfloat16 ranks: 299 roundings of 2^-8 bound nothing.
  EXPECT_TRUE(std::isinf(tolerance(DType::BF16, ReduceOp::Sum, 300, 1)));
}

// recv holds the exact all_reduce of 3 ranks' inputs, then one element is disturbed.
std::int64_t wrong_after_disturbing(DType dtype, ReduceOp op, double delta) {
  CpuBackend be(0);
  const int ranks = 3;
  const std::int64_t n = 12;
  std::vector<double> exact(n);
  for (std::int64_t j = 0; j < n; ++j) {
    double acc = input_value(dtype, op, 0, ranks, j);
    for (int q = 1; q < ranks; ++q) {
      const double x = input_value(dtype, op, q, ranks, j);
      acc = op == ReduceOp::Prod ? acc * x : acc + x;
    }
    exact[j] = acc;
  }
  exact[5] += delta;
  Tensor recv = be.zeros({n}, dtype);  // int8, float32 or float64 here
  std::vector<char> bytes(recv.nbytes());
  for (std::int64_t j = 0; j < n; ++j) {
    if (dtype == DType::I8) reinterpret_cast<std::int8_t*>(bytes.data())[j] = std::int8_t(exact[j]);
    if (dtype == DType::F32) reinterpret_cast<float*>(bytes.data())[j] = float(exact[j]);
    if (dtype == DType::F64) reinterpret_cast<double*>(bytes.data())[j] = exact[j];
  }
  be.upload(bytes.data(), recv);
  return count_wrong(be, recv, op, ranks, [](std::int64_t i) {
    return Source{Source::AllRanks, 0, i};
  });
}

TEST(PerfCheck, CountsAWrongElementAndAcceptsTheExactResult) {
  EXPECT_EQ(wrong_after_disturbing(DType::I8, ReduceOp::Sum, 0), 0);
  EXPECT_EQ(wrong_after_disturbing(DType::I8, ReduceOp::Sum, 1), 1);  // integers: exact
  EXPECT_EQ(wrong_after_disturbing(DType::F32, ReduceOp::Prod, 0), 0);
  EXPECT_EQ(wrong_after_disturbing(DType::F32, ReduceOp::Prod, 1), 1);
  EXPECT_EQ(wrong_after_disturbing(DType::F64, ReduceOp::Sum, 0), 0);
  // float64 sum of 3 ranks: bound gamma(2) * sum|x| is about 1e-15; 1e-9 is far outside.
  EXPECT_EQ(wrong_after_disturbing(DType::F64, ReduceOp::Sum, 1e-9), 1);
}

TEST(PerfReport, NumbersFitTheColumnsAsNcclTestsPrintsThem) {
  // width 6 (algbw, busbw): 2 decimals below 4 integer digits, then 1, then 0, then %.0e.
  EXPECT_EQ(fit_number(0, 6), "  0.00");
  EXPECT_EQ(fit_number(0.5, 6), "  0.50");
  EXPECT_EQ(fit_number(123.456, 6), "123.46");
  EXPECT_EQ(fit_number(1234.5, 6), "1234.5");
  EXPECT_EQ(fit_number(123456, 6), "123456");
  EXPECT_EQ(fit_number(12345678, 6), " 1e+07");
  // width 7 (time): 2 decimals below 5 digits, 1 at 5, 0 at 6 and 7, then %.1e.
  EXPECT_EQ(fit_number(12.3456, 7), "  12.35");
  EXPECT_EQ(fit_number(12345.67, 7), "12345.7");
  EXPECT_EQ(fit_number(1234567, 7), "1234567");
  EXPECT_EQ(fit_number(12345678, 7), "1.2e+07");
}

// -I's statistics by hand: (10), 1, 2, 3, 4 with -K 1 leaves 1..4: mean 2.5, population stdev
// sqrt(1.25), cv 44.72 %; p50 is the upper middle (3), p95 and p99 the nearest rank ceil(4 p)
// = 4th.
TEST(PerfReport, IterationStatisticsAsNcclTestsComputesThem) {
  const IterationStats s = iteration_stats({10, 1, 2, 3, 4}, 1);
  EXPECT_EQ(s.min, 1);
  EXPECT_EQ(s.max, 4);
  EXPECT_EQ(s.mean, 2.5);
  EXPECT_EQ(s.p50, 3);
  EXPECT_EQ(s.p95, 4);
  EXPECT_EQ(s.p99, 4);
  EXPECT_NEAR(s.stdev, std::sqrt(1.25), 1e-12);
  EXPECT_NEAR(s.cv_pct, 100 * std::sqrt(1.25) / 2.5, 1e-9);
  // 200 samples 1..200: the nearest-rank p99 is the 198th, p95 the 190th.
  std::vector<double> many(200);
  for (int i = 0; i < 200; ++i) many[std::size_t(i)] = i + 1;
  EXPECT_EQ(iteration_stats(many, 0).p99, 198);
  EXPECT_EQ(iteration_stats(many, 0).p95, 190);
}

TEST(PerfReport, AverageFlagPicksRankZeroMeanMinOrMax) {
  const std::vector<double> times = {4, 1, 7};
  EXPECT_EQ(time_over_ranks(times, 0), 4);
  EXPECT_EQ(time_over_ranks(times, 1), 4);
  EXPECT_EQ(time_over_ranks(times, 2), 1);
  EXPECT_EQ(time_over_ranks(times, 3), 7);
  EXPECT_EQ(time_over_ranks({2, 3}, 1), 2.5);
}

}  // namespace
}  // namespace carousel::perf
