#!/usr/bin/env python3
"""prepare_data_bench.py — scripts/prepare_data.py at scale: generates a JSONL corpus (default
1 GB, deterministic, in a temporary directory that is deleted afterwards), trains a tokenizer on
a 4 MB sample of it, then runs prepare_data.py --tokenizer on the whole corpus with each
--workers count and reports wall time, tokens/s and peak memory (the largest single process, as
getrusage reports it, and the whole process tree's RSS sampled every 0.2 s), the CPU seconds of
all its processes and the machine's load average meanwhile (other work slows the run).

    .venv/bin/python benchmarks/prepare_data_bench.py                     # 1 GB, workers 1 and 2
    .venv/bin/python benchmarks/prepare_data_bench.py --size-mb 200 --workers 1,2,4 --json out.json

generate() is also the corpus of tests/end_to_end/prepare_data_scale_test.py. Standard library
only (with the .venv's tokenizers for prepare_data.py itself).
"""
import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PREP = os.path.join(ROOT, "scripts", "prepare_data.py")


def generate(path, size_bytes, seed=0):
    """A JSONL corpus of about `size_bytes`: records {"id", "text", "meta"} whose texts are 1-60
    sentences of a fixed pool of 4,000 (3,000 made-up words plus some non-ASCII ones), so it
    tokenizes like text; some records ASCII-escaped, some with newlines. Returns the records."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(1, 10))) for _ in range(3000)]
    words += ["Ünïcödé", "日本語", "—", "🚀", "naïve", "café", "1984", "x86_64"]
    sentences = []
    for _ in range(4000):
        s = " ".join(rng.choice(words) for _ in range(rng.randint(3, 25)))
        sentences.append(s[0].upper() + s[1:] + rng.choice([".", "!", "?", ",\n", ".\n\n"]))
    written = records = 0
    with open(path, "w", encoding="utf-8") as f:
        lines = []
        while written < size_bytes:
            text = " ".join(rng.choices(sentences, k=rng.randint(1, 60)))
            line = json.dumps({"id": records, "text": text, "meta": {"src": "bench"}},
                              ensure_ascii=records % 3 == 0) + "\n"
            lines.append(line)
            written += len(line.encode())
            records += 1
            if len(lines) == 1000:
                f.write("".join(lines))
                lines = []
        f.write("".join(lines))
    return records


def tree_rss(pid):
    """RSS in bytes of `pid` and its descendants (Linux /proc)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                total += next((int(line.split()[1]) * 1024 for line in f
                               if line.startswith("VmRSS:")), 0)
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            pass
    return total


def measured(cmd):
    """Run cmd in a child of its own: (exit status, stdout, wall seconds, peak RSS of the
    largest process in bytes, peak RSS of the whole tree in bytes, CPU seconds of all its
    processes, the load average over the run)."""
    # The getrusage of a fresh wrapper: RUSAGE_CHILDREN is then this run's processes only.
    wrapper = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]); "
               "u = resource.getrusage(resource.RUSAGE_CHILDREN); "
               "print(u.ru_maxrss, u.ru_utime + u.ru_stime, file=sys.stderr); "
               "sys.exit(r.returncode)")
    t0 = time.monotonic()
    p = subprocess.Popen([sys.executable, "-c", wrapper] + cmd, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    peak, loads, done = [0], [], threading.Event()

    def sample():  # the load average too: other work on the machine slows the run
        while not done.wait(0.2):
            peak[0] = max(peak[0], tree_rss(p.pid))
            loads.append(os.getloadavg()[0])
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = p.communicate()
    done.set()
    sampler.join()
    wall = time.monotonic() - t0
    last = (err.strip().splitlines() or [""])[-1].split()
    largest, cpu = (int(last[0]) * 1024, float(last[1])) if len(last) == 2 else (0, 0.0)
    if p.returncode != 0:
        sys.stderr.write(err)
    return p.returncode, out, wall, largest, peak[0], cpu, sum(loads) / max(len(loads), 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size-mb", type=float, default=1024, help="corpus size (default 1024 MB)")
    ap.add_argument("--workers", default="1,2", help="--workers counts to run (default 1,2)")
    ap.add_argument("--vocab-size", type=int, default=32768,
                    help="vocabulary of the tokenizer trained on the sample (default 32768)")
    ap.add_argument("--tmp", default=tempfile.gettempdir(), help="where the corpus goes")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="prepare_data_bench_", dir=args.tmp)
    try:
        corpus = os.path.join(work, "corpus.jsonl")
        t0 = time.monotonic()
        records = generate(corpus, int(args.size_mb * 1e6))
        size = os.path.getsize(corpus)
        cores = os.cpu_count()
        print(f"corpus: {size / 1e6:,.1f} MB, {records:,} records ({time.monotonic() - t0:.0f} s "
              f"to generate), {cores} cores", flush=True)
        sample = os.path.join(work, "sample.jsonl")
        generate(sample, 4_000_000)  # the same words and sentences as the corpus
        r = subprocess.run([sys.executable, PREP, sample, "-o", os.path.join(work, "tok"),
                            "--vocab-size", str(args.vocab_size), "--val-fraction", "0"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"training the tokenizer failed: {r.stderr}")
        tokenizer = os.path.join(work, "tok", "tokenizer.json")
        results = []
        for workers in [int(w) for w in args.workers.split(",")]:
            out = os.path.join(work, f"out_{workers}")
            cmd = [sys.executable, PREP, corpus, "-o", out, "--tokenizer", tokenizer,
                   "--add-eos", "--workers", str(workers)]
            rc, stdout, wall, largest, tree, cpu, load = measured(cmd)
            if rc != 0:
                sys.exit(f"prepare_data.py --workers {workers} exited {rc}")
            m = re.search(r"tokenized ([\d,]+) tokens in ([\d.]+) s", stdout)
            tokens, phase = int(m.group(1).replace(",", "")), float(m.group(2))
            row = {"workers": workers, "mb": size / 1e6, "tokens": tokens, "wall_s": wall,
                   "tokenize_s": phase, "tokens_per_s": tokens / wall,
                   "tokenize_tokens_per_s": tokens / phase, "mb_per_s": size / 1e6 / wall,
                   "peak_rss_largest_mb": largest / 2**20, "peak_rss_tree_mb": tree / 2**20,
                   "cpu_s": cpu, "load_avg": load}
            results.append(row)
            print(f"--workers {workers}: {wall:.0f} s ({phase:.0f} s tokenizing), "
                  f"{tokens:,} tokens, {row['tokens_per_s']:,.0f} tokens/s overall, "
                  f"{row['mb_per_s']:.2f} MB/s, peak RSS {row['peak_rss_largest_mb']:.0f} MiB "
                  f"(largest process), {row['peak_rss_tree_mb']:.0f} MiB (all processes), "
                  f"{cpu:.0f} CPU s, load average {load:.1f}", flush=True)
            shutil.rmtree(out)
        if len(results) > 1:  # the same shards whatever the workers is tested, not benchmarked
            print(f"speed-up {results[-1]['workers']} vs {results[0]['workers']} workers: "
                  f"{results[0]['wall_s'] / results[-1]['wall_s']:.2f}x")
        print(f"\n| workers | corpus | tokens | wall | tokens/s | MB/s | CPU s | load avg ({cores} "
              f"cores) | peak RSS (largest process / all) |\n|---|---|---|---|---|---|---|---|---|")
        for r in results:
            print(f"| {r['workers']} | {r['mb']:,.0f} MB | {r['tokens'] / 1e6:,.1f} M | "
                  f"{r['wall_s']:.0f} s | {r['tokens_per_s']:,.0f} | {r['mb_per_s']:.2f} | "
                  f"{r['cpu_s']:.0f} | {r['load_avg']:.1f} | "
                  f"{r['peak_rss_largest_mb']:.0f} / {r['peak_rss_tree_mb']:.0f} MiB |")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
