// test_op_errors.cpp — bad calls fail with one message naming the op, the argument and the
// shapes involved, and never touch memory out of bounds.
#include <gtest/gtest.h>

#include "compute/cpu_backend.h"
#include "compute/dispatch.h"
#include "tests/support/test_util.h"

namespace carousel {
namespace {

// Runs fn, expects carousel::Error, and checks the message contains every fragment.
template <class Fn>
void expect_error(Fn&& fn, const std::vector<std::string>& fragments) {
  try {
    fn();
    ADD_FAILURE() << "expected carousel::Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& f : fragments) {
      EXPECT_NE(msg.find(f), std::string::npos) << "missing '" << f << "' in: " << msg;
    }
  }
}

TEST(OpErrors, RmsnormWeightShapeNamesOpArgumentAndBothShapes) {
  CpuBackend be;
  Tensor x = be.zeros({3, 64}), w = be.zeros({65}), out = be.empty({3, 64}), r = be.empty({3});
  expect_error([&] { be.rmsnorm_forward(x, w, 1e-5, out, r); },
               {"rmsnorm_forward", "'weight'", "[65]", "[64]", "[3,64]"});
}

TEST(OpErrors, GemmInnerDimensionMismatch) {
  CpuBackend be;
  Tensor a = be.zeros({4, 5}), b = be.zeros({6, 7}), c = be.zeros({4, 7});
  expect_error([&] { be.gemm(false, false, 1, a, b, 0, c); },
               {"gemm", "inner dimensions differ", "[4,5]", "[6,7]"});
  Tensor b2 = be.zeros({5, 7}), c2 = be.zeros({4, 8});
  expect_error([&] { be.gemm(false, false, 1, a, b2, 0, c2); }, {"gemm", "'c'", "[4,8]", "[4,7]"});
}

TEST(OpErrors, DtypeMismatchNamesBothDtypes) {
  CpuBackend be;
  Tensor a = be.zeros({3}), b = be.zeros({3}, DType::F64), out = be.empty({3});
  expect_error([&] { be.add(a, b, out); }, {"add", "'b'", "float64", "float32", "'a'"});
}

TEST(OpErrors, Bfloat16IsRejectedWhereItHasNoMeaning) {
  CpuBackend be;
  Tensor x = be.zeros({4}, DType::BF16), y = be.zeros({4}, DType::BF16);
  expect_error([&] { be.adamw_update(x, y, y, y, AdamWParams{}); },
               {"adamw_update", "'param'", "bfloat16", "parameters and moments stay float32"});
  Tensor a = be.zeros({2, 3}, DType::BF16), b = be.zeros({3, 2}, DType::BF16);
  Tensor c64 = be.zeros({2, 2}, DType::F64);
  expect_error([&] { be.gemm(false, false, 1.0, a, b, 0.0, c64); },
               {"gemm", "bfloat16 inputs accumulate into float32 or bfloat16, not float64"});
  Tensor tokens = be.zeros({4}, DType::I32);
  expect_error([&] { be.cast(tokens, x); }, {"cast", "'src'", "int32", "not a floating dtype"});
  expect_error([&] { be.cast(be.zeros({5}), x); }, {"cast", "'dst'", "[4]", "[5]"});
}

TEST(OpErrors, CommunicatorOnlyDtypesAreStoredButNotComputedIn) {
  CpuBackend be;
  for (DType d : {DType::F16, DType::I8, DType::U8, DType::I64}) {
    const std::string name(dtype_name(d));
    Tensor t = be.zeros({4}, d);  // zeros, upload, download and copy work
    EXPECT_EQ(t.nbytes(), 4 * dtype_size(d));
    std::vector<char> bytes(t.nbytes(), 0);
    be.download(t, bytes.data());
    EXPECT_EQ(bytes, std::vector<char>(t.nbytes(), 0)) << name;
    expect_error([&] { be.fill(t, 1.0); }, {"fill", "'x'", name, "not a floating dtype"});
    expect_error([&] { be.cast(t, be.zeros({4})); }, {"cast", "'src'", name});
    expect_error([&] { be.sum(t); }, {"sum", "'x'", name, "runs in float32 or float64"});
  }
}

TEST(OpErrors, AttentionHeadsMustDivide) {
  CpuBackend be;
  Tensor q = be.zeros({1, 4, 3, 8}), k = be.zeros({1, 4, 2, 8}), o = be.empty({1, 4, 3, 8}),
         lse = be.empty({1, 3, 4});
  expect_error([&] { be.attention_forward(q, k, k, o, lse); },
               {"attention_forward", "multiple of kv heads", "[1,4,3,8]", "[1,4,2,8]"});
  // Keys may be longer than the queries (a context-parallel chunk), never shorter.
  Tensor short_k = be.zeros({1, 3, 3, 8});
  expect_error([&] { be.attention_forward(q, short_k, short_k, o, lse); },
               {"attention_forward", "at least its seq", "[1,3,3,8]", "[1,4,3,8]"});
}

TEST(OpErrors, TokenOutsideVocabularyIsRejectedBeforeAnyRead) {
  CpuBackend be;
  Tensor table = be.zeros({11, 4}), out = be.empty({3, 4});
  Tensor tokens = be.from_host(std::vector<std::int32_t>{0, 11, 3}, {3});
  expect_error([&] { be.embedding_forward(table, tokens, out); },
               {"embedding_forward", "token 11 at position 1", "[0, 11)"});
  Tensor neg = be.from_host(std::vector<std::int32_t>{-1}, {1});
  Tensor logits = be.zeros({1, 5}), losses = be.empty({1});
  expect_error([&] { be.cross_entropy_forward(logits, neg, losses); },
               {"cross_entropy_forward", "target -1", "[0, 5)"});
}

TEST(OpErrors, TensorFromAnotherDeviceIsRejected) {
  CpuBackend dev0(0), dev1(1);
  Tensor x = dev1.zeros({2});
  expect_error([&] { dev0.scale(x, 2.0); }, {"scale", "'x'", "lives on cpu:1", "runs on cpu:0"});
}

TEST(OpErrors, TokensMustBeInt32) {
  CpuBackend be;
  Tensor table = be.zeros({11, 4}), out = be.empty({3, 4}), tokens = be.zeros({3});
  expect_error([&] { be.embedding_forward(table, tokens, out); },
               {"embedding_forward", "'tokens'", "int32"});
}

TEST(OpErrors, RopeNeedsMatchingTables) {
  CpuBackend be;
  Tensor x = be.zeros({1, 5, 2, 8});
  auto tables = make_rope_tables(be, 4, 8, 10000.0);  // 4 positions for a 5-token sequence
  expect_error([&] { be.rope_forward(x, tables.cos, tables.sin, x); },
               {"rope_forward", "'cos'", "[4,4]", "[5,4]"});
}

// The check macros of compute/error.h: a user error keeps its message clean and its file:line
// apart; an internal error and a library error name file:line in the message.
TEST(CheckMacros, CheckKeepsMessageAndRecordsWhere) {
  try {
    CAROUSEL_CHECK(1 + 1 == 3, "arithmetic is {}", "off");
    ADD_FAILURE() << "expected carousel::Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "arithmetic is off");
    EXPECT_EQ(e.where().rfind("tests/compute/test_op_errors.cpp:", 0), 0u) << e.where();
  }
  EXPECT_EQ(Error("plain").where(), "");
}

TEST(CheckMacros, AssertNamesInternalErrorAndFileLine) {
  const int line = __LINE__ + 2;
  try {
    CAROUSEL_ASSERT(false, "invariant {} broken", 7);
    ADD_FAILURE() << "expected carousel::Error";
  } catch (const Error& e) {
    EXPECT_EQ(
        std::string(e.what()),
        fmt::format("internal error at tests/compute/test_op_errors.cpp:{}: invariant 7 broken",
                    line));
  }
}

TEST(CheckMacros, LibraryErrorNamesLibraryStatementFileLineAndMessage) {
  expect_error([] { detail::library_error("FAKE", "fake_call(1)", __FILE__, 12, 3, "no luck"); },
               {"FAKE error 3 (no luck) in 'fake_call(1)' at tests/compute/test_op_errors.cpp:12"});
  expect_error([] { detail::library_error("FAKE", "f()", __FILE__, 1, 3, "bad", "FAKE_BAD", 2); },
               {"FAKE error FAKE_BAD (bad) in 'f()'", "on device 2"});
}

TEST(Dispatch, CallsWithTheTypeAndNamesOpAndDtypeOtherwise) {
  DType seen = DType::I32;
  dispatch(StorageTypes{}, "cast", DType::BF16,
           [&](auto tag) { seen = dtype_of<decltype(tag)>(); });
  EXPECT_EQ(seen, DType::BF16);
  expect_error(
      [] { dispatch(FloatTypes{}, "scale", DType::BF16, [](auto) {}); },
      {"internal error: scale has no bfloat16 implementation (it handles float32, float64)"});
}

}  // namespace
}  // namespace carousel
