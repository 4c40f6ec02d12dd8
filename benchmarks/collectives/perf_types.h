// perf_types.h — the element types and reduce ops of the collective benchmarks (-d, -o), the
// inputs each rank sends, and the check of what it receives.
//
// Types and ops are nccl-tests' names in nccl-tests' order ("all" runs each): int8, uint8,
// int32, int64, half, float, double, bfloat16 (nccl-tests' uint32 and uint64 are not carousel
// DTypes); sum, prod, max, min, avg. Each name maps to a DType of compute/dtype.h, so every
// type travels through the Communicator as a Tensor.
//
// Inputs are small integers, exactly representable in every type (bfloat16 holds integers up
// to 256 exactly): for sum/avg/min/max, element j of rank r is ((3r + j) mod 11) - 5 in the
// signed types and ((3r + j) mod 11) + 1 in uint8; for prod it is 1 except on rank j mod n,
// which sends 2 + j mod 5, and (signed types, n > 1) rank (j + 1) mod n, which sends -1, so
// every product is exact and every rank's element matters.
//
// The check computes each expected value independently in int64/double arithmetic:
//   integers  exact: sums wrap modulo 2^bits; avg is the wrapped sum / n truncated toward 0;
//   floats    prod, min and max exact (their results are inputs or exact products); sum within
//             gamma(n-1) * sum|x_q| and avg within gamma(n+1) * sum|x_q| / n, where
//             gamma(k) = k u / (1 - k u) bounds k roundings of unit u (2^-24 float, 2^-53
//             double, 2^-11 half, 2^-8 bfloat16) in any summation order (NCCL's rings and the
//             pre-multiplied avg included); gamma is infinite once k u >= 1.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "benchmarks/collectives/perf.h"
#include "compute/backend.h"

namespace carousel::perf {

struct ElementType {
  DType dtype;
  std::string name;  // nccl-tests' name: "half", "bfloat16", "int8", ...
};
struct ReduceChoice {
  ReduceOp op;
  std::string name;  // "sum", "prod", "max", "min", "avg"
};

const std::vector<ElementType>& element_types();  // nccl-tests order
const std::vector<ReduceChoice>& reduce_choices();
// "all" or one name; nullopt for anything else.
std::optional<std::vector<ElementType>> parse_types(const std::string& text);
std::optional<std::vector<ReduceChoice>> parse_ops(const std::string& text);
std::string type_names();  // "int8, uint8, ..., all" for error messages
std::string op_names();

// Element j of `rank`'s send buffer (see the header comment).
double input_value(DType dtype, ReduceOp op, int rank, int ranks, std::int64_t j);
// Uploads input_value(dtype, op, rank, ranks, j) for j in [0, t.numel()) into t.
void fill_inputs(Backend& be, const Tensor& t, ReduceOp op, int rank, int ranks);

// Elements of `recv` that differ from their Source by more than the tolerance.
std::int64_t count_wrong(Backend& be, const Tensor& recv, ReduceOp op, int ranks,
                         const std::function<Source(std::int64_t i)>& source);

// The bound on |result - exact| for a float reduction over `ranks` of inputs whose absolute
// values sum to `abs_sum` (0 for integers, prod, min and max); infinity when it is vacuous.
double tolerance(DType dtype, ReduceOp op, int ranks, double abs_sum);

}  // namespace carousel::perf
