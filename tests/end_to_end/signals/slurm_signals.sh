#!/usr/bin/env bash
# slurm_signals.sh CAROUSEL SOURCE_DIR WORK_DIR — SIGUSR1, Slurm's warning that a job's time limit
# is near (`#SBATCH --signal=USR1@120`; docs/launch.md has the requeue recipe), stops a run like
# SIGTERM: the step finishes, every rank agrees, a checkpoint is saved, exit status 0, and the
# same command resumes it. Before, SIGUSR1's default action killed the processes (status 138, or
# mpirun's report of a process killed by signal 10) and every step since the last checkpoint was
# lost.
#  1. a threaded run, SIGUSR1 from outside once two steps are logged; resumed to the end, its
#     losses equal an uninterrupted run's bitwise;
#  2. 4 mpirun processes, SIGUSR1 to one of them: every process stops after the same step;
#  3. 4 mpirun processes, SIGUSR1 to mpirun, which forwards it to every process (a batch script
#     whose `trap` passes the signal on to mpirun does this).
set -uo pipefail
carousel=$1 src=$2 work=$3
here=$(cd "$(dirname "$0")/.." && pwd)  # tests/end_to_end: mpirun.sh
rm -rf "$work"
mkdir -p "$work"
common=("$src/configs/demo.yml" "dataset_path=$src/tests/data/tiny_corpus.txt"
        "base_output_directory=$work" log_level=warn)
saved=("${common[@]}" checkpoint_period=1000)  # a checkpoint at the stop only
status=0
fail() { echo "FAIL: $*"; status=1; }

# Waits until run $1 has logged $2 steps (at most 20 s).
wait_for_steps() {
  for _ in $(seq 400); do
    [ "$(cat "$work/$1/metrics.jsonl" 2>/dev/null | wc -l)" -ge "$2" ] && return 0
    sleep 0.05
  done
  return 1
}

# Checks that run $1 (log $2, exit status $3) stopped by SIGUSR1 with a checkpoint.
check_stopped() {
  [ "$3" -eq 0 ] || { fail "$1: exit status $3 (want 0)"; tail -5 "$2"; return; }
  local line
  line=$(grep -o "stopped by SIGUSR1 after step [0-9]* of [0-9]*, checkpoint saved" "$2")
  [ -n "$line" ] || { fail "$1: no 'stopped by SIGUSR1' line"; tail -5 "$2"; return; }
  local step=${line#stopped by SIGUSR1 after step }
  step=${step%% *}
  [ -f "$work/$1/checkpoints/$step/manifest.json" ] || fail "$1: no checkpoint $step"
  echo "$1: $line"
}

# 1. Threads.
"$carousel" train "${common[@]}" steps=40 enable_checkpointing=false run_name=straight \
  >/dev/null 2>&1 || fail "straight run"
"$carousel" train "${saved[@]}" steps=40 run_name=threads >"$work/threads.log" 2>&1 &
pid=$!
wait_for_steps threads 2 || fail "threads: no two steps logged"
kill -USR1 $pid
wait $pid
check_stopped threads "$work/threads.log" $?
grep -q "SIGUSR1 (the scheduler's warning that the time limit is near)" "$work/threads.log" ||
  fail "threads: SIGUSR1 not announced"
"$carousel" train "${saved[@]}" steps=40 run_name=threads >/dev/null 2>&1 || fail "threads: resume"

# 2. and 3. mpirun: the signal to one process, then to mpirun.
for target in process mpirun; do
  run=mpirun_$target
  "$here/mpirun.sh" 4 "$carousel" train "${saved[@]}" steps=60 run_name=$run \
    >"$work/$run.log" 2>&1 &
  job=$!
  wait_for_steps $run 2 || fail "$run: no two steps logged"
  mapfile -t ranks < <(pgrep -P $job)  # mpirun.sh execs mpirun, whose children are the ranks
  [ ${#ranks[@]} -eq 4 ] || fail "$run: found ${#ranks[@]} carousel processes (want 4)"
  if [ $target = process ]; then kill -USR1 "${ranks[2]}"; else kill -USR1 $job; fi
  wait $job
  check_stopped $run "$work/$run.log" $?
done

python3 - "$work" <<'PY' || status=1
import json, sys
work = sys.argv[1]
def losses(run):
    return {r["step"]: r["loss"] for r in map(json.loads, open(f"{work}/{run}/metrics.jsonl"))}
a, b = losses("threads"), losses("straight")
if sorted(a) != list(range(40)) or a != b:
    sys.exit(f"FAIL: the run stopped by SIGUSR1 and resumed differs from the straight one:\n {a}\n {b}")
print("threads: stopped by SIGUSR1, resumed, 40 steps bitwise equal to the straight run")
PY
exit $status
