#!/usr/bin/env bash
# output_faults.sh — every kind of output of a profiled, checkpointed, TensorBoard-enabled run of
# the real binary (and of `carousel schedule`), with, in turn, a symlink, a FIFO, a directory (a
# regular file where a directory goes) and a device in its place: each is one clear error naming
# it, exit status 2, at once (never a hang: every run is bounded by `timeout`), and the symlink's
# target outside the run directory untouched (docs/reliability.md#files-and-outputs). Then the
# run lock: deleting <run>/.carousel.lock while a run trains does not admit a second run.
#   tests/end_to_end/output_faults.sh CAROUSEL_BINARY WORK_DIR
set -uo pipefail
bin=$1
work=$2
rm -rf "$work" && mkdir -p "$work/outside/dir"
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

target="$work/outside/target.txt"  # what a symlinked file output points at
target_dir="$work/outside/dir"     # what a symlinked directory output points at
printf "another user's file\n" >"$target"
# A device node in the run directory needs CAP_MKNOD (root in most containers); /dev/full as
# metrics_file (a path the user chooses) is tried everywhere.
devices=no
mknod "$work/probe_device" c 1 7 2>/dev/null && devices=yes
rm -f "$work/probe_device"
[ $devices = yes ] || echo "skip: no mknod here; devices are tried as metrics_file=/dev/full only"

train=("$bin" train steps=3 base_num_decoder_layers=2 max_target_length=16 per_device_batch_size=2
  base_output_directory="$work" enable_tensorboard=true profiler_steps=1
  skip_first_n_steps_for_profiler=0 checkpoint_period=1 progress_bar=never)
schedule=("$bin" schedule ici_pipeline_parallelism=2 base_output_directory="$work")

# plant FAULT PATH DIRECTORY_KIND: puts the fault where the output goes.
plant() {
  mkdir -p "$(dirname "$2")"
  case $1 in
    symlink) if [ "$3" = dir ]; then ln -s "$target_dir" "$2"; else ln -s "$target" "$2"; fi ;;
    fifo) mkfifo "$2" ;;
    directory) mkdir "$2" ;;
    file) echo "not a directory" >"$2" ;;
    device) mknod "$2" c 1 7 ;;  # /dev/full's numbers: every write fails
  esac
}

# The words the error uses for each fault.
words() {
  case $1 in
    symlink) echo "is a symlink (to '" ;;
    fifo) echo "is a FIFO (named pipe)" ;;
    directory) echo "is a directory" ;;
    file) echo "is a regular file\|exists but is not a directory" ;;
    device) echo "is a character device" ;;
  esac
}

# check NAME FAULT OUT RC: exit 2 (124 = it hung), one error line with the fault's words, the
# symlink's target untouched.
check() {
  local name=$1 fault=$2 out=$3 rc=$4
  [ "$rc" -eq 2 ] || fail "$name: exit status $rc, not 2 (124: it hung): $(tail -n 3 "$out")"
  [ "$(grep -c '\] \[error\] ' "$out")" -eq 1 ] || fail "$name: not one error line: $(tail -n 5 "$out")"
  grep '\] \[error\] ' "$out" | grep -q "$(words "$fault")" ||
    fail "$name: the error does not say '$(words "$fault")': $(grep '\] \[error\] ' "$out")"
  [ "$(cat "$target")" = "another user's file" ] || fail "$name: the symlink's target was written"
  [ -z "$(ls -A "$target_dir")" ] || fail "$name: files appeared in the symlinked directory"
}

case_no=0
# try KIND_OF_OUTPUT(file|dir) RELATIVE_PATH FAULT COMMAND...: a fresh run directory with the
# fault at RELATIVE_PATH, then the command on it.
try() {
  local kind=$1 rel=$2 fault=$3
  shift 3
  case_no=$((case_no + 1))
  local name="case$case_no"
  plant "$fault" "$work/$name/$rel" "$kind"
  timeout 120 "$@" run_name="$name" >"$work/$name.out" 2>&1
  check "$rel as a $fault ($name)" "$fault" "$work/$name.out" $?
}

faults_for_files=(symlink fifo directory)
faults_for_dirs=(symlink fifo file)
if [ $devices = yes ]; then
  faults_for_files+=(device)
  faults_for_dirs+=(device)
fi
for rel in .carousel.lock logs/rank0.log metrics.jsonl trace.json schedule_costs.yml op_times.json; do
  for fault in "${faults_for_files[@]}"; do try file "$rel" "$fault" "${train[@]}"; done
done
for rel in logs tensorboard checkpoints; do
  for fault in "${faults_for_dirs[@]}"; do try dir "$rel" "$fault" "${train[@]}"; done
done
for rel in schedule.trace.json schedule.svg schedule.txt; do
  for fault in "${faults_for_files[@]}"; do try file "$rel" "$fault" "${schedule[@]}"; done
done

# /dev/full as metrics_file: refused as a device before step 1, not a run that fails each write.
timeout 120 "${train[@]}" run_name=dev_full metrics_file=/dev/full >"$work/dev_full.out" 2>&1
check "metrics_file=/dev/full" device "$work/dev_full.out" $?

# A FIFO put at trace.json after the run started (past the check before step 1): the profiler's
# writer refuses it at the end, after the checkpoint, instead of blocking there for ever (before:
# deaf to SIGTERM too).
"${train[@]}" steps=1000 checkpoint_period=0 run_name=late_fifo >"$work/late_fifo.out" 2>&1 &
late=$!
for _ in $(seq 300); do
  [ -s "$work/late_fifo/metrics.jsonl" ] && break
  sleep 0.1
done
mkfifo "$work/late_fifo/trace.json"
if kill -0 $late 2>/dev/null; then
  for _ in $(seq 1200); do kill -0 $late 2>/dev/null || break; sleep 0.1; done  # at most 120 s
  if kill -0 $late 2>/dev/null; then
    kill -9 $late
    fail "a FIFO at trace.json put there mid-run: the run hung at its end"
  fi
  wait $late
  check "trace.json as a FIFO put there mid-run" fifo "$work/late_fifo.out" $?
  [ -d "$work/late_fifo/checkpoints/1000" ] || fail "late FIFO: the final checkpoint is missing"
else
  echo "skip: the run ended before the FIFO was put in place"
fi

# The control: the same run with nothing in the way trains, profiles, saves and writes events.
timeout 120 "${train[@]}" run_name=clean >"$work/clean.out" 2>&1 ||
  fail "the clean run exited $?: $(tail -n 3 "$work/clean.out")"
for f in trace.json schedule_costs.yml op_times.json metrics.jsonl logs/rank0.log checkpoints/3; do
  [ -e "$work/clean/$f" ] || fail "the clean run wrote no $f"
done
ls "$work/clean/tensorboard/"events.out.tfevents.* >/dev/null 2>&1 || fail "no event file"

# The lock holds when its dotfile is deleted mid-run: a second run on the directory is refused
# (before: it started, and both trained into the same metrics file and checkpoints).
locked=("$bin" train base_num_decoder_layers=2 max_target_length=16 per_device_batch_size=2
  base_output_directory="$work" run_name=locked enable_checkpointing=false)
"${locked[@]}" steps=1000000 >"$work/locked_first.out" 2>&1 &
first=$!
for _ in $(seq 300); do
  grep -q "pid $first" "$work/locked/.carousel.lock" 2>/dev/null && break
  sleep 0.1
done
rm -f "$work/locked/.carousel.lock"
timeout 60 "${locked[@]}" steps=1 >"$work/locked_second.out" 2>&1
rc=$?
kill -9 $first 2>/dev/null
wait $first 2>/dev/null
[ $rc -eq 2 ] || fail "a second run after the lock file was deleted exited $rc, not 2"
grep -q "is in use by another run" "$work/locked_second.out" ||
  fail "no lock error: $(tail -n 3 "$work/locked_second.out")"

echo "$case_no fault cases, $fails failures"
[ $fails -eq 0 ]
