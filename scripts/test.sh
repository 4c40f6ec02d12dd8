#!/usr/bin/env bash
# test.sh — set up, build and run every test: the README's test command and what CI runs.
#   scripts/test.sh                 all tests (cpu; gpu tests skip without a visible GPU)
#   scripts/test.sh -L gpu          extra arguments go to ctest
#   scripts/test.sh --sanitize [ctest args]
#                                   the cpu tests under ASan + UBSan, built in build-asan/
#                                   (docs/reliability.md#sanitizers)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--sanitize" ]; then
  shift
  exec bash scripts/test_sanitize.sh "$@"
fi
bash scripts/setup.sh
bash scripts/build.sh
cd "${BUILD_DIR:-build}"
ctest -j2 --output-on-failure "$@"
