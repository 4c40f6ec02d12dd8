#!/usr/bin/env python3
"""merge_traces.py — the per-process traces of an mpirun run as one Chrome/Perfetto trace.

    python3 scripts/merge_traces.py out/run/trace-rank*.json -o out/run/trace-merged.json

Under mpirun each process writes the measured trace of its own ranks (`profiler_steps`:
<run dir>/trace-rank<P>.json), each on its own time origin. Every file records that origin in
Unix microseconds (otherData.origin_unix_us, host/report/step_trace.h), so the merge shifts each
file's measured events onto the earliest origin: one clock, exact for processes on one machine
and as close as the machines' system clocks (NTP: typically well under a millisecond) across
machines. Flow arrows keep their ids, so a SEND in one file meets its RECV in another. The
predicted rows (processes 1000 + stage rank) are the same in every file and kept once.

Errors (a file that is not a carousel trace, one without its origin, a rank in two files) are
one "error:" line on stderr and exit status 2.
"""
import argparse
import json
import os
import sys

PREDICTED_PID = 1000


def fail(message):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            trace = json.load(f)
    except OSError as e:
        fail(f"cannot read trace '{path}': {e.strerror}")
    except ValueError as e:
        fail(f"trace '{path}' is not JSON: {e}")
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        fail(f"trace '{path}' has no traceEvents list (is it a carousel trace.json?)")
    origin = trace.get("otherData", {}).get("origin_unix_us")
    if not isinstance(origin, (int, float)):
        fail(f"trace '{path}' has no otherData.origin_unix_us (written by carousel since the "
             "traces carry their clock origin; re-run with profiler_steps to get one)")
    return trace["traceEvents"], origin


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("traces", nargs="+", help="trace-rank<P>.json files of one run")
    parser.add_argument("-o", "--output", required=True, help="the merged trace to write")
    args = parser.parse_args()
    seen = {}
    for path in args.traces:
        real = os.path.realpath(path)
        if real in seen:
            fail(f"'{path}' is given twice (as '{seen[real]}' too); give each trace once")
        seen[real] = path
    loaded = [(path, *load(path)) for path in args.traces]
    base = min(origin for _, _, origin in loaded)
    merged, seen_meta, owner = [], set(), {}
    predicted_from = None
    for path, events, origin in loaded:
        shift = origin - base
        for e in events:
            pid = e.get("pid", 0)
            if pid >= PREDICTED_PID:
                if predicted_from not in (None, path):
                    continue
                predicted_from = path
            elif e.get("ph") == "M" and e.get("name") == "process_name":
                if owner.setdefault(pid, path) != path:
                    fail(f"rank {pid} is in both '{owner[pid]}' and '{path}' (the same file "
                         "twice, or traces of two runs?)")
            if e.get("ph") == "M":
                key = (pid, e.get("tid"), e.get("name"), json.dumps(e.get("args"), sort_keys=True))
                if key in seen_meta:
                    continue
                seen_meta.add(key)
            elif pid < PREDICTED_PID and "ts" in e:
                e = dict(e, ts=e["ts"] + shift)
            merged.append(e)
    out = {"traceEvents": merged, "displayTimeUnit": "ms",
           "otherData": {"origin_unix_us": base, "merged_files": len(loaded)}}
    try:
        with open(args.output, "w", encoding="utf-8") as f:
            json.dump(out, f)
    except OSError as e:
        fail(f"cannot write '{args.output}': {e.strerror}")
    print(f"{args.output}: {len(loaded)} traces, ranks {sorted(owner)}, {len(merged)} events")


if __name__ == "__main__":
    main()
