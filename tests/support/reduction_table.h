// reduction_table.h — every element type with every reduce op on 3 ranks, against results
// worked out by hand (not by carousel's code), for the threaded (test_collectives) and
// multi-process (test_multiproc) communicators. Each rank calls check_reduction_table() with
// its backend on a communicator of exactly 3 ranks; rank order is 0, 1, 2.
//
// What the table pins down (the rules of collectives/communicator.h):
//   integers  wrap modulo 2^bits: int8 100+100+100 = 300 - 256 = 44; uint8 16*16*2 = 512 -> 0;
//             int32 max + 1 = min; int64 2^40 * 2^30 = 2^70 -> 0; avg = wrapped sum / 3,
//             truncated toward zero (-7/3 = -2; uint8 3 x 255 = 765 -> 253, / 3 = 84).
//   The host communicators only: NCCL's float avg pre-multiplies by 1/n, which may differ in
//   the last bit (the benchmarks' bound covers both).
//   half      each partial result is rounded to half: 2048 + 1 = 2049 is a tie between 2048
//             and 2050 and goes to the even mantissa (2048), so 2048 + 1 + 1 = 2048 (exact:
//             2050); the error 2 is within the sum bound gamma(n-1) * sum|x| = 2 * 2^-11 *
//             2050 / (1 - 2^-10) = 2.004 that the benchmarks' check uses. avg(1, 2, 4) = 7/3
//             -> 1195 * 2^-9 = 2.333984375 (bits 0x40AB).
//   bfloat16  256 + 1 = 257 ties to 256 (8 significant bits), so 256 + 1 + 1 = 256;
//             avg(1, 2, 4) = 7/3 -> 149 * 2^-6 = 2.328125 (bits 0x4015).
//   float     min, max, prod exact; avg(1, 2, 4) is 7.0f / 3.0f (correctly rounded).
//   NaN       min and max of floats (all four widths) skip NaN, as NCCL's fminf / fmaxf and
//             __hmin / __hmax do: min(NaN, 2, 3) = 2 whichever rank holds the NaN, and only an
//             element that is NaN on every rank stays NaN (with std::min's "keep the first
//             operand" rank 0's NaN would win and rank 1's would be dropped).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "compute/backend.h"

namespace carousel::testing {

// One row: inputs[rank][j] and the expected result[j], as raw element bytes of `dtype`.
struct ReductionCase {
  std::string name;
  DType dtype;
  ReduceOp op;
  std::vector<std::vector<char>> inputs;  // 3 ranks
  std::vector<char> expected;
};

template <class T>
std::vector<char> bytes_of(const std::vector<T>& v) {
  std::vector<char> out(v.size() * sizeof(T));
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

template <class T>
ReductionCase reduction_case(std::string name, DType dtype, ReduceOp op,
                             std::vector<std::vector<T>> in, std::vector<T> expected) {
  ReductionCase c{std::move(name), dtype, op, {}, bytes_of(expected)};
  for (const auto& v : in) c.inputs.push_back(bytes_of(v));
  return c;
}

inline std::vector<ReductionCase> reduction_table() {
  using i8 = std::int8_t;
  using u8 = std::uint8_t;
  using i32 = std::int32_t;
  using i64 = std::int64_t;
  using u16 = std::uint16_t;  // half and bfloat16 bits
  constexpr i32 i32_max = std::numeric_limits<i32>::max(),
                i32_min = std::numeric_limits<i32>::min();
  constexpr i64 i64_min = std::numeric_limits<i64>::min();
  constexpr float fnan = std::numeric_limits<float>::quiet_NaN();
  constexpr double dnan = std::numeric_limits<double>::quiet_NaN();
  const DType I8 = DType::I8, U8 = DType::U8, I32 = DType::I32, I64 = DType::I64, F16 = DType::F16,
              BF16 = DType::BF16, F32 = DType::F32, F64 = DType::F64;
  const ReduceOp Sum = ReduceOp::Sum, Prod = ReduceOp::Prod, Min = ReduceOp::Min,
                 Max = ReduceOp::Max, Avg = ReduceOp::Avg;
  return {
      reduction_case<i8>("int8 sum wraps", I8, Sum, {{100, -128}, {100, -1}, {100, 0}}, {44, 127}),
      reduction_case<i8>("int8 prod wraps", I8, Prod, {{-128, -3}, {-1, 5}, {1, 7}}, {-128, -105}),
      reduction_case<i8>("int8 min", I8, Min, {{-5, 7}, {3, -128}, {0, 127}}, {-5, -128}),
      reduction_case<i8>("int8 max", I8, Max, {{-5, 7}, {3, -128}, {0, 127}}, {3, 127}),
      reduction_case<i8>("int8 avg of wrapped sum", I8, Avg, {{100, -7}, {100, 0}, {100, 0}},
                         {14, -2}),
      reduction_case<u8>("uint8 sum wraps", U8, Sum, {{200, 255}, {100, 1}, {1, 0}}, {45, 0}),
      reduction_case<u8>("uint8 prod wraps", U8, Prod, {{16, 3}, {16, 5}, {2, 7}}, {0, 105}),
      reduction_case<u8>("uint8 min", U8, Min, {{200, 0}, {100, 255}, {150, 1}}, {100, 0}),
      reduction_case<u8>("uint8 max", U8, Max, {{200, 0}, {100, 255}, {150, 1}}, {200, 255}),
      reduction_case<u8>("uint8 avg of wrapped sum", U8, Avg, {{255, 1}, {255, 1}, {255, 0}},
                         {84, 0}),
      reduction_case<i32>("int32 sum wraps", I32, Sum, {{i32_max, -5}, {1, -6}, {0, -7}},
                          {i32_min, -18}),
      reduction_case<i32>("int32 prod wraps", I32, Prod, {{65536, -3}, {65536, 4}, {3, 5}},
                          {0, -60}),
      reduction_case<i32>("int32 min", I32, Min, {{-7, i32_max}, {3, 0}, {0, i32_min}},
                          {-7, i32_min}),
      reduction_case<i32>("int32 max", I32, Max, {{-7, i32_max}, {3, 0}, {0, i32_min}},
                          {3, i32_max}),
      reduction_case<i32>("int32 avg truncates toward zero", I32, Avg, {{-7, 7}, {0, 1}, {0, 0}},
                          {-2, 2}),
      reduction_case<i64>("int64 sum", I64, Sum, {{i64(1) << 62, -1}, {i64(1) << 62, -2}, {0, -3}},
                          {i64_min, -6}),
      reduction_case<i64>("int64 prod wraps", I64, Prod,
                          {{i64(1) << 40, 3}, {i64(1) << 30, -4}, {1, 5}}, {0, -60}),
      reduction_case<i64>("int64 min", I64, Min, {{-9, 4}, {8, 5}, {7, 6}}, {-9, 4}),
      reduction_case<i64>("int64 max", I64, Max, {{-9, 4}, {8, 5}, {7, 6}}, {8, 6}),
      reduction_case<i64>("int64 avg", I64, Avg, {{9, -10}, {9, 0}, {10, 0}}, {9, -3}),
      // half bits: 1 = 0x3C00, 2 = 0x4000, 4 = 0x4400, 0.5 = 0x3800, 0.25 = 0x3400,
      // 0.125 = 0x3000, 0.875 = 0x3B00, 2048 = 0x6800, -1 = 0xBC00, -2 = 0xC000, 6 = 0x4600,
      // -4 = 0xC400.
      reduction_case<u16>("half sum rounds every step", F16, Sum,
                          {{0x6800, 0x3800}, {0x3C00, 0x3400}, {0x3C00, 0x3000}}, {0x6800, 0x3B00}),
      reduction_case<u16>("half prod", F16, Prod,
                          {{0xBC00, 0x3800}, {0x4000, 0x4000}, {0x4000, 0x4600}}, {0xC400, 0x4600}),
      reduction_case<u16>("half min", F16, Min,
                          {{0xBC00, 0x3800}, {0x3800, 0x3400}, {0xC000, 0x3000}}, {0xC000, 0x3000}),
      reduction_case<u16>("half max", F16, Max,
                          {{0xBC00, 0x3800}, {0x3800, 0x3400}, {0xC000, 0x3000}}, {0x3800, 0x3800}),
      reduction_case<u16>("half avg rounds 7/3", F16, Avg, {{0x3C00}, {0x4000}, {0x4400}},
                          {0x40AB}),
      // bfloat16 bits: 1 = 0x3F80, 2 = 0x4000, 4 = 0x4080, 256 = 0x4380, -1 = 0xBF80,
      // -4 = 0xC080, 0.5 = 0x3F00.
      reduction_case<u16>("bfloat16 sum rounds every step", BF16, Sum,
                          {{0x4380, 0x3F00}, {0x3F80, 0x3F00}, {0x3F80, 0x3F80}}, {0x4380, 0x4000}),
      reduction_case<u16>("bfloat16 prod", BF16, Prod, {{0xBF80}, {0x4000}, {0x4000}}, {0xC080}),
      reduction_case<u16>("bfloat16 min", BF16, Min, {{0xBF80}, {0x4000}, {0x3F00}}, {0xBF80}),
      reduction_case<u16>("bfloat16 max", BF16, Max, {{0xBF80}, {0x4000}, {0x3F00}}, {0x4000}),
      reduction_case<u16>("bfloat16 avg rounds 7/3", BF16, Avg, {{0x3F80}, {0x4000}, {0x4080}},
                          {0x4015}),
      reduction_case<float>("float prod", F32, Prod, {{1.5f}, {-2.0f}, {0.25f}}, {-0.75f}),
      reduction_case<float>("float min", F32, Min, {{1.5f}, {-2.0f}, {0.25f}}, {-2.0f}),
      reduction_case<float>("float max", F32, Max, {{1.5f}, {-2.0f}, {0.25f}}, {1.5f}),
      reduction_case<float>("float avg", F32, Avg, {{1.0f}, {2.0f}, {4.0f}}, {7.0f / 3.0f}),
      reduction_case<double>("double prod", F64, Prod, {{1.5}, {-2.0}, {0.25}}, {-0.75}),
      reduction_case<double>("double min", F64, Min, {{1.5}, {-2.0}, {0.25}}, {-2.0}),
      reduction_case<double>("double max", F64, Max, {{1.5}, {-2.0}, {0.25}}, {1.5}),
      // NaN in min / max (qNaN bits: float 0x7FC00000, half 0x7E00, bfloat16 0x7FC0).
      reduction_case<float>("float min skips NaN", F32, Min,
                            {{fnan, 1.0f, fnan}, {2.0f, fnan, fnan}, {3.0f, 0.5f, fnan}},
                            {2.0f, 0.5f, fnan}),
      reduction_case<float>("float max skips NaN", F32, Max,
                            {{fnan, 1.0f, fnan}, {2.0f, fnan, fnan}, {3.0f, 0.5f, fnan}},
                            {3.0f, 1.0f, fnan}),
      reduction_case<double>("double min skips NaN", F64, Min,
                             {{dnan, 4.0}, {-1.0, dnan}, {dnan, 5.0}}, {-1.0, 4.0}),
      reduction_case<double>("double max skips NaN", F64, Max,
                             {{dnan, 4.0}, {-1.0, dnan}, {dnan, 5.0}}, {-1.0, 5.0}),
      reduction_case<u16>("half min skips NaN", F16, Min,
                          {{0x7E00, 0x3C00}, {0x4000, 0x7E00}, {0x4400, 0x3800}}, {0x4000, 0x3800}),
      reduction_case<u16>("half max skips NaN", F16, Max,
                          {{0x7E00, 0x3C00}, {0x4000, 0x7E00}, {0x4400, 0x3800}}, {0x4400, 0x3C00}),
      reduction_case<u16>("bfloat16 min skips NaN", BF16, Min, {{0x7FC0}, {0x4000}, {0xBF80}},
                          {0xBF80}),
      reduction_case<u16>("bfloat16 max skips NaN", BF16, Max, {{0x7FC0}, {0x4000}, {0xBF80}},
                          {0x4000}),
  };
}

// Every row of the table through all_reduce and reduce_scatter (each rank's block of the
// reduce_scatter input is the row's input), out of place and in place; results bit for bit.
inline void check_reduction_table(Communicator& comm, Backend& be) {
  ASSERT_EQ(comm.size(), 3) << "the table is worked out for 3 ranks";
  const int r = comm.rank();
  for (const ReductionCase& c : reduction_table()) {
    SCOPED_TRACE(c.name);
    const std::int64_t n = std::int64_t(c.expected.size() / dtype_size(c.dtype));
    const std::vector<char>& in = c.inputs[r];
    for (bool in_place : {false, true}) {
      Tensor send = be.empty({n}, c.dtype);
      be.upload(in.data(), send);
      Tensor recv = in_place ? send : be.zeros({n}, c.dtype);
      comm.all_reduce(send, recv, c.op).wait();
      std::vector<char> got(c.expected.size());
      be.download(recv, got.data());
      EXPECT_EQ(got, c.expected) << "all_reduce " << (in_place ? "in place" : "out of place");

      std::vector<char> three_blocks;
      for (int q = 0; q < 3; ++q) three_blocks.insert(three_blocks.end(), in.begin(), in.end());
      Tensor rs_send = be.empty({3 * n}, c.dtype);
      be.upload(three_blocks.data(), rs_send);
      Tensor rs_recv = in_place ? rs_send.view(r * n, {n}) : be.zeros({n}, c.dtype);
      comm.reduce_scatter(rs_send, rs_recv, c.op).wait();
      be.download(rs_recv, got.data());
      EXPECT_EQ(got, c.expected) << "reduce_scatter " << (in_place ? "in place" : "out of place");
    }
  }
}

}  // namespace carousel::testing
