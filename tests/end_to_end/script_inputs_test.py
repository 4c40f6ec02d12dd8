#!/usr/bin/env python3
"""script_inputs_test.py — the Python scripts on malformed inputs: one "error:" line and exit
status 2, never a traceback or a hang; their outputs never written through a symlink or into a
FIFO; and prepare_data.py reading a tokenizer.json as carousel does (the same vocab_size, or the
same refusal in the same words).

    tests/end_to_end/script_inputs_test.py SOURCE_DIR CAROUSEL_BINARY WORK_DIR

1. merge_traces.py: each malformed trace of docs/reliability.md's table (a non-object event, a
   string pid or ts, otherData as a list, deep nesting, a NaN or out-of-range origin, ...), a
   FIFO input, a symlinked / FIFO output; then 3000 seeded mutations of a valid trace, in
   process: each merges or exits 2.
2. prepare_data.py: malformed JSONL / text / gzip / Parquet inputs (deep nesting, bad encodings,
   non-object lines, huge numbers, empty files, missing fields; also deep in a large input,
   parsed by worker processes, and an unreadable Parquet row group), outputs that are symlinks,
   FIFOs or directories (refused, their targets untouched), a FIFO --tokenizer; then 1500 seeded
   mutations of a JSONL file and 300 of a Parquet file through their readers, in process.
3. tokenizer.json: hand-written cases and 25 generated ones through prepare_data.py and the
   carousel binary (the same vocab_size or the same words after the path), and 1540 generated
   ones through tokenizer_json.py against the tokenizers library (the ids carousel accepts are
   the ids the library gives, and a tokenizer carousel refuses for its ids is one whose written
   ids the installed library, or a version before 0.22.2, would change).

Parts 2 and 3 need SOURCE_DIR/.venv with the tokenizers package (scripts/setup.sh); without it
they are skipped with a message, and the test exits 77 only when nothing ran.
"""
import contextlib
import copy
import importlib.util
import io
import json
import os
import random
import re
import subprocess
import sys

SRC, BIN, WORK = sys.argv[1:4] if len(sys.argv) >= 4 else (None, None, None)
failures = []


def fail(msg):
    failures.append(msg)
    print(f"FAIL: {msg}", file=sys.stderr)


def run(cmd, timeout=60, **kw):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              errors="backslashreplace", **kw)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(cmd, 124, "", "(timed out: it hung)")


def expect_error(cmd, message, label):
    """cmd exits 2 with one stderr line 'error: ...' holding `message`."""
    r = run(cmd)
    lines = r.stderr.splitlines()
    if r.returncode != 2 or len(lines) != 1 or not lines[0].startswith("error: ") or \
            message not in lines[0]:
        fail(f"{label}: exit {r.returncode}, stderr {r.stderr.strip()[-600:]!r}; "
             f"expected exit 2 and one line with {message!r}")


def load_module(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write(path, data):
    with open(path, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)
    return path


# --- 1. merge_traces.py ----------------------------------------------------------------------
def merge_traces_cases():
    script = os.path.join(SRC, "scripts/merge_traces.py")
    d = os.path.join(WORK, "traces")
    os.makedirs(d)
    good = {"traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "rank 0"}},
        {"ph": "X", "pid": 0, "tid": 0, "ts": 1.5, "dur": 2.0, "name": "F"},
        {"ph": "X", "pid": 1000, "tid": 0, "ts": 1, "dur": 2, "name": "predicted F"}],
        "otherData": {"origin_unix_us": 1700000000000000}}
    write(f"{d}/good.json", json.dumps(good))

    def trace(name, text_or_obj):
        text = text_or_obj if isinstance(text_or_obj, str) else json.dumps(text_or_obj)
        return write(f"{d}/{name}.json", text)

    def events(*evs):
        return dict(good, traceEvents=list(evs))

    cases = [  # name, trace, words of the error
        ("nonobject", events(1), "event 0 is the number 1, not an object"),
        ("list_event", events([]), "event 0 is a list, not an object"),
        ("string_pid", events({"pid": "0", "ts": 1}), 'event 0: pid is the string "0", not an'),
        ("float_pid", events({"pid": 0.5, "ts": 1}), "pid is the number 0.5, not an integer"),
        ("bool_pid", events({"pid": True, "ts": 1}), "pid is a boolean, not an integer"),
        ("string_ts", events({"pid": 0, "ts": "1"}), 'ts is the string "1", not a finite number'),
        ("null_ts", events({"pid": 0, "ts": None}), "ts is null, not a finite number"),
        ("huge_ts", events({"pid": 0, "ts": 10 ** 30}), "ts is a number out of range"),
        ("other_list", dict(good, otherData=[1]), "otherData is a list, not an object"),
        ("no_origin", dict(good, otherData={}), "has no otherData.origin_unix_us"),
        ("string_origin", dict(good, otherData={"origin_unix_us": "1"}),
         'origin_unix_us is the string "1"'),
        ("negative_origin", dict(good, otherData={"origin_unix_us": -5}),
         "origin_unix_us is the number -5"),
        ("huge_origin", dict(good, otherData={"origin_unix_us": 10 ** 400}),
         "origin_unix_us is a number out of range"),
        ("nan_origin", json.dumps(good).replace("1700000000000000", "NaN"),
         "is not JSON: NaN is not a JSON number"),
        ("inf_ts", json.dumps(good).replace('"ts": 1.5', '"ts": -Infinity'),
         "is not JSON: -Infinity is not a JSON number"),
        ("deep", '{"traceEvents": [' + "[" * 100000 + "]" * 100000 + "]}",
         "is nested too deeply to read"),
        ("deep_args", events({"ph": "X", "pid": 0, "ts": 1, "args": json.loads(
            "[" * 900 + "]" * 900)}), ""),  # readable: must merge, or be one clear error
        ("not_trace", [1, 2], "has no traceEvents list"),
        ("not_utf8", b"\xff\xfe{}".decode("latin-1"), "is not JSON"),
        ("list_tid", events({"ph": "M", "pid": 0, "tid": [1], "name": {"a": 1}}), None),
    ]
    for name, content, words in cases:
        path = trace(name, content)
        out = f"{d}/out_{name}.json"
        if words is None:  # valid: merges
            r = run([sys.executable, script, path, "-o", out])
            if r.returncode != 0:
                fail(f"merge_traces {name}: exit {r.returncode}: {r.stderr.strip()[-300:]}")
            continue
        if words == "":
            r = run([sys.executable, script, path, "-o", out])
            if r.returncode not in (0, 2) or "Traceback" in r.stderr:
                fail(f"merge_traces {name}: exit {r.returncode}: {r.stderr.strip()[-300:]}")
            continue
        expect_error([sys.executable, script, path, f"{d}/good.json", "-o", out], words,
                     f"merge_traces {name}")
    # Inputs and outputs that are not regular files: refused at once (a FIFO would block).
    os.mkfifo(f"{d}/fifo.json")
    expect_error([sys.executable, script, f"{d}/fifo.json", "-o", f"{d}/o.json"],
                 "is not a regular file", "merge_traces FIFO input")
    expect_error([sys.executable, script, f"{d}/good.json", "-o", f"{d}/fifo.json"],
                 "is a FIFO (named pipe)", "merge_traces FIFO output")
    write(f"{d}/victim", "precious")
    os.symlink(f"{d}/victim", f"{d}/link.json")
    expect_error([sys.executable, script, f"{d}/good.json", "-o", f"{d}/link.json"],
                 "is a symbolic link", "merge_traces symlinked output")
    if open(f"{d}/victim", "rb").read() != b"precious":
        fail("merge_traces wrote through a symlinked output")
    expect_error([sys.executable, script, f"{d}/good.json", "-o", f"{d}/good.json"],
                 "is one of the input traces", "merge_traces output = input")
    r = run([sys.executable, script, f"{d}/good.json", "-o", f"{d}/merged.json"])
    merged = json.load(open(f"{d}/merged.json")) if r.returncode == 0 else None
    if not merged or len(merged["traceEvents"]) != 3:
        fail(f"merge_traces of a valid trace: exit {r.returncode} {r.stderr}")

    # Seeded mutations, in process: every outcome is a merge or SystemExit(2), nothing else.
    mt = load_module("merge_traces", script)
    rng = random.Random(37)
    values = [None, True, 0, -1, 1.5, 2 ** 70, "x", "", [], {}, [1, [2]], {"a": {}}, 1e308]
    counts = {"merged": 0, "refused": 0}
    for case in range(3000):
        t = copy.deepcopy(good)
        for _ in range(rng.randint(1, 3)):
            evs = t.get("traceEvents") if isinstance(t.get("traceEvents"), list) else []
            target = rng.choice([t, t.get("otherData")] + evs)
            if isinstance(target, dict) and target and rng.random() < 0.8:
                target[rng.choice(list(target))] = copy.deepcopy(rng.choice(values))
            elif isinstance(target, dict):
                target[rng.choice(["pid", "ts", "ph", "tid", "name", "args"])] = rng.choice(values)
        if rng.random() < 0.2 and isinstance(t.get("traceEvents"), list):
            t["traceEvents"].append(copy.deepcopy(rng.choice(values)))
        path = write(f"{d}/m.json", json.dumps(t))
        sys.argv = ["merge_traces.py", path, "-o", f"{d}/m_out.json"]
        try:
            with contextlib.redirect_stdout(io.StringIO()), \
                    contextlib.redirect_stderr(io.StringIO()) as err:
                mt.main()
            counts["merged"] += 1
        except SystemExit as e:
            if e.code != 2 or not err.getvalue().startswith("error: "):
                fail(f"merge_traces mutation {case}: exit {e.code} {err.getvalue()!r}")
            counts["refused"] += 1
        except Exception as e:  # a traceback
            fail(f"merge_traces mutation {case}: {type(e).__name__}: {e} on {json.dumps(t)}")
    print(f"merge_traces: {len(cases)} cases, 3000 mutations ({counts})")


# --- 2. prepare_data.py ----------------------------------------------------------------------
def prepare_data_cases(py):
    prep = os.path.join(SRC, "scripts/prepare_data.py")
    d = os.path.join(WORK, "prep")
    os.makedirs(d)
    corpus = os.path.join(SRC, "tests/data/tiny_corpus.txt")

    def bad(name, data, words, *extra):
        path = write(f"{d}/{name}", data)
        expect_error([py, prep, path, "-o", f"{d}/out_{name}", "--vocab-size", "300", *extra],
                     words, f"prepare_data {name}")
        if os.path.exists(f"{d}/out_{name}"):
            fail(f"prepare_data {name}: a refused run left its output directory")

    deep = '{"text": "a", "x": ' + "[" * 100000 + "]" * 100000 + "}\n"
    bad("deep.jsonl", deep, "line 1 is nested too deeply to read")
    bad("deep_text.jsonl", '{"text": ' + "[" * 50000 + "]" * 50000 + "}\n",
        "line 1 is nested too deeply to read")
    bad("number.jsonl", "1\n", "line 1 is a number, not a JSON object")
    bad("string.jsonl", '"text"\n', "line 1 is a string, not a JSON object")
    bad("null.jsonl", "null\n", "line 1 is null, not a JSON object")
    bad("digits.jsonl", '{"text": "a", "n": ' + "9" * 5000 + "}\n", "line 1 is not JSON")
    bad("huge.jsonl", '{"text": 1e999999}\n', "field 'text' is a number, not a string")
    bad("nan.jsonl", '{"text": NaN}\n', "field 'text' is a number, not a string")
    bad("latin1.jsonl", '{"text": "caf\xe9"}\n'.encode("latin-1"), "line 1 is not UTF-8")
    bad("utf16.jsonl", '{"text": "a"}\n'.encode("utf-16"), "line 1 is not UTF-8")
    bad("surrogate.jsonl", '{"text": "\\ud800"}\n', "field 'text' is not valid Unicode")
    bad("surrogate_key.jsonl", '{"\\ud800": 1}\n', "has no field 'text'")
    bad("blank.jsonl", "\n  \n\n", "is empty: no JSON records")
    bad("missing.jsonl", '{"body": "a"}\n', "has no field 'text' (its fields: 'body')")
    bad("latin1.txt", "caf\xe9\n".encode("latin-1"), "is not UTF-8 text")
    bad("empty.txt", "", "the inputs hold no text")
    bad("truncated.jsonl.gz", b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03", "is not valid gzip")
    import gzip
    bad("empty.jsonl.gz", gzip.compress(b""), "is empty: no JSON records")
    write(f"{d}/one.txt", "only one paragraph\n")
    expect_error([py, prep, f"{d}/one.txt", "-o", f"{d}/o1"], "needs at least 2 documents",
                 "prepare_data one document")
    for flag, value, words in [("--val-fraction", "nan", "--val-fraction nan must be in"),
                               ("--val-fraction=-inf", None, "must be in [0, 1)"),
                               ("--shard-tokens", "0", "--shard-tokens 0 must be in")]:
        expect_error([py, prep, corpus, "-o", f"{d}/o2", flag] + ([value] if value else []), words,
                     f"prepare_data {flag} {value}")
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        print("SKIP: the Parquet cases (no pyarrow)")
    else:
        pq.write_table(pa.table({"text": pa.array([[1, 2]], pa.list_(pa.int64()))}),
                       f"{d}/nested.parquet")
        expect_error([py, prep, f"{d}/nested.parquet", "-o", f"{d}/o3"],
                     "column 'text' is of type list<element: int64>, not a string",
                     "prepare_data list column")
        pq.write_table(pa.table([pa.array(["a"]), pa.array(["b"])], names=["text", "text"]),
                       f"{d}/twice.parquet")
        expect_error([py, prep, f"{d}/twice.parquet", "-o", f"{d}/o3"],
                     "has the column 'text' 2 times", "prepare_data duplicate column")
        pq.write_table(pa.table({"text": pa.array(["a", "b"]).dictionary_encode()}),
                       f"{d}/dict.parquet")
        r = run([py, prep, f"{d}/dict.parquet", "-o", f"{d}/o4", "--vocab-size", "300"])
        if r.returncode != 0:
            fail(f"prepare_data dictionary-encoded Parquet: exit {r.returncode} {r.stderr}")
        good = open(f"{d}/dict.parquet", "rb").read()
        write(f"{d}/cut.parquet", good[:len(good) // 2] + good[-8:])
        expect_error([py, prep, f"{d}/cut.parquet", "-o", f"{d}/o3"],
                     "is not a readable Parquet file", "prepare_data truncated Parquet")

    streamed_cases(py, prep, d, bad)

    # Outputs: a symlink, FIFO or directory under an output's name is refused before any work,
    # and nothing is written through it.
    victim = write(f"{d}/victim", "precious")
    for name, make, words in [
            ("tokenizer.json", lambda p: os.symlink(victim, p), "is a symbolic link"),
            ("train_000000.bin", lambda p: os.symlink(victim, p), "is a symbolic link"),
            ("val_000000.bin.tmp", lambda p: os.symlink(victim, p), "is a symbolic link"),
            ("tokenizer.json.tmp", lambda p: os.symlink(f"{d}/nowhere", p), "is a symbolic link"),
            ("tokenizer.json", os.mkfifo, "is a FIFO (named pipe)"),
            ("train_000001.bin", os.mkfifo, "is a FIFO (named pipe)"),
            ("tokenizer.json", os.mkdir, "is a directory")]:
        out = f"{d}/out_{name}_{words.split()[-1]}"
        os.makedirs(out)
        make(f"{out}/{name}")
        expect_error([py, prep, corpus, "-o", out, "--vocab-size", "300"],
                     f"'{out}/{name}' {words}; prepare_data.py writes its outputs as new regular "
                     f"files", f"prepare_data output {name} ({words})")
        if os.listdir(out) != [name]:
            fail(f"prepare_data output {name} ({words}): wrote {sorted(os.listdir(out))}")
    if open(victim, "rb").read() != b"precious":
        fail("prepare_data wrote through a symlinked output")
    # A symlinked output directory is the user's choice: written into, as a directory.
    os.makedirs(f"{d}/real_out")
    os.symlink(f"{d}/real_out", f"{d}/linked_out")
    r = run([py, prep, corpus, "-o", f"{d}/linked_out", "--vocab-size", "300"])
    if r.returncode != 0 or not os.path.isfile(f"{d}/real_out/tokenizer.json"):
        fail(f"prepare_data -o a symlinked directory: exit {r.returncode} {r.stderr}")
    os.mkfifo(f"{d}/tok_fifo.json")
    expect_error([py, prep, corpus, "-o", f"{d}/o5", "--tokenizer", f"{d}/tok_fifo.json"],
                 "is not a regular file", "prepare_data FIFO --tokenizer")
    write(f"{d}/no_unk.json", json.dumps({"version": "1.0", "model": {
        "type": "WordLevel", "vocab": {"a": 0}, "unk_token": "<unk>"}}))
    expect_error([py, prep, corpus, "-o", f"{d}/o6", "--tokenizer", f"{d}/no_unk.json"],
                 "the tokenizer cannot encode the input", "prepare_data tokenizer without unk")

    # Seeded mutations of a JSONL file through its reader, in process.
    sys.path.insert(0, os.path.join(SRC, "scripts"))
    pd = load_module("prepare_data", prep)
    rng = random.Random(40)
    base = json.dumps({"text": "a record", "id": 1, "meta": {"n": [1, 2.5, None]}}).encode()
    pieces = [b"{", b"}", b"[", b"]", b'"', b"\\", b"\\u", b"\xff", b"\xc3", b"\n", b"\x00",
              b"1e999", b"NaN", b"-", b"9" * 30, b'"text":', b"\r\n", b"\xef\xbb\xbf"]
    outcomes = {"read": 0, "refused": 0}
    for case in range(1500):
        data = bytearray(base + b"\n" + base + b"\n")
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(data) + 1)
            op = rng.random()
            if op < 0.4:
                data[at:at] = rng.choice(pieces)
            elif op < 0.7 and data:
                del data[at:at + rng.randint(1, 8)]
            elif data:
                data[min(at, len(data) - 1)] = rng.randrange(256)
        path = write(f"{d}/m.jsonl" + (".gz" if case % 10 == 0 else ""),
                     gzip.compress(bytes(data)) if case % 10 == 0 else bytes(data))
        try:
            pd.split([path], 0.5)
            outcomes["read"] += 1
        except pd.UsageError:
            outcomes["refused"] += 1
        except Exception as e:
            fail(f"prepare_data JSONL mutation {case}: {type(e).__name__}: {e} on {bytes(data)!r}")
    parquet = f"{d}/dict.parquet"
    if os.path.exists(parquet):  # and of a Parquet file: truncated, bytes changed
        good = open(parquet, "rb").read()
        for case in range(300):
            data = bytearray(good)
            if case % 3 == 0:
                del data[rng.randrange(len(data)):]
            for _ in range(rng.randint(1, 6)):
                if data:
                    data[rng.randrange(len(data))] = rng.randrange(256)
            path = write(f"{d}/m.parquet", bytes(data))
            try:
                pd.split([path], 0.5)
                outcomes["read"] += 1
            except pd.UsageError as e:
                if "\n" in str(e):
                    fail(f"prepare_data Parquet mutation {case}: a message of several lines: {e}")
                outcomes["refused"] += 1
            except Exception as e:
                fail(f"prepare_data Parquet mutation {case}: {type(e).__name__}: {e}")
    print(f"prepare_data: input and output cases, 1500 JSONL and 300 Parquet mutations "
          f"({outcomes})")
    return pd


def streamed_cases(py, prep, d, bad):
    """prepare_data.py reads its inputs streamed, in batches that worker processes parse: a bad
    line or row deep in a large input is still one line naming the input and the line (or row
    group), from the scan, before any output; the same with --workers 1."""
    import gzip
    good = "".join(json.dumps({"text": f"record {i} " + "word " * (i % 40)}) + "\n"
                   for i in range(3000))
    lines = good.splitlines(keepends=True)
    deep = [("late_text.jsonl", lines[:2345] + ['{"text": "cut off\n'] + lines[2345:],
             "line 2346 is not JSON"),
            ("late_list.jsonl", lines[:2500] + ['["text"]\n'] + lines[2500:],
             "line 2501 is an array, not a JSON object"),
            ("late_field.jsonl", lines[:1999] + ['{"body": "a"}\n'] + lines[1999:],
             "line 2000 has no field 'text' (its fields: 'body')"),
            ("late_utf8.jsonl", [x.encode() for x in lines[:2800]] + [b'{"text": "\xff"}\n'],
             "line 2801 is not UTF-8"),
            ("truncated_end.jsonl", good[:-25], "line 3000 is not JSON")]
    for name, content, words in deep:
        data = b"".join(c if isinstance(c, bytes) else c.encode() for c in content) \
            if isinstance(content, list) else content
        for workers in ("1", "2"):
            bad(name, data, words, "--workers", workers, "--batch-bytes", "4000")
    text = ("a paragraph\nof two lines\n\n" * 500).encode()
    bad("late_latin1.txt", text + "caf\xe9\n".encode("latin-1"),
        "line 1501 is not UTF-8 text (invalid continuation byte", "--workers", "2",
        "--batch-bytes", "3000")
    packed = gzip.compress(good.encode())
    bad("cut.jsonl.gz", packed[:len(packed) // 2], "is not valid gzip data",
        "--workers", "2", "--batch-bytes", "4000")
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return
    rows = [f"row {i} " + "text " * (i % 50) for i in range(3000)]
    pq.write_table(pa.table({"text": rows}), f"{d}/groups.parquet", row_group_size=500)
    column = pq.ParquetFile(f"{d}/groups.parquet").metadata.row_group(3).column(0)
    data = bytearray(open(f"{d}/groups.parquet", "rb").read())
    at, size = column.data_page_offset, column.total_compressed_size
    data[at + 40:at + size - 10] = b"\xab" * (size - 50)  # row group 3's pages, not the footer
    bad("bad_group.parquet", bytes(data), "is not a readable Parquet file (row group 3, rows "
        "1501-2000", "--workers", "2", "--batch-bytes", "3000")
    rows[2222] = None
    pq.write_table(pa.table({"text": rows}), f"{d}/late_null.parquet", row_group_size=500)
    bad("late_null.parquet", open(f"{d}/late_null.parquet", "rb").read(),
        "row 2223: column 'text' is null, not a string", "--workers", "2", "--batch-bytes",
        "3000")
    for flag, value, words in [("--workers", "0", "--workers 0 must be at least 1"),
                               ("--batch-bytes", "0", "--batch-bytes 0 must be at least 1")]:
        expect_error([py, prep, f"{d}/one.txt", "-o", f"{d}/o7", flag, value], words,
                     f"prepare_data {flag} {value}")


def main():
    if not SRC:
        print("usage: script_inputs_test.py SOURCE_DIR CAROUSEL_BINARY WORK_DIR", file=sys.stderr)
        return 2
    venv = os.path.join(SRC, ".venv/bin/python")
    subprocess.run(["rm", "-rf", WORK], check=True)
    os.makedirs(WORK)
    merge_traces_cases()
    has_tokenizers = os.path.exists(venv) and run([venv, "-c", "import tokenizers"]).returncode == 0
    if not has_tokenizers:
        print(f"SKIP: the prepare_data.py and tokenizer.json parts: {venv} with the tokenizers "
              f"package not found (run scripts/setup.sh)")
    elif os.environ.get("SCRIPT_INPUTS_VENV") != "1":  # parts 2 and 3 in the venv's Python
        r = subprocess.run([venv, __file__, SRC, BIN, WORK + "/venv"],
                           env=dict(os.environ, SCRIPT_INPUTS_VENV="1"))
        if r.returncode != 0:
            failures.append("the .venv part failed")
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("script_inputs: all checks passed")
    return 0


def venv_main():
    subprocess.run(["rm", "-rf", WORK], check=True)
    os.makedirs(WORK)
    pd = prepare_data_cases(os.path.join(SRC, ".venv/bin/python"))
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import tokenizer_cases  # part 3, in its own file
    failures.extend(tokenizer_cases.run(pd, BIN, os.path.join(WORK, "tok"), run))
    print(f"{len(failures)} failure(s)" if failures else "venv part: all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(venv_main() if os.environ.get("SCRIPT_INPUTS_VENV") == "1" else main())
