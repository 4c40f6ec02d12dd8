#!/usr/bin/env bash
# perf_table_parser.sh — the collective benchmarks' tables read by nccl_tests_parser.py, a parser
# written from nccl-tests 2.19's output format: every column in its place, the footer lines,
# and algbw, busbw and the average consistent with size and time. Covers every type and op,
# -N, -r all, unchecked (-c 0) and no in-place (sendrecv) rows.
# Usage: perf_table_parser.sh <directory with the *_perf binaries>
set -u
bin=$1
parser=$(dirname "$0")/nccl_tests_parser.py
failures=0
# check <collective> <ranks> <rows> flags...
check() {
  local coll=$1 ranks=$2 rows=$3
  shift 3
  if ! "$bin/${coll}_perf" -g "$ranks" -n 2 -w 1 "$@" | python3 "$parser" "$coll" "$ranks" "$rows"
  then
    echo "FAIL: ${coll}_perf -g $ranks $*"
    failures=$((failures + 1))
  fi
}
check all_reduce 3 320 -b 1K -e 64K -f 4 -d all -o all -N 2      # 4 sizes x 8 x 5 x 2
check all_gather 4 3 -b 1K -e 16K -f 4 -d half -c 0
check reduce_scatter 4 15 -b 1K -e 16K -f 4 -d bfloat16 -o all  # 3 sizes x 5 ops
check broadcast 3 6 -b 1K -e 2K -i 1K -d int8 -r all           # 2 sizes x 3 roots
check sendrecv 2 3 -b 1K -e 16K -f 4 -d int64
[ "$failures" -eq 0 ] && echo "perf table parser: all tables read"
exit "$failures"
