#!/usr/bin/env bash
# test_sanitize.sh — the cpu tests under AddressSanitizer + UndefinedBehaviorSanitizer; run it as
# `scripts/test.sh --sanitize [ctest args]`. Builds into build-asan/ (or $BUILD_DIR) with
# CAROUSEL_SANITIZE=ON, RelWithDebInfo (line numbers in reports, tests fast enough) and CUDA off
# (nvcc code cannot run under ASan here and would only cost build time). Any ASan error, leak or
# UB report fails the test that hit it. What is excluded and why: docs/reliability.md#sanitizers.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
bash scripts/setup.sh
export BUILD_DIR=${BUILD_DIR:-build-asan}
bash scripts/build.sh -DCAROUSEL_SANITIZE=ON -DCAROUSEL_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo

# detect_leaks: leaks fail the test. LSan suppressions (tests/sanitizers/lsan.supp) name only
# third-party libraries, each with its reason. abort_on_error: a core-style abort that ctest
# reports as a failure. detect_stack_use_after_return catches returned references to locals.
# check_initialization_order / strict_init_order: static-init-order bugs across files.
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1:${ASAN_OPTIONS:-}
export LSAN_OPTIONS=suppressions=$root/tests/sanitizers/lsan.supp:print_suppressions=0:${LSAN_OPTIONS:-}
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}

cd "$BUILD_DIR"
# slow: test_training_slow trains to convergence; under ASan it exceeds its 300 s timeout.
ctest -j2 --output-on-failure -L cpu -LE slow "$@"
