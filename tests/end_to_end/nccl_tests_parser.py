#!/usr/bin/env python3
"""nccl_tests_parser.py — reads a collective benchmark's stdout the way a tool written for
NVIDIA's nccl-tests (2.19) reads nccl-tests' own, and checks that the numbers hang together.

Written from nccl-tests' output format, not from carousel's code:
  header  "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s " with the
          names size count type redop root time|cputime algbw busbw #wrong (twice);
  row     "%12li  %12li  %8s  %6s  %6i", then out of place and in place each
          "  %7s  %6s  %6s  %6g" (time, algbw, busbw, #wrong) or, unchecked, "  %7s  %6s  %6s"
          followed by the 7 characters "    N/A";
  footer  "# Out of bounds values : %d OK|FAILED", "# Avg bus bandwidth    : %g " and
          "# Collective test concluded: <name>".
busbw = algbw x factor: 2(n-1)/n all_reduce, (n-1)/n all_gather and reduce_scatter, 1 broadcast
and sendrecv (nccl-tests' PERFORMANCE.md); algbw = size / time.

Usage: nccl_tests_parser.py <collective> <ranks> <rows> < table
Exit 0 when everything checks, 1 with one line per problem otherwise.
"""
import re
import sys

WIDTHS = [12, 12, 8, 6, 6, 7, 6, 6, 6, 7, 6, 6, 6]  # %12li .. %6g, two spaces between
NAMES = ["size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
         "time", "algbw", "busbw", "#wrong"]
TYPE_BYTES = {"int8": 1, "uint8": 1, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8,
              "half": 2, "float": 4, "double": 8, "bfloat16": 2}


def factor(collective, n):
    return {"all_reduce": 2.0 * (n - 1) / n, "all_gather": (n - 1) / n,
            "reduce_scatter": (n - 1) / n, "broadcast": 1.0, "sendrecv": 1.0}[collective]


def column_ends():
    ends, pos = [], 0
    for i, w in enumerate(WIDTHS):
        pos += (2 if i else 0) + w
        ends.append(pos)
    return ends


def parse_row(line, problems):
    """The 13 fields of a row by position; None for an unchecked #wrong."""
    fields, pos = [], 0
    for i, w in enumerate(WIDTHS):
        if i in (8, 12) and line[pos:pos + 7] == "    N/A":  # unchecked: 7 characters
            fields.append(None)
            pos += 7
            continue
        if i and line[pos:pos + 2] != "  ":
            problems.append(f"column {NAMES[i]} not preceded by two spaces at {pos}: {line!r}")
            return None
        pos += 2 if i else 0
        field = line[pos:pos + w]
        if len(field) != w or field != field.rjust(w) or not field.strip() or field[-1] == " ":
            problems.append(f"column {NAMES[i]} not right-aligned in {w} characters: {line!r}")
            return None
        fields.append(field.strip())
        pos += w
    if line[pos:].strip():
        problems.append(f"text after the last column: {line!r}")
    return fields


def main():
    collective, ranks, want_rows = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    lines = sys.stdin.read().split("\n")
    problems, rows, header_seen = [], [], False
    oob = avg = concluded = None
    for line in lines:
        if re.match(r"^# +size +count +type +redop +root +c?p?u?time ", line):
            header_seen = True
            ends = [m.end() for m in re.finditer(r"\S+", line)][1:]  # skip the '#'
            if ends != column_ends():
                problems.append(f"header names end at {ends}, rows at {column_ends()}")
            continue
        m = re.match(r"^# Out of bounds values : (\d+) (OK|FAILED)$", line)
        if m:
            oob = (int(m.group(1)), m.group(2))
        m = re.match(r"^# Avg bus bandwidth    : (\S+) $", line)
        if m:
            avg = float(m.group(1))
        m = re.match(r"^# Collective test concluded: (\S+)$", line)
        if m:
            concluded = m.group(1)
        if line.startswith("#") or not line.strip():
            continue
        fields = parse_row(line, problems)
        if fields:
            rows.append(fields)
    if not header_seen:
        problems.append("no column header line")
    if len(rows) != want_rows:
        problems.append(f"{len(rows)} rows, want {want_rows}")
    busbws = []
    for f in rows:
        size, count, dtype = int(f[0]), int(f[1]), f[2]
        per_rank = size // ranks if collective in ("all_gather", "reduce_scatter") else size
        if count * TYPE_BYTES[dtype] != per_rank:
            problems.append(f"count {count} x {dtype} != {per_rank} bytes per rank (size {size})")
        for t, a, b, w in ((5, 6, 7, 8), (9, 10, 11, 12)):
            if f[t] == "N/A":
                continue
            time, algbw, busbw = float(f[t]), float(f[a]), float(f[b])
            busbws.append(busbw)
            if abs(algbw - size / time / 1e3) > 0.006 + 0.01 * algbw:
                problems.append(f"algbw {algbw} is not size/time = {size / time / 1e3:.4f}")
            if abs(busbw - algbw * factor(collective, ranks)) > 0.011:
                problems.append(f"busbw {busbw} is not algbw x {factor(collective, ranks):.3f}")
            if f[w] is not None and float(f[w]) != 0:
                problems.append(f"#wrong {f[w]} in row {f}")
    if oob != (0, "OK"):
        problems.append(f"out of bounds line {oob}, want (0, 'OK')")
    if avg is None:
        problems.append("no 'Avg bus bandwidth' line")
    elif busbws and abs(avg - sum(busbws) / len(busbws)) > 0.006 + 1e-3 * avg:
        problems.append(f"avg bus bandwidth {avg} is not the mean busbw {sum(busbws) / len(busbws)}")
    if concluded != collective + "_perf":
        problems.append(f"concluded line names {concluded}, want {collective}_perf")
    for p in problems[:20]:
        print("FAIL:", p)
    if not problems:
        print(f"{collective}: {len(rows)} rows parsed, {len(busbws)} measurements consistent")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
