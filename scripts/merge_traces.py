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

Errors are one "error:" line on stderr and exit status 2, never a traceback: a file that is not
JSON (NaN and Infinity are not JSON; nor is nesting too deep for Python's reader) or not a
carousel trace, one without a finite origin (0 to 2^63 microseconds), an event that is not an
object or whose pid is not an integer or whose ts is not a finite number, a rank in two files,
an input that is not a regular file (a FIFO would block), an output that is a symlink, a FIFO, a
directory or one of the inputs. The output is written beside its final name and renamed into
place, so an existing output is replaced, never written through.
"""
import argparse
import json
import os
import stat
import sys

PREDICTED_PID = 1000
MAX_US = 1 << 63  # origins and timestamps: microseconds, as int64 holds them


def fail(message):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def not_json(constant):
    raise ValueError(f"{constant} is not a JSON number")


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def kind(v):
    """What a JSON value is, for an error message (short, whatever the value)."""
    if isinstance(v, bool):
        return "a boolean"
    if is_number(v):
        return f"the number {v}" if abs(v) < MAX_US else "a number out of range"  # not NaN
    if isinstance(v, str):
        return f"the string {json.dumps(v[:40])}"
    return {type(None): "null", list: "a list", dict: "an object"}[type(v)]


def load(path):
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO would block for ever
            fail(f"trace '{path}' is not a regular file")
        with open(path, encoding="utf-8") as f:
            trace = json.load(f, parse_constant=not_json)
    except OSError as e:
        fail(f"cannot read trace '{path}': {e.strerror}")
    except ValueError as e:  # also invalid UTF-8 and NaN / Infinity
        fail(f"trace '{path}' is not JSON: {e}")
    except RecursionError:
        fail(f"trace '{path}' is nested too deeply to read (not a carousel trace.json)")
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        fail(f"trace '{path}' has no traceEvents list (is it a carousel trace.json?)")
    other = trace.get("otherData", {})
    if not isinstance(other, dict):
        fail(f"trace '{path}': otherData is {kind(other)}, not an object (carousel writes "
             f"{{\"origin_unix_us\": ...}} there)")
    origin = other.get("origin_unix_us")
    if origin is None:
        fail(f"trace '{path}' has no otherData.origin_unix_us (written by carousel since the "
             "traces carry their clock origin; re-run with profiler_steps to get one)")
    if not is_number(origin) or not 0 <= origin < MAX_US:
        fail(f"trace '{path}': otherData.origin_unix_us is {kind(origin)}; expected the trace's "
             f"clock origin in Unix microseconds, a number from 0 to 2^63")
    events = trace["traceEvents"]
    for n, e in enumerate(events):
        where = f"trace '{path}' event {n}"
        if not isinstance(e, dict):
            fail(f"{where} is {kind(e)}, not an object")
        pid = e.get("pid", 0)
        if not isinstance(pid, int) or isinstance(pid, bool) or abs(pid) >= MAX_US:
            fail(f"{where}: pid is {kind(pid)}, not an integer (a rank, or 1000 + a stage)")
        if "ts" in e and not (is_number(e["ts"]) and abs(e["ts"]) < MAX_US):
            fail(f"{where}: ts is {kind(e['ts'])}, not a finite number of microseconds")
    return events, origin


def check_output(path, inputs):
    """The merged trace replaces a regular file or nothing: never a symlink's target, a FIFO
    (which would block) or one of the inputs."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as e:
        fail(f"cannot write '{path}': {e.strerror}")
    if not stat.S_ISREG(mode):
        what = ("a symbolic link" if stat.S_ISLNK(mode) else "a FIFO (named pipe)"
                if stat.S_ISFIFO(mode) else "a directory" if stat.S_ISDIR(mode) else
                "not a regular file")
        fail(f"output '{path}' is {what}; give the path of a new or regular file")
    if os.path.realpath(path) in inputs:
        fail(f"output '{path}' is one of the input traces; write the merge to another file")


def write(path, out):
    """Writes beside `path` (a new file, never opened through a link) and renames into place."""
    tmp = os.path.join(os.path.dirname(path) or ".", f".{os.path.basename(path)}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(out, f, allow_nan=False)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as e:
        fail(f"cannot write '{path}': {e.strerror}")


def meta_key(e):
    """The identity of a metadata event (any JSON values, so as text)."""
    return json.dumps([e.get("pid", 0), e.get("tid"), e.get("name"), e.get("args")],
                      sort_keys=True)


def merge(loaded):
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
                key = meta_key(e)
                if key in seen_meta:
                    continue
                seen_meta.add(key)
            elif pid < PREDICTED_PID and "ts" in e:
                e = dict(e, ts=e["ts"] + shift)
            merged.append(e)
    return merged, owner, base


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
    check_output(args.output, seen)
    loaded = [(path, *load(path)) for path in args.traces]
    try:
        merged, owner, base = merge(loaded)
        out = {"traceEvents": merged, "displayTimeUnit": "ms",
               "otherData": {"origin_unix_us": base, "merged_files": len(loaded)}}
        write(args.output, out)
    except RecursionError:  # an event's args nested deeper than json.dumps goes
        fail("an event's args are nested too deeply to write (not a carousel trace)")
    print(f"{args.output}: {len(loaded)} traces, ranks {sorted(owner)}, {len(merged)} events")


if __name__ == "__main__":
    sys.stdout.reconfigure(errors="backslashreplace")  # any file name prints
    main()
