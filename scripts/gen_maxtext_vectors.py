#!/usr/bin/env python3
"""Writes tests/data/maxtext_circular_vectors.txt from a symbolic replay of MaxText's buffers.

The replay module (maxtext_replay, developer tooling that is not part of this repository)
simulates MaxText's activation buffer rules symbolically (docs/circular-pipeline.md, sections
"Activation buffers in MaxText" and "Test vectors"); for each (S, M, R, d) we record, for every
iteration t and stage s doing real work, the microbatch, repeat and layer the replay says MaxText
computes. tests/schedule/test_schedule.cpp checks carousel's circular table against these vectors; the
vectors file is checked in, so the tests do not need this script.
Usage:  python3 scripts/gen_maxtext_vectors.py DIRECTORY_HOLDING_maxtext_replay.py
"""
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
if len(sys.argv) != 2 or not os.path.isfile(os.path.join(sys.argv[1], "maxtext_replay.py")):
    sys.exit("usage: gen_maxtext_vectors.py DIR, where DIR holds maxtext_replay.py (the replay "
             "module of MaxText's buffer rules; not part of this repository)")
sys.path.insert(0, sys.argv[1])
import maxtext_replay  # noqa: E402

configs = [(S, M, R, d) for S in (1, 2, 3, 4) for M in (S, 2 * S, 3 * S) for R in (1, 2, 3)
           for d in (1, 2) if not (d == 2 and M < 2 * S)]
out = os.path.join(here, "..", "tests", "data", "maxtext_circular_vectors.txt")
with open(out, "w") as f:
    f.write("# S M R d | t s microbatch repeat layer  (real cells; from maxtext_replay.py, L = 1)\n")
    for S, M, R, d in configs:
        ok, _, table = maxtext_replay.run(S, M, R, d)
        assert ok, (S, M, R, d)
        cells = []
        for t, mb, rp, inputs, lay in table:
            for s in range(S):
                p = t - d * s
                if 0 <= p < M * R:
                    assert inputs[s] == mb[s], "replay fed another microbatch than it computes"
                    cells.append(f"{t} {s} {mb[s]} {rp[s]} {lay[s]}")
        f.write(f"{S} {M} {R} {d} | " + " , ".join(cells) + "\n")
print(f"wrote {len(configs)} configurations to {out}")
