#!/usr/bin/env bash
# tensorboard_test.sh — the trainer's TensorBoard event files read back by an independent parser
# (TFRecord framing, CRC-32C computed bit by bit, protobuf fields) and by the `tensorboard`
# package's own loader (what the dashboard reads): every scalar equals its metrics.jsonl value
# (float32 rounding), at its step and wall time; a resume adds a file; enable_tensorboard=false
# writes none.
#   tests/end_to_end/tensorboard_test.sh SOURCE_DIR CAROUSEL_BINARY WORK_DIR
# Exit 77 (skipped) when SOURCE_DIR/.venv has no `tensorboard` (scripts/setup.sh installs it).
set -uo pipefail
src=$1
bin=$2
work=$3
rm -rf "$work" && mkdir -p "$work"
py="$src/.venv/bin/python"
if ! "$py" -c 'import tensorboard' 2>/dev/null; then
  echo "SKIP: $py with the tensorboard package not found (run scripts/setup.sh)"
  exit 77
fi
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
run() {  # STEPS [KEY=VALUE...]
  local steps=$1
  shift
  "$bin" train model_name=tiny steps="$steps" eval_interval=2 eval_steps=1 checkpoint_period=2 \
    base_output_directory="$work" run_name=tb progress_bar=never log_level=warn "$@" \
    >>"$work/train.log" 2>&1 || fail "carousel train steps=$steps $* exited $?: $(tail -3 "$work/train.log")"
}
run 3
run 5  # resumes at 3: a second event file

"$py" - "$work/tb" <<'PY' || fail "the event files do not hold the metrics"
import glob, json, math, os, struct, sys
run = sys.argv[1]
files = sorted(glob.glob(f"{run}/tensorboard/events.out.tfevents.*.carousel"))
assert len(files) == 2, f"one event file per process start, got {files}"

def crc32c(data):  # bit by bit, polynomial 0x82F63B78 reflected: not the writer's table
    c = 0xFFFFFFFF
    for b in data:
        c ^= b
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
    return c ^ 0xFFFFFFFF

def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF

def varint(b, i):
    v = s = 0
    while True:
        v |= (b[i] & 0x7F) << s
        s += 7
        i += 1
        if b[i - 1] < 0x80:
            return v, i

def fields(b):  # protobuf message -> [(field, wire type, value)]
    i, out = 0, []
    while i < len(b):
        key, i = varint(b, i)
        f, w = key >> 3, key & 7
        if w == 0:
            v, i = varint(b, i)
        elif w == 1:
            v, i = struct.unpack_from("<d", b, i)[0], i + 8
        elif w == 5:
            v, i = struct.unpack_from("<f", b, i)[0], i + 4
        elif w == 2:
            n, i = varint(b, i)
            v, i = b[i:i + n], i + n
        else:
            raise AssertionError(f"wire type {w}")
        out.append((f, w, v))
    return out

mine = {}  # (tag, step) -> (value, wall time), from our parser
for path in files:
    data = open(path, "rb").read()
    i, first = 0, True
    while i < len(data):
        head = data[i:i + 8]
        (n,) = struct.unpack("<Q", head)
        assert struct.unpack_from("<I", data, i + 8)[0] == masked(head), "length crc"
        body = data[i + 12:i + 12 + n]
        assert struct.unpack_from("<I", data, i + 12 + n)[0] == masked(body), "data crc"
        i += 16 + n
        ev = {f: v for f, _, v in fields(body)}
        if first:
            assert ev[3] == b"brain.Event:2", ev
            first = False
            continue
        if 7 in ev:  # a resumed run's SessionLog START (status 1) at its first step
            assert fields(ev[7]) == [(1, 0, 1)] and ev[2] == 3, ev
            continue
        (value,) = [v for f, _, v in fields(ev[5])]
        vf = {f: v for f, _, v in fields(value)}
        mine[(vf[1].decode(), ev[2])] = (vf[2], ev[1])

records = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
assert [r["step"] for r in records] == list(range(5)), [r["step"] for r in records]
f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
names = {"learning/loss": "loss", "learning/grad_norm": "grad_norm",
         "learning/current_learning_rate": "lr", "perf/tokens_per_second": "tokens_per_s",
         "eval/avg_loss": "eval_loss"}
expected = 0
for r in records:
    for tag, key in names.items():
        if key not in r:
            continue
        expected += 1
        value, wall = mine[(tag, r["step"])]
        assert value == f32(r[key]), (tag, r["step"], value, r[key])
        assert wall == r["time"], (tag, wall, r["time"])
    step_s = mine[("perf/step_time_seconds", r["step"])][0]
    assert math.isclose(step_s, r["step_ms"] / 1e3, rel_tol=1e-6), (step_s, r["step_ms"])
evals = sum(1 for r in records if "eval_loss" in r)
assert evals >= 2 and sum(1 for t, _ in mine if t == "eval/avg_loss") == evals, "eval scalars"

# The tensorboard package's loader, as the dashboard reads the directory.
from tensorboard.backend.event_processing import event_accumulator
acc = event_accumulator.EventAccumulator(f"{run}/tensorboard")
acc.Reload()
loss = acc.Scalars("learning/loss")
assert [e.step for e in loss] == list(range(5)), [e.step for e in loss]
assert [e.value for e in loss] == [f32(r["loss"]) for r in records]
assert [e.wall_time for e in loss] == [r["time"] for r in records]
assert set(acc.Tags()["scalars"]) >= set(names), acc.Tags()["scalars"]
print(f"tensorboard ok: {len(files)} files, {len(mine)} scalars, {expected} compared with metrics.jsonl")
PY

# A crash before checkpoint 4 completes, then a resume from checkpoint 2: steps 2 and 3 ran
# twice, but the resumed file's SessionLog START at step 2 makes TensorBoard keep only the
# resumed run's (each step once, its losses those of metrics.jsonl's last records).
CAROUSEL_FAULT="kill:point=begin,step=4" "$bin" train model_name=tiny steps=6 checkpoint_period=2 \
  async_checkpointing=false base_output_directory="$work" run_name=crash progress_bar=never \
  log_level=warn >>"$work/train.log" 2>&1 && fail "the killed run exited 0"
sleep 1  # event files are ordered by the second in their names
"$bin" train model_name=tiny steps=6 checkpoint_period=2 base_output_directory="$work" \
  run_name=crash progress_bar=never log_level=warn >>"$work/train.log" 2>&1 ||
  fail "the resumed run exited $?"
"$py" - "$work/crash" <<'PY' || fail "a resumed run's repeated steps are shown twice"
import json, struct, sys
from tensorboard.backend.event_processing import event_accumulator
run = sys.argv[1]
acc = event_accumulator.EventAccumulator(f"{run}/tensorboard")
acc.Reload()
steps = [e.step for e in acc.Scalars("learning/loss")]
assert steps == list(range(6)), steps
last = {}
for line in open(f"{run}/metrics.jsonl"):
    r = json.loads(line)
    last[r["step"]] = r["loss"]
f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
assert [e.value for e in acc.Scalars("learning/loss")] == [f32(last[s]) for s in range(6)]
print("resume: steps", steps, "each once")
PY

"$bin" train model_name=tiny steps=1 base_output_directory="$work" run_name=off \
  enable_tensorboard=false progress_bar=never log_level=warn >>"$work/train.log" 2>&1 ||
  fail "enable_tensorboard=false run failed"
[ ! -e "$work/off/tensorboard" ] || fail "enable_tensorboard=false wrote $work/off/tensorboard"

echo "tensorboard: $fails failure(s)"
[ $fails -eq 0 ]
