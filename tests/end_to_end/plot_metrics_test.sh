#!/usr/bin/env bash
# plot_metrics_test.sh — scripts/plot_metrics.py on synthetic metrics: a valid PNG of plausible
# size with non-finite values counted; malformed input is one "error:" line and exit status 2.
#   tests/end_to_end/plot_metrics_test.sh SOURCE_DIR WORK_DIR
# Exit 77 (skipped) when no python3 with matplotlib is found (scripts/setup.sh installs it).
set -uo pipefail
src=$1
work=$2
rm -rf "$work" && mkdir -p "$work"
py=
for p in python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null && "$p" -c 'import matplotlib' 2>/dev/null; then py=$p; break; fi
done
if [ -z "$py" ]; then
  echo "SKIP: no python3 with matplotlib (apt-get install python3-matplotlib)"
  exit 77
fi
script="$src/scripts/plot_metrics.py"
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# 60 steps as carousel writes them; two non-finite losses, one infinite grad norm, eval every 20.
"$py" - "$work/metrics.jsonl" <<'PY'
import json, math, sys
with open(sys.argv[1], "w") as f:
    for s in range(60):
        r = {"step": s, "loss": 5.5 * math.exp(-s / 30), "grad_norm": 1.0 / (1 + s), "lr": 1e-3,
             "step_ms": 70.0, "tokens_per_s": 7000 + 10 * s, "gflops": 5.0}
        if s in (20, 21):
            r["loss"] = "NaN"
        if s == 30:
            r["grad_norm"] = "Infinity"
        if s % 20 == 19:
            r["eval_loss"] = 5.0 - s / 30
        f.write(json.dumps(r, sort_keys=True) + "\n")
PY
out=$("$py" "$script" "$work/metrics.jsonl" -o "$work/metrics.png" 2>"$work/err")
rc=$?
[ $rc -eq 0 ] || fail "plot exited $rc: $(cat "$work/err")"
echo "$out"
echo "$out" | grep -q "60 steps, 3 non-finite values" || fail "summary '$out'"
[ -f "$work/metrics.png" ] || fail "no PNG written"
"$py" - "$work/metrics.png" <<'PY' || fail "not a valid PNG of plausible size"
import struct, sys
b = open(sys.argv[1], "rb").read()
assert b[:8] == b"\x89PNG\r\n\x1a\n", "PNG signature"
assert b[12:16] == b"IHDR", "IHDR chunk first"
w, h = struct.unpack(">II", b[16:24])
assert 600 <= w <= 4000 and 400 <= h <= 4000, f"size {w}x{h}"
assert 10_000 < len(b) < 5_000_000, f"{len(b)} bytes"
assert b.rstrip(b"\0").endswith(b"IEND\xaeB`\x82"), "IEND chunk last"
print(f"PNG {w}x{h}, {len(b)} bytes")
PY

# Malformed inputs: one "error:" line naming the file and line, exit status 2.
check_error() {  # name, file content, expected message part
  printf '%b' "$2" >"$work/$1.jsonl"
  "$py" "$script" "$work/$1.jsonl" -o "$work/$1.png" >/dev/null 2>"$work/$1.err"
  local rc=$?
  [ $rc -eq 2 ] || fail "$1: exit status $rc, not 2"
  grep -q "^error: .*$3" "$work/$1.err" || fail "$1: message '$(cat "$work/$1.err")'"
  [ "$(wc -l <"$work/$1.err")" -eq 1 ] || fail "$1: not one line: $(cat "$work/$1.err")"
  [ -f "$work/$1.png" ] && fail "$1: a PNG was written"
}
check_error truncated '{"step": 0, "loss": 1.0}\n{"step": 1, "loss": 0.9' "line 2: not valid JSON"
check_error not_object '{"step": 0, "loss": 1.0}\n[1, 2]\n' "line 2: a record must be a JSON object"
check_error bad_string '{"step": 0, "loss": "nan"}\n' "line 1: 'loss' is \"nan\", not a number"
check_error no_step '{"loss": 1.0}\n' "line 1: the record has no 'step'"
check_error empty '' "holds no metrics records"
# Pathological JSON: nesting past Python's recursion limit, an integer past float's range.
check_error deep "{\"step\": 0, \"loss\": $(printf '[%.0s' $(seq 100000))" "nested too deeply"
check_error huge_int "{\"step\": 0, \"loss\": 1$(printf '0%.0s' $(seq 400))}\n" \
  "'loss' is an integer too large"
# A FIFO as the metrics file: refused before it is opened (the read would block forever).
mkfifo "$work/fifo.jsonl"
timeout 30 "$py" "$script" "$work/fifo.jsonl" -o "$work/fifo.png" >/dev/null 2>"$work/fifo.err"
[ $? -eq 2 ] || fail "fifo: exit status not 2 (124: it hung)"
grep -q "^error: .*is a FIFO (named pipe)" "$work/fifo.err" || fail "fifo: $(cat "$work/fifo.err")"
"$py" "$script" "$work/missing.jsonl" >/dev/null 2>"$work/missing.err"
[ $? -eq 2 ] || fail "missing file: exit status not 2"

[ $fails -eq 0 ] && echo "plot_metrics: all checks passed"
exit $((fails > 0))
