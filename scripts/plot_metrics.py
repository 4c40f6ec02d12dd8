#!/usr/bin/env python3
"""plot_metrics.py — a run's metrics.jsonl as PNG curves.

    python3 scripts/plot_metrics.py out/demo/metrics.jsonl -o out/demo/metrics.png

One panel each for the loss, the learning rate (`lr`), the throughput (`tokens_per_s`) and the
gradient norm, plus the eval loss (`eval_loss`) when any record has it. carousel writes the
non-finite values NaN, inf and -inf as the strings "NaN", "Infinity" and "-Infinity"
(host/run/step_report.cpp); they are plotted as gaps and counted in the title. A run resumed from a
checkpoint appends the steps it re-runs: the last record of a step wins.

Exit status 0, or 2 with one line "error: ..." naming the file and line for a file that is
missing, empty or holds a line that is not a JSON object of numbers (needs matplotlib: Debian's
python3-matplotlib, installed by scripts/setup.sh).
"""
import argparse
import json
import math
import os
import stat
import sys

NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
# (key, panel title, y label, log scale)
PANELS = [
    ("loss", "training loss", "loss", False),
    ("lr", "learning rate", "lr", False),
    ("tokens_per_s", "throughput", "tokens/s", False),
    ("grad_norm", "gradient norm", "global L2 norm", True),
    ("eval_loss", "eval loss", "loss", False),
]


class MetricsError(Exception):
    pass


def value_of(v, where, key):
    """A record's value as a float (non-finite strings included); MetricsError otherwise."""
    if isinstance(v, bool) or v is None:
        raise MetricsError(f"{where}: '{key}' is {json.dumps(v)}, not a number")
    if isinstance(v, (int, float)):
        try:
            return float(v)
        except OverflowError:  # an integer past float's range (10**400)
            raise MetricsError(f"{where}: '{key}' is an integer too large for a number") from None
    if isinstance(v, str) and v in NON_FINITE:
        return NON_FINITE[v]
    raise MetricsError(
        f"{where}: '{key}' is {json.dumps(v)}, not a number nor one of "
        '"NaN", "Infinity", "-Infinity"'
    )


def read_metrics(path):
    """{step: record} with float values, in file order (later records of a step win)."""
    try:
        mode = os.stat(path).st_mode
        if not stat.S_ISREG(mode):  # a FIFO would block the read forever
            kind = "a FIFO (named pipe)" if stat.S_ISFIFO(mode) else (
                "a directory" if stat.S_ISDIR(mode) else "not a regular file")
            raise MetricsError(f"'{path}' is {kind}; give the run's metrics.jsonl")
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
    except OSError as e:
        raise MetricsError(f"cannot read '{path}': {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise MetricsError(f"'{path}' is not UTF-8 text: {e}") from None
    records = {}
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"'{path}' line {n}"
        try:
            rec = json.loads(line, parse_constant=lambda c: NON_FINITE.get(c, c))
        except json.JSONDecodeError as e:
            raise MetricsError(f"{where}: not valid JSON ({e.msg} at column {e.colno})") from None
        except RecursionError:
            raise MetricsError(f"{where}: JSON nested too deeply to be a metrics record") from None
        if not isinstance(rec, dict):
            raise MetricsError(f"{where}: a record must be a JSON object, not {type(rec).__name__}")
        if "step" not in rec:
            raise MetricsError(f"{where}: the record has no 'step'")
        step = rec["step"]
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise MetricsError(f"{where}: 'step' is {json.dumps(step)}, not a step number")
        values = {}
        for key, _, _, _ in PANELS:
            if key in rec:
                values[key] = value_of(rec[key], where, key)
        records[step] = values
    if not records:
        raise MetricsError(f"'{path}' holds no metrics records")
    return records


def plot(records, source, output):
    import matplotlib

    matplotlib.use("Agg")  # files only, no display needed
    import matplotlib.pyplot as plt

    steps = sorted(records)
    panels = [p for p in PANELS if any(p[0] in records[s] for s in steps)]
    non_finite = {}
    cols = 2
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 3.6 * rows), squeeze=False)
    for ax, (key, title, ylabel, log) in zip(axes.flat, panels):
        xs = [s for s in steps if key in records[s]]
        ys = [records[s][key] for s in xs]
        bad = sum(1 for y in ys if not math.isfinite(y))
        if bad:
            non_finite[key] = bad
        ys = [y if math.isfinite(y) else math.nan for y in ys]  # NaN: a gap in the line
        ax.plot(xs, ys, marker="." if len(xs) < 50 else None, linewidth=1.2)
        finite = [y for y in ys if math.isfinite(y)]
        if log and finite and min(finite) > 0:
            ax.set_yscale("log")
        ax.set_title(title + (f" ({bad} non-finite)" if bad else ""))
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    total = sum(non_finite.values())
    detail = ", ".join(f"{k}: {v}" for k, v in non_finite.items())
    fig.suptitle(
        f"{source}: {len(steps)} steps ({steps[0]}..{steps[-1]}); "
        + (f"{total} non-finite values as gaps ({detail})" if total else "all values finite")
    )
    fig.tight_layout()
    fig.savefig(output, dpi=100)
    plt.close(fig)
    return len(steps), total


def main(argv):
    ap = argparse.ArgumentParser(description="Plot a carousel metrics.jsonl as PNG curves.")
    ap.add_argument("metrics", help="the run's metrics.jsonl")
    ap.add_argument("-o", "--output", help="PNG to write (default: METRICS with .png)")
    args = ap.parse_args(argv)
    output = args.output or (args.metrics.rsplit(".", 1)[0] + ".png")
    try:
        records = read_metrics(args.metrics)
        steps, bad = plot(records, args.metrics, output)
    except MetricsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except ImportError as e:
        print(f"error: matplotlib is needed ({e}); apt-get install python3-matplotlib", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"error: cannot write '{output}': {e.strerror}", file=sys.stderr)
        return 2
    print(f"wrote {output}: {steps} steps, {bad} non-finite values")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
