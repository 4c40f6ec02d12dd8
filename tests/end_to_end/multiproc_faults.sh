#!/usr/bin/env bash
# multiproc_faults.sh CAROUSEL SOURCE_DIR WORK_DIR — faults in a job of 4 MPI processes:
#  1. a rank that stalls past collective_timeout_seconds ends the job with an error (exit code
#     not 0, not a signal) within the stall plus a few seconds, naming the timed-out operation;
#     a rank thread that never comes back ends a threaded run 5 s after the first failure;
#  2. SIGTERM to one process (rank 2, after step 2) stops every process after that step with a
#     checkpoint and exit code 0; the resumed job equals an uninterrupted threaded run bitwise;
#  3. a real SIGTERM sent to a threaded run from outside, at whatever step it is, does the same;
#  4. processes started with different arguments are refused before step 1, naming the ranks;
#  5. the whole job stopped (SIGSTOP to every process) for twice the collective timeout and
#     continued finishes normally: a pause of every process is not a peer falling behind;
#  6. the same for a threaded run;
#  7. device=cuda where no GPU is visible: one error saying so and exit code 2, threaded and as
#     4 mpirun processes (each process exits: mpirun returns);
#  8. devices too small for the run (CAROUSEL_CPU_DEVICE_MEMORY): the job ends (exit code 1..123:
#     not a signal nor the timeout) with the error naming the rank, the tensor and the planner's
#     estimate.
# In every failing job (1, 4, 7, 8) no process announces "stop requested; ... saving a checkpoint":
# Open MPI sends SIGTERM to every process after one calls MPI_Abort, and a process that is failing
# says nothing of it, one that is not (1: the stalled rank) says that mpirun is ending the job.
set -uo pipefail
carousel=$1 src=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work"
mkdir -p "$work"
common=("$src/configs/demo.yml" "dataset_path=$src/tests/data/tiny_corpus.txt"
        "base_output_directory=$work" log_level=warn)
status=0
fail() { echo "FAIL: $*"; status=1; }
no_false_stop() {  # $1: the case, $2: its output
  if grep -q "carousel: stop requested" <<<"$2"; then
    fail "$1: a failing job announced a stop with a checkpoint:"
    grep "carousel: stop requested" <<<"$2"
  fi
}

# 1. Stall.
start=$(date +%s)
out=$(CAROUSEL_FAULT="stall:rank=1,step=1,action=3,seconds=4" "$here/mpirun.sh" 4 "$carousel" train \
      "${common[@]}" steps=3 collective_timeout_seconds=1 enable_checkpointing=false run_name=stall 2>&1)
rc=$?
elapsed=$(( $(date +%s) - start ))
if [ $rc -eq 0 ] || [ $rc -ge 128 ]; then fail "stalled job exit code $rc (want 1..127)"; fi
if [ $elapsed -gt 30 ]; then fail "stalled job took $elapsed s"; fi
if ! grep -Eq "timed out after 1 s|within 1 s" <<<"$out"; then fail "no timeout error:"; echo "$out"; fi
no_false_stop stall "$out"
# The process that aborted is failing and says nothing; the stalled rank (and, on a loaded
# machine, a rank whose own timeout had not fired yet) may say that mpirun ends the job.
[ "$(grep -c "carousel: SIGTERM from mpirun, which is ending the job" <<<"$out")" -le 3 ] ||
  fail "stall: every process said that mpirun ends the job, the failing one too"
echo "stall: exit code $rc after $elapsed s"

# 1b. A rank thread that never comes back (stalled 600 s, far past the 1 s timeout): the process
#     reports every rank and exits with status 2 about 5 s after the first failure, not 600 s.
start=$(date +%s)
out=$(CAROUSEL_FAULT="stall:rank=1,step=1,action=3,seconds=600" "$carousel" train "${common[@]}" \
      steps=3 collective_timeout_seconds=1 enable_checkpointing=false run_name=stuck 2>&1)
rc=$?
elapsed=$(( $(date +%s) - start ))
[ $rc -eq 2 ] || fail "stuck threaded run exit code $rc (want 2)"
[ $elapsed -le 20 ] || fail "stuck threaded run took $elapsed s"
grep -q "rank(s) 1 did not stop within 5 s" <<<"$out" || { fail "no stuck-rank report:"; echo "$out"; }
grep -q "rank 1: in step 1 action 3" <<<"$out" || { fail "no flight recorder line for rank 1:"; echo "$out"; }
# The next stage's rank waits in its forward for the receive from the stalled stage.
grep -Eq "rank 3: in step 1 1F0 waiting for its input \(1RECV_F0\)" <<<"$out" ||
  { fail "no waiting-for-input line for rank 3:"; echo "$out"; }
echo "stuck: exit code $rc after $elapsed s"

# 2. SIGTERM to one process of the job.
"$carousel" train "${common[@]}" steps=5 enable_checkpointing=false run_name=straight || fail "straight run"
CAROUSEL_FAULT="signal:rank=2,step=1" "$here/mpirun.sh" 4 "$carousel" train "${common[@]}" steps=5 \
  run_name=preempted
rc=$?
[ $rc -eq 0 ] || fail "preempted job exit code $rc (want 0)"
[ -f "$work/preempted/checkpoints/2/manifest.json" ] || fail "no checkpoint 2 after SIGTERM"
"$here/mpirun.sh" 4 "$carousel" train "${common[@]}" steps=5 run_name=preempted || fail "resume"

# 3. A real SIGTERM from outside, to a threaded run.
"$carousel" train "${common[@]}" steps=40 checkpoint_period=1000 run_name=killed &
pid=$!
for _ in $(seq 200); do  # until two steps are logged
  [ "$(wc -l < "$work/killed/metrics.jsonl" 2>/dev/null || echo 0)" -ge 2 ] && break
  sleep 0.05
done
kill -TERM $pid
wait $pid
rc=$?
[ $rc -eq 0 ] || fail "SIGTERM'd threaded run exit code $rc (want 0)"
ls "$work/killed/checkpoints" | grep -qx '[0-9]*' || fail "no checkpoint after SIGTERM"
"$carousel" train "${common[@]}" steps=40 checkpoint_period=1000 run_name=killed || fail "resume"
"$carousel" train "${common[@]}" steps=40 enable_checkpointing=false run_name=straight40 || fail "straight 40"

# 4. Processes started with different arguments (MPMD): refused before step 1, naming the ranks.
out=$(mpirun_flags=1 "$here/mpirun.sh" 2 "$carousel" train "${common[@]}" steps=3 run_name=mixed : \
      -np 2 "$carousel" train "${common[@]}" steps=4 run_name=mixed 2>&1)
rc=$?
if [ $rc -eq 0 ] || [ $rc -ge 128 ]; then fail "mixed job exit code $rc (want 1..127)"; fi
grep -q "rank(s) 2, 3 run a different config" <<<"$out" || { fail "no mismatch error:"; echo "$out"; }
no_false_stop mixed "$out"

# 5. The whole job paused: every carousel process of it stopped for 4 s (twice the collective
#    timeout) once two steps are logged, then continued. Before, each process's next wait saw
#    its deadline passed and the job failed with a timeout.
"$here/mpirun.sh" 4 "$carousel" train "${common[@]}" steps=30 collective_timeout_seconds=2 \
  enable_checkpointing=false run_name=paused >"$work/paused.log" 2>&1 &
job=$!
for _ in $(seq 400); do  # until two steps are logged
  [ "$(cat "$work/paused/metrics.jsonl" 2>/dev/null | wc -l)" -ge 2 ] && break
  sleep 0.05
done
mapfile -t ranks < <(pgrep -P $job)  # mpirun.sh execs mpirun, whose children are the ranks
[ ${#ranks[@]} -eq 4 ] || fail "paused job: found ${#ranks[@]} carousel processes (want 4)"
kill -STOP "${ranks[@]}"
sleep 4
kill -CONT "${ranks[@]}"
wait $job
rc=$?
[ $rc -eq 0 ] || { fail "paused job exit code $rc (want 0)"; tail -5 "$work/paused.log"; }
[ "$(wc -l < "$work/paused/metrics.jsonl")" -eq 30 ] || fail "paused job did not log 30 steps"
echo "paused: exit code $rc after a 4 s pause of every process (timeout 2 s)"

# 6. The same pause of a threaded run (ranks as threads of one process): its in-process waits
#    count progress in 100 ms slices too.
"$carousel" train "${common[@]}" steps=30 collective_timeout_seconds=1 enable_checkpointing=false \
  run_name=paused_threads >"$work/paused_threads.log" 2>&1 &
pid=$!
for _ in $(seq 400); do
  [ "$(cat "$work/paused_threads/metrics.jsonl" 2>/dev/null | wc -l)" -ge 2 ] && break
  sleep 0.05
done
kill -STOP $pid
sleep 3
kill -CONT $pid
wait $pid
rc=$?
[ $rc -eq 0 ] || { fail "paused threaded run exit code $rc (want 0)"; tail -5 "$work/paused_threads.log"; }
echo "paused threads: exit code $rc after a 3 s pause (timeout 1 s)"

# 7. device=cuda without a GPU (CUDA_VISIBLE_DEVICES empty hides any the machine has).
for how in threads mpirun; do
  launcher=()
  [ $how = mpirun ] && launcher=("$here/mpirun.sh" 4)
  out=$(CUDA_VISIBLE_DEVICES= timeout 120 "${launcher[@]}" "$carousel" train "${common[@]}" \
        steps=2 device=cuda enable_checkpointing=false run_name=no_gpu_$how 2>&1)
  rc=$?
  [ $rc -eq 2 ] || fail "device=cuda without a GPU ($how): exit code $rc (want 2)"
  grep -q "device=cuda but no GPU is visible to this process; use device=cpu (or auto)" <<<"$out" ||
    { fail "device=cuda without a GPU ($how): no clear error:"; echo "$out"; }
  no_false_stop "device=cuda without a GPU ($how)" "$out"
  echo "device=cuda without a GPU ($how): exit code $rc"
done

# 8. Out of device memory in an mpirun job: 1 MiB devices cannot hold a stage's weights.
out=$(CAROUSEL_CPU_DEVICE_MEMORY=1MiB timeout 120 "$here/mpirun.sh" 4 "$carousel" train \
      "${common[@]}" steps=2 enable_checkpointing=false run_name=oom 2>&1)
rc=$?
if [ $rc -eq 0 ] || [ $rc -ge 124 ]; then fail "out-of-memory job exit code $rc (want 1..123)"; fi
oom="rank [0-3] \(stage rank [01], FSDP rank [01], data rank 0\) is out of device memory: "
oom+="out of memory on cpu:[0-3]: .*limit 1.00 MiB; allocating a float32\[[0-9]+\] tensor\. "
oom+="The planner estimates stage rank [01]'s devices at <= "
grep -Eq "$oom" <<<"$out" ||
  { fail "out-of-memory job: no error naming the rank, tensor and estimate:"; echo "$out"; }
no_false_stop "out-of-memory job" "$out"
echo "out of memory (mpirun): exit code $rc"

python3 - "$work" <<'PY' || status=1
import json, sys
work = sys.argv[1]
def losses(run):
    return {r["step"]: r["loss"] for r in map(json.loads, open(f"{work}/{run}/metrics.jsonl"))}
for stopped, straight, n in (("preempted", "straight", 5), ("killed", "straight40", 40)):
    a, b = losses(stopped), losses(straight)
    if sorted(a) != list(range(n)) or a != b:
        sys.exit(f"FAIL: {stopped} and {straight} differ:\n {a}\n {b}")
    print(f"{stopped}: stopped, resumed, {n} steps bitwise equal to {straight}")
PY
exit $status
