#!/usr/bin/env bash
# gpu_bundle_test.sh — scripts/gpu_bundle.sh packs what the one-call GPU proof needs: it succeeds,
# the pack fits the device tool's 64 MiB carry with the working tree, the archive holds every
# binary the proof runs and no CUDA library the GPU machine brings itself, the carried CPU oracle
# has every step of both training runs with finite losses, and the cuDNN frontend it was built
# against is named. Packs into WORK_DIR (GPU_BUNDLE_DIR), leaving the tree's .gpu/ alone.
#   tests/end_to_end/gpu/gpu_bundle_test.sh SOURCE_DIR WORK_DIR
# Registered only for builds with CUDA (tests/CMakeLists.txt): without it there is nothing to pack.
set -uo pipefail
src=$1
work=$2
rm -rf "$work"
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

if ! GPU_BUNDLE_DIR="$work" bash "$src/scripts/gpu_bundle.sh" > "$work.log" 2>&1; then
  cat "$work.log" >&2
  echo "FAIL: gpu_bundle.sh failed (above)" >&2
  exit 1
fi
tail -n 3 "$work.log"

bytes=$(du -sb "$work" | cut -f1)
[ "$bytes" -lt $((48 << 20)) ] || fail "the pack is $bytes bytes: leave room in the 64 MiB carry"
grep -q "of 64 MiB" "$work.log" || fail "gpu_bundle.sh did not report the carry's size"

listing=$(tar -tJf "$work/bundle.tar.xz") || fail "bundle.tar.xz does not list"
for b in carousel test_cuda_backend test_pipeline_gpu gpu_op_bench; do
  grep -qx "./bin/$b" <<< "$listing" || fail "bundle.tar.xz lacks bin/$b"
done
if grep -E '/lib(cublas|cublasLt|cudnn|nccl|nvrtc|cudart)[^/]*\.so' <<< "$listing"; then
  fail "bundle.tar.xz packs a CUDA library the GPU machine has (above)"
fi
cmp -s "$work/run.sh" "$src/scripts/gpu_checks.sh" || fail "run.sh is not scripts/gpu_checks.sh"
grep -q "^cuDNN frontend [0-9]" "$work/versions.txt" || fail "versions.txt names no cuDNN frontend"

# The oracle: the GPU runs' keys on device=cpu, every step logged with a finite loss.
for dtype in bf16 f32; do
  f="$work/oracle/metrics_train_cpu_$dtype.jsonl"
  python3 - "$f" <<'PY' || fail "$f"
import json, math, sys
steps = [json.loads(line) for line in open(sys.argv[1])]
losses = [s["loss"] for s in steps if "loss" in s]
assert len(losses) >= 20, f"{len(losses)} steps with a loss, expected the runs' 20"
assert all(isinstance(x, float) and math.isfinite(x) for x in losses), losses
assert losses[-1] < losses[0], f"the loss did not fall: {losses[0]} -> {losses[-1]}"
PY
done

[ $fails -eq 0 ] && echo "PASS: gpu_bundle.sh packed $((bytes >> 20)) MiB"
[ $fails -eq 0 ]
