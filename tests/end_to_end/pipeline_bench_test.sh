#!/usr/bin/env bash
# pipeline_bench_test.sh PIPELINE_BENCH SOURCE_DIR WORK_DIR — the pipeline benchmark's grid and
# outputs (no timing is asserted: figures belong in docs/performance.md): one row per
# configuration of the grid (one device runs only its one program), the traced figures present
# and sane (a span, bubbles in [0, 1), the prediction calibrated), gathers only with FSDP, the
# renderer's table with the same rows and its count of issue 14's targets; bad flags are one
# error line and exit status 2.
set -uo pipefail
bench=$1 src=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

"$bench" --schedules 1f1b,zb_h1 --stages 1,2 --factors 1,2 --weight-modes none,bsw --steps 4 \
  --json "$work/bench.json" -- base_num_decoder_layers=4 max_target_length=16 >"$work/table.txt" ||
  fail "pipeline_bench exited $?"
cat "$work/table.txt"
python3 - "$work/bench.json" <<'PY' || fail "bench.json"
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
grid = {(s, sched, m, mode) for s in (1, 2) for sched in ("1f1b", "zb_h1") for m in (1, 2)
        for mode in ("none", "bsw") if s == 2 or sched == "1f1b"}
got = {(r["S"], r["schedule"], r["M"] // r["S"], r["weight_mode"]) for r in rows}
assert got == grid and len(rows) == len(grid), (sorted(got), sorted(grid))
for r in rows:
    assert r["measured_span_ms"] > 0 and r["predicted_span_ms"] > 0, r
    for bubble in ("measured_bubble", "predicted_bubble", "spread_bubble", "replayed_bubble"):
        assert 0 <= r[bubble] < 1, (bubble, r)
    assert (r["all_gathers_per_step"] > 0) == (r["F"] > 1), r
    if r["S"] == 1 and r["F"] == 1:
        assert r["predicted_bubble"] == 0, r   # one device: nothing to wait for
PY
n=$(python3 "$src/scripts/render_pipeline_bench.py" "$work/bench.json" | grep -c '^| \(1f1b\|zb_h1\) ')
[ "$n" -eq 12 ] || fail "the rendered table has $n rows, not 12"
# The line under the table counts issue 14's targets over the pipelined rows with a core each.
python3 - "$work/bench.json" "$src/scripts/render_pipeline_bench.py" <<'PY' || fail "summary line"
import json, subprocess, sys
rows = [r for r in json.load(open(sys.argv[1]))["rows"]
        if r["S"] > 1 and not r.get("oversubscribed")]
table = subprocess.run([sys.executable, sys.argv[2], sys.argv[1]], capture_output=True, text=True,
                       check=True).stdout
span = sum(abs(r["predicted_span_ms"] / r["measured_span_ms"] - 1) <= 0.1 for r in rows)
means = sum(r["measured_bubble"] <= 1.1 * r["predicted_bubble"] for r in rows)
want = (f"Of {len(rows)} pipelined configurations with a core per rank: predicted span within "
        f"10 % of the measured at {span}; measured bubble <= 1.1 x predicted at {means} "
        "(calibrated means)")
assert rows and want in table, (want, table[-400:])
PY
# Three runs of one grid: the table of medians is the middle run's (the others shifted by +0.5
# and -0.01 in every figure, so a mean would differ); a file of another grid is refused.
python3 - "$work" <<'PY' || fail "shifted copies"
import json, sys
doc = json.load(open(f"{sys.argv[1]}/bench.json"))
for name, delta in (("up", 0.5), ("down", -0.01)):
    copy = json.loads(json.dumps(doc))
    for r in copy["rows"]:
        for k, v in r.items():
            if isinstance(v, float):
                r[k] = v + delta
    json.dump(copy, open(f"{sys.argv[1]}/{name}.json", "w"))
doc["rows"].pop()
json.dump(doc, open(f"{sys.argv[1]}/other.json", "w"))
PY
python3 "$src/scripts/render_pipeline_bench.py" "$work/bench.json" | tail -n +2 >"$work/one.md"
python3 "$src/scripts/render_pipeline_bench.py" "$work/up.json" "$work/bench.json" "$work/down.json" |
  tail -n +2 >"$work/median.md"
cmp -s "$work/one.md" "$work/median.md" || fail "medians of three runs differ from the middle run"
python3 "$src/scripts/render_pipeline_bench.py" "$work/bench.json" "$work/other.json" >/dev/null 2>&1
[ $? -eq 2 ] || fail "the renderer took medians over different grids"

"$bench" --weight-modes fast >/dev/null 2>"$work/bad.err"
rc=$?
[ $rc -eq 2 ] || fail "--weight-modes fast exited $rc, not 2"
grep -q "'fast' is not a weight mode; use none, per_use, bsw or once" "$work/bad.err" ||
  fail "no weight-mode error: $(cat "$work/bad.err")"
"$bench" --factors 0 >/dev/null 2>"$work/bad.err"
[ $? -eq 2 ] || fail "--factors 0 was accepted"
python3 "$src/scripts/render_pipeline_bench.py" "$work/bad.err" >/dev/null 2>&1
[ $? -eq 2 ] || fail "the renderer accepted a file that is not pipeline_bench JSON"

[ $fails -eq 0 ] && echo "pipeline_bench: all checks passed"
exit $((fails > 0))
