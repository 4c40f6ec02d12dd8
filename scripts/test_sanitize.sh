#!/usr/bin/env bash
# test_sanitize.sh — the cpu tests under AddressSanitizer + UndefinedBehaviorSanitizer; run it as
# `scripts/test.sh --sanitize [ctest args]`. Builds into build-asan/ (or $BUILD_DIR) with
# CAROUSEL_SANITIZE=ON, RelWithDebInfo (line numbers in reports, tests fast enough) and CUDA off
# (nvcc code cannot run under ASan here and would only cost build time). Any ASan error, leak or
# UB report fails the test that hit it; the MPI tests run without leak checking (below).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export BUILD_DIR=${BUILD_DIR:-build-asan}
bash scripts/build.sh -DCAROUSEL_SANITIZE=ON -DCAROUSEL_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo

# detect_leaks: leaks fail the test. abort_on_error: a report is an abort that ctest counts as a
# failure. detect_stack_use_after_return: references to returned locals.
# check_initialization_order / strict_init_order: static-initialisation order across files.
# -fno-sanitize-recover plus halt_on_error: the first UB report ends the test.
# libgomp and OpenBLAS needed no suppression (docs/reliability.md#sanitizers).
asan=abort_on_error=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}
# Tests skip what cannot run under ASan (ulimit -v, allocations beyond ASan's maximum size).
export CAROUSEL_SANITIZED=1

cd "$BUILD_DIR"
status=0
# Every cpu test but the MPI ones, with leak checking (the slow test included: 45 s under ASan).
# Among them the bounded runs of the fuzz targets (tests/fuzz/: fuzz_safetensors, fuzz_token_shard,
# fuzz_config, fuzz_checkpoint, fuzz_tokenizer, fuzz_hf_import: their seeds and a few thousand
# seeded mutants each, docs/reliability.md#fuzzing), so every parser of outside input meets ASan
# and UBSan here; `-R '^fuzz_'` runs only them.
ASAN_OPTIONS=detect_leaks=1:$asan:${ASAN_OPTIONS:-} \
  ctest -j2 --output-on-failure -L cpu -LE multiproc "$@" || status=1
# The MPI tests (label multiproc) without leak checking: Open MPI leaks at MPI_Finalize from
# its plugins (mca_*.so), which it dlclose()s first, so LeakSanitizer prints those frames as
# <unknown module> and no suppression can name them. ASan's memory errors and UBSan still apply.
ASAN_OPTIONS=detect_leaks=0:$asan:${ASAN_OPTIONS:-} \
  ctest -j2 --output-on-failure -L multiproc "$@" || status=1
exit $status
