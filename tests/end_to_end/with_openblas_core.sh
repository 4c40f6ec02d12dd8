#!/usr/bin/env bash
# with_openblas_core.sh CORE PROGRAM [ARGS...] — runs PROGRAM with OpenBLAS forced to use its
# CORE kernels (OPENBLAS_CORETYPE), so the tests of thread-count independence also cover the
# kernels of CPUs that CI may not have (Haswell's and Zen's threaded sgemm rounds differently
# from its single-threaded one). Skips (exit 77) when this CPU cannot run those kernels.
set -euo pipefail
core=$1
shift
for flag in avx2 fma; do
  if ! grep -qw "$flag" /proc/cpuinfo; then
    echo "skipped: this CPU has no $flag, which OpenBLAS's $core kernels need"
    exit 77
  fi
done
OPENBLAS_CORETYPE=$core exec "$@"
