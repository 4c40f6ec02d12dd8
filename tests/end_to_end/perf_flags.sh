#!/usr/bin/env bash
# perf_flags.sh — the collective benchmarks' nccl-tests flags: each one's effect on the table or
# the JSON file (sizes of -i and -f, -m's operation count, -N's repeated sweeps, -d/-o/-r all,
# -t x -g ranks, -a, -z, -p, -C, -c 0, -S, -M, -I, -K, -u), the backend chosen under mpirun, and bad values
# (-y, -R, -x, -D of NCCL features not used here among them): exit status 2 and one line on stderr
# naming the flag, the value and what is valid; never an abort (134) or an empty table with
# status 0. Usage: perf_flags.sh <directory with all_reduce_perf, all_gather_perf, broadcast_perf>
set -u
bin=$1
all_reduce=$bin/all_reduce_perf
all_gather=$bin/all_gather_perf
broadcast=$bin/broadcast_perf
reduce_scatter=$bin/reduce_scatter_perf
failures=0
err=$(mktemp)
out=$(mktemp)
json=$(mktemp)
trap 'rm -f "$err" "$out" "$json"' EXIT

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# expect_error "<words that stderr must contain>" binary flags...
expect_error() {
  local words=$1
  shift
  "$@" -n 1 -w 0 >"$out" 2>"$err"
  local rc=$?
  local lines
  lines=$(wc -l <"$err")
  if [ "$rc" -ne 2 ] || [ "$lines" -ne 1 ] || ! grep -qF -- "$words" "$err"; then
    fail "$*: rc $rc (want 2), $lines stderr lines (want 1), want '$words' in: $(cat "$err")"
  fi
}

# run binary flags...: a quick checked run into $out; fails unless it exits 0.
run() {
  if ! "$@" -n 1 -w 0 >"$out" 2>"$err"; then
    fail "$*: rc $?: $(cat "$err")"
    return 1
  fi
}

# column N of the table rows (lines not starting with '#'), space-separated on one line.
column() { awk -v c="$1" '!/^#/ && NF { printf "%s ", $c }' "$out"; }

expect_column() {  # expect_column N "<values>" description
  local got
  got=$(column "$1")
  [ "$got" = "$2" ] || { fail "$3: column $1 is '$got', want '$2'"; cat "$out"; }
}

# ---- bad values: one line, exit 2 ----
expect_error "-d/--datatype 'fp8' is not supported; valid: int8, uint8, int32, int64, half, float, double, bfloat16, all" \
  "$all_reduce" -d fp8
expect_error "-o/--op 'mulsum' is not supported; valid: sum, prod, max, min, avg, all" \
  "$all_reduce" -o mulsum
expect_error "--run_cycles: Value -3 not in range" "$all_reduce" -N -3
expect_error "-G/--cudagraph 1: CUDA graph launches need GPUs, and --backend local runs on CPU" \
  "$all_reduce" -G 1
expect_error "-i/--stepbytes 0 with -f/--stepfactor 1 never moves from -b to -e" \
  "$all_reduce" -b 1K -e 4K -i 0
expect_error "-f/--stepfactor 'x' is not a whole factor" "$all_reduce" -f x
expect_error "--average: Value 4 not in range" "$all_reduce" -a 4
expect_error "--parallel_init: Value 2 not in range" "$all_reduce" -p 2
expect_error "--blocking: Value 2 not in range" "$all_reduce" -z 2
expect_error "--report_cputime: Value 2 not in range" "$all_reduce" -C 2
expect_error "--agg_iters: Value 0 not in range" "$all_reduce" -m 0
expect_error "--nthreads: Value 0 not in range" "$all_reduce" -t 0
expect_error "-t/--nthreads 64 x -g/--ngpus 32 = 2048 ranks; valid: at most 1024" \
  "$all_reduce" -t 64 -g 32
expect_error "-r/--root 'x' is not a rank; valid: a rank number, or -1 (or all)" "$broadcast" -r x
expect_error "-r/--root 7 is not a rank; valid: 0 to 1, or -1 (or all) for every rank" \
  "$broadcast" -r 7 -g 2
expect_error "-b/--minbytes '1X' is not a size; valid: bytes as a number with an optional K, M" \
  "$all_reduce" -b 1X
expect_error "-e/--maxbytes '4KB' is not a size" "$all_reduce" -e 4KB
expect_error "-b/--minbytes '-5' is not a size" "$all_reduce" -b -5 -e 1K
expect_error "-b/--minbytes 1G (1073741824 bytes) is larger than -e/--maxbytes 1K (1024 bytes)" \
  "$all_reduce" -b 1G -e 1K
expect_error "-b/--minbytes 0 is 0 bytes; the smallest size is one element per rank" \
  "$all_reduce" -b 0 -e 8
# An allocation the machine cannot give (97 TiB a rank) is an error line, not std::terminate.
# Not under the sanitizers (CAROUSEL_SANITIZED): ASan aborts any allocation above its maximum
# size instead of throwing std::bad_alloc.
if [ -z "${CAROUSEL_SANITIZED:-}" ]; then
  expect_error "out of memory allocating the buffers" "$all_gather" -b 100000G -e 100000G
fi
# --backend mpi outside mpirun would measure one rank alone: refused (or, in a build without MPI,
# refused for that).
env -u OMPI_COMM_WORLD_SIZE -u PMI_SIZE -u PMIX_SIZE "$all_reduce" --backend mpi -b 8 -e 8 \
  >"$out" 2>"$err" && fail "--backend mpi without mpirun exited 0"
grep -Eq "this process was not started by mpirun|this build has no MPI communicator" "$err" ||
  fail "--backend mpi without mpirun: $(cat "$err")"
expect_error "no size in this range gives all_gather with 4 ranks one element of type float" \
  "$all_gather" -b 4 -e 8 -g 4
expect_error "-J/--output_file '/nonexistent-dir/r.json' cannot be written" \
  "$all_reduce" -b 1K -e 1K -J /nonexistent-dir/r.json
expect_error "--iters: Value 0 not in range" "$all_reduce" -n 0
expect_error "--ngpus: Value abc" "$all_reduce" -g abc

# ---- each flag's effect ----
# -i: linear sizes b, b+i, ... up to e; -f: multiplied.
run "$all_reduce" -b 1K -e 4K -i 1K -g 2 &&
  expect_column 1 "1024 2048 3072 4096 " "-i 1K" &&
  { grep -q "step: 1024(bytes)" "$out" || fail "-i: header lacks 'step: 1024(bytes)'"; }
run "$all_reduce" -b 1K -e 8K -f 2 -g 2 && expect_column 1 "1024 2048 4096 8192 " "-f 2"
# nccl-tests' stepping: -i (default 1M) unless -f is above 1; -f wins over -i; -f is an integer.
run "$all_reduce" -b 1M -e 4M -g 2 && expect_column 1 "1048576 2097152 3145728 4194304 " "default"
run "$all_reduce" -b 1K -e 8K -i 1K -f 2 -g 2 && expect_column 1 "1024 2048 4096 8192 " "-i -f"
if run "$all_reduce" -b 1K -e 3K -i 1K -f 1.5 -g 2; then
  expect_column 1 "1024 2048 3072 " "-f 1.5 is 1: -i"
  grep -qF "note: -f/--stepfactor '1.5' is read as 1, as nccl-tests reads it" "$err" ||
    fail "-f 1.5: no note on stderr: $(cat "$err")"
fi
# all_gather and reduce_scatter: a rank's piece rounded down to 16 bytes (1000 B of float over 4
# ranks: 62 -> 60 elements, 960 bytes), as nccl-tests does.
run "$all_gather" -b 1000 -e 1000 -g 4 && expect_column 1 "960 " "all_gather -b 1000 -g 4" &&
  expect_column 2 "60 " "all_gather count"
run "$reduce_scatter" -b 1000 -e 1000 -g 4 && expect_column 1 "960 " "reduce_scatter -b 1000"
# -c 3: each row checked three times, nothing wrong.
run "$all_reduce" -c 3 -b 1K -e 1K -g 2 && expect_column 9 "0 " "-c 3"
# -N 0: sweeps until interrupted (here after 2 s: more rows than one sweep has).
timeout 2 "$all_reduce" -N 0 -b 1K -e 1K -g 2 -n 1 -w 0 >"$out" 2>"$err"
[ "$(column 1 | wc -w)" -gt 1 ] || fail "-N 0: want rows until interrupted, got: $(cat "$out")"
# -N 3: the whole sweep three times.
run "$all_reduce" -b 1K -e 2K -f 2 -N 3 -g 2 && expect_column 1 "1024 2048 1024 2048 1024 2048 " "-N 3"
# -m 4 with -n 3: each rank issues 12 timed operations per row (counted by the run loop).
if "$all_reduce" -b 1K -e 1K -g 2 -n 3 -m 4 -w 0 -J "$json" >"$out" 2>"$err"; then
  grep -q '"operations_per_rank": 12' "$json" || fail "-n 3 -m 4: want 12 operations per rank"
  grep -q "agg iters: 4 " "$out" || fail "-m 4: header lacks 'agg iters: 4'"
else
  fail "-m 4: rc $?"
fi
if "$all_reduce" -b 1K -e 1K -g 2 -n 3 -w 0 -J "$json" >"$out" 2>"$err"; then
  grep -q '"operations_per_rank": 3' "$json" || fail "-n 3: want 3 operations per rank"
fi
# -d all: every type in nccl-tests' order, each checked (#wrong 0 out of and in place).
run "$all_reduce" -d all -b 1K -e 1K -g 3 &&
  expect_column 3 "int8 uint8 int32 int64 half float double bfloat16 " "-d all" &&
  expect_column 9 "0 0 0 0 0 0 0 0 " "-d all out-of-place #wrong" &&
  expect_column 13 "0 0 0 0 0 0 0 0 " "-d all in-place #wrong"
# -o all: every op in nccl-tests' order; -d all -o all: 40 checked rows.
run "$all_reduce" -o all -b 1K -e 1K -g 3 && expect_column 4 "sum prod max min avg " "-o all"
run "$all_reduce" -d all -o all -b 256 -e 256 -g 5 &&
  { [ "$(column 3 | wc -w)" -eq 40 ] || fail "-d all -o all: want 40 rows"; } &&
  { grep -q "# Out of bounds values : 0 OK" "$out" || fail "-d all -o all: wrong values"; }
# -r all: every root of a rooted collective; non-rooted ones print -1.
run "$broadcast" -r all -b 1K -e 1K -g 3 && expect_column 5 "0 1 2 " "-r all"
run "$broadcast" -r -1 -b 1K -e 1K -g 3 && expect_column 5 "0 1 2 " "-r -1"
run "$all_reduce" -b 1K -e 1K -g 2 && expect_column 5 "-1 " "all_reduce root"
# -t 2 -g 3: six ranks (threads x devices per thread).
run "$all_reduce" -t 2 -g 3 -b 1K -e 1K &&
  { grep -q "nThread 2 nGpus 3 " "$out" || fail "-t 2 -g 3: header"; } &&
  { [ "$(grep -c '^#  Rank ' "$out")" -eq 6 ] || fail "-t 2 -g 3: want 6 device lines"; }
# -z 1, -p 1: their header lines; -C 1: the time columns are called cputime.
run "$all_reduce" -z 1 -p 1 -C 1 -b 1K -e 1K -g 2 &&
  { grep -q "^# Blocking Enabled: wait for completion and barrier after each collective" "$out" ||
    fail "-z 1: header line"; } &&
  { grep -q "^# Parallel Init Enabled" "$out" || fail "-p 1: header line"; } &&
  { grep -qE "^# +size +count +type +redop +root +cputime +algbw +busbw +#wrong +cputime " "$out" ||
    fail "-C 1: column names"; }
# -a 2 / -a 3: the JSON says which time over ranks the rows report.
for a in "2 min" "3 max" "0 rank0"; do
  set -- $a
  if "$all_reduce" -b 1K -e 1K -g 2 -n 1 -w 0 -a "$1" -J "$json" >"$out" 2>"$err"; then
    grep -q "\"time_over_ranks\": \"$2\"" "$json" || fail "-a $1: JSON lacks time_over_ranks $2"
  else
    fail "-a $1: rc $?"
  fi
done
# -c 0: no check, #wrong is N/A; -G 0 is accepted.
run "$all_reduce" -c 0 -G 0 -b 1K -e 1K -g 2 && expect_column 9 "N/A " "-c 0"

# -S 1: each row ends with its date and time; -M 1: the buffer memory per rank (2 ranks, 4K
# float all_reduce: 4096 send + 4096 receive bytes).
run "$all_reduce" -S 1 -M 1 -b 1K -e 4K -f 2 -g 2 &&
  { [ "$(awk '!/^#/ && NF && $(NF-1) ~ /^20[0-9][0-9]-[01][0-9]-[0-3][0-9]$/ && $NF ~ /^[0-2][0-9]:[0-5][0-9]:[0-5][0-9]$/' "$out" | wc -l)" -eq 3 ] ||
    fail "-S 1: want 3 rows ending in a date and time"; } &&
  { grep -q "^# Memory: 8192 bytes of send and receive buffers per rank" "$out" || fail "-M 1"; }
# -I 1 -K 1 (nccl-tests 2.19.6): 4 more columns per placement (i_min i_max i_p99 i_cv%) and
# "<placement>_per_iter" in the JSON with every iteration's time; min <= p99 <= max over the
# iterations after the first. -u 3: buffers 3 elements off alignment, results still exact.
if "$all_reduce" -I 1 -K 1 -n 5 -w 0 -b 1K -e 1K -g 2 -J "$json" >"$out" 2>"$err"; then
  grep -qE "^# +size +count +type +redop +root +time +algbw +busbw +#wrong +i_min +i_max +i_p99 +i_cv% +time " "$out" ||
    fail "-I 1: column names"
  [ "$(awk '!/^#/ && NF' "$out" | awk '{print NF}')" = "21" ] || fail "-I 1: want 21 columns per row"
  python3 - "$json" <<'PY' || fail "-I 1: JSON per-iteration statistics"
import json, sys
row = json.load(open(sys.argv[1]))["results"][0]
for placement in ("out_of_place", "in_place"):
    it = row[placement + "_per_iter"]
    assert it["skipped_iterations"] == 1 and len(it["times_us"]) == 5, it
    kept = it["times_us"][1:]
    assert it["min_us"] == min(kept) and it["max_us"] == max(kept), it
    assert it["min_us"] <= it["p99_us"] <= it["max_us"], it
PY
else
  fail "-I 1 -K 1: rc $?: $(cat "$err")"
fi
expect_error "-K/--per_iter_skip 2 leaves iterations out of -I's statistics, but -I is 0" "$all_reduce" -K 2
expect_error "-K/--per_iter_skip 1 leaves no iteration of -n/--iters 1 for the statistics" "$all_reduce" -I 1 -K 1
run "$all_reduce" -u 3 -b 1K -e 4K -g 2 -d all &&
  { grep -q "unalign: 3" "$out" || fail "-u 3: preamble"; } &&
  { [ "$(awk '!/^#/ && NF && ($9 != 0 || $13 != 0)' "$out" | wc -l)" -eq 0 ] || { fail "-u 3: wrong elements"; cat "$out"; }; }
# NCCL features carousel's communicators do not use: refused at anything but their defaults.
expect_error "-y/--stream_null 1: --backend local" "$all_reduce" -y 1
expect_error "-R/--local_register 2: --backend local" "$all_reduce" -R 2
expect_error "-x/--cta_policy 1: --backend local" "$all_reduce" -x 1
expect_error "-D/--device_implementation 1 / -V/--device_cta_count 16" "$all_reduce" -D 1
run "$all_reduce" -y 0 -R 0 -b 1K -e 1K -g 2
# Under mpirun the default backend is MPI: one 2-rank benchmark, not two 1-rank ones; an
# explicit --backend local there is refused (each process would measure alone and exit 0).
here=$(cd "$(dirname "$0")" && pwd)
if command -v mpirun >/dev/null; then
  if "$here/mpirun.sh" 2 "$all_reduce" -b 1K -e 1K -n 1 -w 0 >"$out" 2>"$err"; then
    grep -q "backend mpi, 2 ranks (one process each)" "$out" ||
      fail "mpirun -np 2 all_reduce_perf: not one 2-rank MPI benchmark: $(head -3 "$out")"
    [ "$(grep -c "Collective test concluded" "$out")" -eq 1 ] ||
      fail "mpirun -np 2 all_reduce_perf printed $(grep -c "Collective test concluded" "$out") tables"
  else
    fail "mpirun -np 2 all_reduce_perf: rc $?: $(cat "$err")"
  fi
  "$here/mpirun.sh" 2 "$all_reduce" --backend local -n 1 >"$out" 2>"$err" &&
    fail "mpirun -np 2 all_reduce_perf --backend local exited 0"
  grep -q "error: --backend local under mpirun -np 2: each process would run its own benchmark" "$err" ||
    fail "mpirun --backend local: $(cat "$err")"
else
  echo "skip: no mpirun for the backend choice under mpirun"
fi

[ "$failures" -eq 0 ] && echo "perf flags: all checks passed"
exit "$failures"
