#!/usr/bin/env bash
# perf_flags.sh — the collective benchmarks' bad flags: each is exit status 2 and one line on
# stderr naming the flag, the value and what is valid; never an abort (134) or an empty table
# with status 0. -d all runs every type. Usage: perf_flags.sh <all_reduce_perf> <all_gather_perf>
set -u
all_reduce=$1
all_gather=$2
failures=0
err=$(mktemp)
out=$(mktemp)
trap 'rm -f "$err" "$out"' EXIT

# expect_error "<words that stderr must contain>" binary flags...
expect_error() {
  local words=$1
  shift
  "$@" -n 1 -w 0 >"$out" 2>"$err"
  local rc=$?
  local lines
  lines=$(wc -l <"$err")
  if [ "$rc" -ne 2 ] || [ "$lines" -ne 1 ] || ! grep -qF -- "$words" "$err"; then
    echo "FAIL: $*: rc $rc (want 2), $lines stderr lines (want 1), want '$words' in:"
    cat "$err"
    failures=$((failures + 1))
  fi
}

expect_error "-d/--datatype 'bfloat16' is not supported; valid: float, double, int32, all" \
  "$all_reduce" -d bfloat16
expect_error "-d/--datatype 'half' is not supported" "$all_reduce" -d half
expect_error "-b/--minbytes '1X' is not a size; valid: bytes as a number with an optional K, M" \
  "$all_reduce" -b 1X
expect_error "-e/--maxbytes '4KB' is not a size" "$all_reduce" -e 4KB
expect_error "-b/--minbytes '-5' is not a size" "$all_reduce" -b -5 -e 1K
expect_error "-b/--minbytes 1G (1073741824 bytes) is larger than -e/--maxbytes 1K (1024 bytes)" \
  "$all_reduce" -b 1G -e 1K
expect_error "no size in this range gives all_gather with 4 ranks one element of type float" \
  "$all_gather" -b 4 -e 8 -g 4
expect_error "-r/--root 7 is not a rank; valid: 0 to 1" "$all_reduce" -r 7
expect_error "-o/--op avg with -d/--datatype int32" "$all_reduce" -d int32 -o avg
expect_error "-J/--output_file '/nonexistent-dir/r.json' cannot be written" \
  "$all_reduce" -b 1K -e 1K -J /nonexistent-dir/r.json
expect_error "--iters: Value 0 not in range" "$all_reduce" -n 0
expect_error "--ngpus: Value abc" "$all_reduce" -g abc

# -d all: one checked row per type.
if "$all_reduce" -d all -b 1K -e 1K -g 2 -n 1 -w 0 >"$out" 2>"$err"; then
  for type in float double int32; do
    grep -qE "^ +1024 +[0-9]+ +$type +sum .* 0 *$" "$out" ||
      { echo "FAIL: -d all: no checked 1024-byte $type row"; cat "$out"; failures=$((failures + 1)); }
  done
else
  echo "FAIL: -d all: rc $?"; cat "$err"; failures=$((failures + 1))
fi

[ "$failures" -eq 0 ] && echo "perf flags: all checks passed"
exit "$failures"
