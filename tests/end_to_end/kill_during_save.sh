#!/usr/bin/env bash
# kill_during_save.sh CAROUSEL SOURCE_DIR WORK_DIR — a crash (SIGKILL) at each point of saving
# a checkpoint never loses the run: the next start resumes from the newest complete checkpoint
# and the run ends with bitwise the losses of a run that was never killed.
set -uo pipefail
carousel=$1 src=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
common=("$src/configs/demo.yml" "dataset_path=$src/tests/data/tiny_corpus.txt"
        "base_output_directory=$work" log_level=error steps=4 checkpoint_period=1)
status=0
"$carousel" train "${common[@]}" enable_checkpointing=false run_name=straight || status=1
for point in begin model manifest renamed; do
  CAROUSEL_FAULT="kill:point=$point,step=2" "$carousel" train "${common[@]}" run_name=$point
  rc=$?
  if [ $rc -ne 137 ]; then echo "FAIL: kill at '$point' exit code $rc (want 137, SIGKILL)"; status=1; fi
  "$carousel" train "${common[@]}" run_name=$point || { echo "FAIL: resume after '$point'"; status=1; }
done
python3 - "$work" <<'PY' || status=1
import json, sys
work = sys.argv[1]
def losses(run):  # the last record of each step (a killed step may be logged twice)
    return {r["step"]: r["loss"] for r in map(json.loads, open(f"{work}/{run}/metrics.jsonl"))}
straight = losses("straight")
for point in ("begin", "model", "manifest", "renamed"):
    got = losses(point)
    if got != straight:
        sys.exit(f"FAIL: killed at {point}: {got} != {straight}")
    print(f"killed while saving checkpoint 2 at '{point}': resumed, 4 steps bitwise equal")
PY
exit $status
