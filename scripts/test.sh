#!/usr/bin/env bash
# test.sh — set up, build and run every test: the README's test command and what CI runs.
#   scripts/test.sh                 all tests (cpu; gpu tests skip without a visible GPU)
#   scripts/test.sh -L gpu          extra arguments go to ctest
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
cd "${BUILD_DIR:-build}"
ctest -j2 --output-on-failure "$@"
