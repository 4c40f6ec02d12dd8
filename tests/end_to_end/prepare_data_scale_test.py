#!/usr/bin/env python3
"""prepare_data_scale_test.py — scripts/prepare_data.py at scale (issue 40): streamed inputs,
worker processes, resuming, and the eos carousel reads.

    tests/end_to_end/prepare_data_scale_test.py SOURCE_DIR WORK_DIR [CAROUSEL_BINARY] [--memory]

1. The shards equal the ones computed here with the tokenizers library alone (documents cut,
   split by bytes, encoded and packed into llm.c shards by this file, not by the script): for
   the prepare_data ctest's inputs (tiny_corpus.txt, its paragraphs as JSONL, odd records, gzip,
   Parquet; the trained tokenizer.json too), as the script wrote them before it streamed.
2. A generated corpus (JSONL, gzip'd JSONL, text, Parquet of several row groups) in small
   batches and shards: bitwise the same files with --workers 1 and --workers 3.
3. --add-eos with a Llama 3-style (<|end_of_text|>), a Llama 2-style (</s>) and a
   tokenizer_config.json-named eos: that token after each record, the id carousel reads (its
   checkpoint's eos_token_id, when CAROUSEL_BINARY is given); no eos: one error naming
   --eos-token; --eos-token TEXT.
4. Resuming: stopped after some shards (PREPARE_DATA_STOP_AFTER_SHARDS), the last shard deleted,
   a shard cut short, then rerun: the same files as an uninterrupted run; a finished run is not
   redone; other arguments or a changed input start over; a tokenizer that fails mid-run leaves
   its complete shards valid and no partial one. Progress lines carry tokens/s and an ETA.
With --memory (the `slow` ctest): peak RSS (getrusage of the children) on a generated 50 MB and
200 MB corpus differs by less than 100 MB.

Needs SOURCE_DIR/.venv with tokenizers and pyarrow (scripts/setup.sh); exits 77 without.
"""
import glob
import gzip
import importlib.util
import json
import os
import re
import shutil
import struct
import subprocess
import sys

ARGS = [a for a in sys.argv[1:] if a != "--memory"]
MEMORY = "--memory" in sys.argv
SRC, WORK = ARGS[0], ARGS[1]
BIN = ARGS[2] if len(ARGS) > 2 else None
PY = os.path.join(SRC, ".venv/bin/python")
PREP = os.path.join(SRC, "scripts/prepare_data.py")
CORPUS = os.path.join(SRC, "tests/data/tiny_corpus.txt")
failures = []


def fail(msg):
    failures.append(msg)
    print(f"FAIL: {msg}", file=sys.stderr)


def prep(*args, env=None, timeout=300):
    return subprocess.run([PY, PREP, *args], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, **(env or {})))


def ok(r, label):
    if r.returncode != 0:
        fail(f"{label}: exit {r.returncode}: {r.stderr.strip()[-500:]}")
    return r.returncode == 0


# --- The reference: documents, split, encoding and shards, written here --------------------
def ref_docs(path, field="text"):
    """[(eos after it, text)] of one input, as docs/training.md defines documents."""
    name = path.lower()
    if name.endswith((".jsonl", ".jsonl.gz", ".json", ".json.gz")):
        opener = gzip.open if name.endswith(".gz") else open
        out = []
        with opener(path, "rb") as f:
            for n, raw in enumerate(f):
                line = raw.decode("utf-8-sig" if n == 0 else "utf-8")
                if line.strip():
                    out.append((True, json.loads(line)[field]))
        return out
    if name.endswith(".parquet"):
        import pyarrow.parquet as pq
        return [(True, t) for t in pq.read_table(path, columns=[field]).column(0).to_pylist()]
    text = open(path, encoding="utf-8", newline="").read()
    ends = [m.end() for m in re.finditer(r"\n[ \t]*\n(?:[ \t]*\n)*", text)]
    starts = [0] + ends
    docs = [text[a:b] for a, b in zip(starts, ends + [len(text)]) if a < b]
    return [(k == len(docs) - 1, d) for k, d in enumerate(docs)]


def ref_split(files, val_fraction, field="text"):
    docs = [d for f in files for d in ref_docs(f, field)]
    total = sum(len(d.encode()) for _, d in docs)
    cut, held = len(docs), 0
    while val_fraction > 0 and cut > 1 and held < val_fraction * total:
        cut -= 1
        held += len(docs[cut][1].encode())
    return docs[:cut], docs[cut:]


def ref_shards(files, tok, val_fraction, shard_tokens, eos_id=None, field="text", vocab=None):
    """{name: bytes} of the llm.c shards for these inputs and this tokenizer."""
    vocab = vocab or tok.get_vocab_size()
    magic, version, code, size = (20240520, 1, "H", 2) if vocab <= 65536 else (20240801, 7, "I", 4)
    out = {}
    for prefix, docs in zip(("train", "val"), ref_split(files, val_fraction, field)):
        ids = []
        for eos, text in docs:
            ids += tok.encode(text, add_special_tokens=False).ids
            if eos and eos_id is not None:
                ids.append(eos_id)
        for k in range(0, len(ids), shard_tokens):
            part = ids[k:k + shard_tokens]
            header = struct.pack("<256i", magic, version, len(part), *[0] * 253)
            out[f"{prefix}_{k // shard_tokens:06d}.bin"] = header + struct.pack(
                f"<{len(part)}{code}", *part)
    return out


def files_of(out, pattern="*"):
    return {os.path.basename(p): open(p, "rb").read()
            for p in sorted(glob.glob(os.path.join(out, pattern)))
            if not p.endswith("prepare_data.manifest.json")}


def shards_of(out):
    return {k: v for k, v in files_of(out).items() if re.fullmatch(r"(train|val)_\d+\.bin", k)}


def same_files(a, b, label):
    if a != b:
        diff = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
        fail(f"{label}: files differ: {diff[:8]}")
        return False
    return True


def trained_reference(texts, vocab_size):
    """The byte-level BPE the script trains, trained here, as JSON with string merges."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainer=trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<|endoftext|>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    j = json.loads(tok.to_str())
    j["model"]["merges"] = [m if isinstance(m, str) else " ".join(m) for m in j["model"]["merges"]]
    return j


# --- 1. The script's output before streaming, computed independently -------------------------
def inputs_of_prepare_data_test(d):
    """The inputs tests/end_to_end/prepare_data_test.sh makes (the same records)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    text = open(CORPUS, encoding="utf-8", newline="").read()
    paragraphs = re.split(r"(?<=\n\n)(?=[^\n])", text)
    odd = ["a record\n\nwith blank lines inside\n\n\nstays one document\n", "",
           "  Ünïcödé — 日本語, \"quotes\" and a tab\there 🚀  ",
           "the last record, no newline"]

    def write(path, records, field="text", opener=open):
        with opener(path, "wt", encoding="utf-8") as f:
            for i, r in enumerate(records):
                f.write(json.dumps({"id": i, field: r, "meta": {"n": len(r)}},
                                   ensure_ascii=i % 2 == 0))
                f.write("\n\n" if i == 2 else "\n")
    write(f"{d}/paragraphs.jsonl", paragraphs)
    write(f"{d}/odd.jsonl", odd)
    write(f"{d}/all.jsonl.gz", paragraphs + odd, field="body", opener=gzip.open)
    pq.write_table(pa.table({"text": paragraphs + odd}), f"{d}/all.parquet", row_group_size=3)


def check_reference():
    from tokenizers import Tokenizer
    d = os.path.join(WORK, "ref")
    os.makedirs(d)
    inputs_of_prepare_data_test(d)
    # Trained: the tokenizer.json is the library's BPE trained on the training split, and the
    # shards are its encoding.
    runs = [("a", [CORPUS], []), ("e", [CORPUS], ["--add-eos"]),
            ("j", [f"{d}/paragraphs.jsonl", f"{d}/odd.jsonl"], ["--add-eos"]),
            ("jz", [f"{d}/all.jsonl.gz"], ["--add-eos", "--text-field", "body"]),
            ("p", [f"{d}/all.parquet"], ["--add-eos"])]
    for name, files, extra in runs:
        out = f"{d}/{name}"
        if not ok(prep(*files, "-o", out, "--vocab-size", "300", "--val-fraction", "0.1",
                       *extra), f"reference {name}"):
            continue
        field = "body" if "body" in extra else "text"
        train, _ = ref_split(files, 0.1, field)
        want = trained_reference([t for _, t in train], 300)
        if json.load(open(f"{out}/tokenizer.json", encoding="utf-8")) != want:
            fail(f"reference {name}: tokenizer.json is not the library's BPE of the train split")
        tok = Tokenizer.from_file(f"{out}/tokenizer.json")
        eos = tok.token_to_id("<|endoftext|>") if "--add-eos" in extra else None
        same_files(shards_of(out), ref_shards(files, tok, 0.1, 100_000_000, eos, field),
                   f"reference {name}")
    # A --tokenizer, small shards, several inputs of every kind, no held-out split.
    tok_path = f"{d}/a/tokenizer.json"
    files = [CORPUS, f"{d}/odd.jsonl", f"{d}/all.parquet", CORPUS]
    if ok(prep(*files, "-o", f"{d}/m", "--tokenizer", tok_path, "--val-fraction", "0",
               "--add-eos", "--shard-tokens", "500"), "reference m"):
        tok = Tokenizer.from_file(tok_path)
        same_files(shards_of(f"{d}/m"), ref_shards(files, tok, 0, 500, tok.token_to_id(
            "<|endoftext|>")), "reference m (--tokenizer, --shard-tokens 500)")
    print("1. shards as computed with the tokenizers library alone: checked")
    return tok_path


# --- 2. --workers 1 and 3 ----------------------------------------------------------------------
def generated_inputs(d):
    import pyarrow as pa
    import pyarrow.parquet as pq
    spec = importlib.util.spec_from_file_location(
        "prepare_data_bench", os.path.join(SRC, "benchmarks/prepare_data_bench.py"))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    bench.generate(f"{d}/big.jsonl", 1_200_000)
    records = [json.loads(line)["text"] for line in open(f"{d}/big.jsonl", encoding="utf-8")]
    n = len(records)  # about 400
    with gzip.open(f"{d}/part.jsonl.gz", "wt", encoding="utf-8") as f:
        for r in records[:n // 4]:
            f.write(json.dumps({"text": r}) + "\n")
    with open(f"{d}/prose.txt", "w", encoding="utf-8", newline="") as f:
        f.write("\n\n \n".join(records[n // 4:n // 2]))
    pq.write_table(pa.table({"text": records[n // 2:]}), f"{d}/rows.parquet",
                   row_group_size=n // 10)
    return [f"{d}/big.jsonl", f"{d}/part.jsonl.gz", f"{d}/prose.txt", f"{d}/rows.parquet"]


def check_workers():
    from tokenizers import Tokenizer
    d = os.path.join(WORK, "workers")
    os.makedirs(d)
    files = generated_inputs(d)
    common = ["--vocab-size", "1000", "--add-eos", "--shard-tokens", "40000",
              "--batch-bytes", "30000"]
    for w in (1, 3):
        ok(prep(*files, "-o", f"{d}/w{w}", "--workers", str(w), *common), f"--workers {w}")
    one, three = files_of(f"{d}/w1"), files_of(f"{d}/w3")
    if same_files(one, three, "--workers 1 vs 3") and len(shards_of(f"{d}/w1")) < 4:
        fail(f"--workers: only {len(shards_of(f'{d}/w1'))} shards, expected several")
    tok = Tokenizer.from_file(f"{d}/w1/tokenizer.json")
    same_files(shards_of(f"{d}/w3"), ref_shards(files, tok, 0.05, 40000, tok.token_to_id(
        "<|endoftext|>")), "--workers 3 vs the reference")
    print(f"2. --workers 1 and 3: the same {len(one)} files, as the reference")
    return files, f"{d}/w1/tokenizer.json"


# --- 3. The eos carousel reads -----------------------------------------------------------------
def check_eos():
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    d = os.path.join(WORK, "eos")
    os.makedirs(d)
    texts = [t for _, t in ref_docs(CORPUS)]
    records = f"{d}/records.jsonl"
    with open(records, "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps({"text": t}) + "\n")

    def bytelevel(specials, path):  # Llama 3-style: byte-level BPE, specials after the vocab
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        tok.train_from_iterator(texts, trainer=trainers.BpeTrainer(
            vocab_size=300, show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
        tok.add_special_tokens(specials)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tok.save(path)
        return tok

    llama3 = bytelevel(["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"], f"{d}/l3/tok.json")
    both = bytelevel(["<|endoftext|>", "<|end_of_text|>"], f"{d}/both/tok.json")
    named = bytelevel(["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"],
                      f"{d}/named/tokenizer.json")
    json.dump({"eos_token": {"content": "<|eot_id|>", "special": True}, "bos_token": None},
              open(f"{d}/named/tokenizer_config.json", "w"))
    bytelevel(["<|end_of_text|>"], f"{d}/noeos_config/tokenizer.json")
    json.dump({"model_max_length": 8192}, open(f"{d}/noeos_config/tokenizer_config.json", "w"))
    llama2 = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))  # sentencepiece-like
    llama2.normalizer = normalizers.Sequence([normalizers.Prepend("▁"),
                                              normalizers.Replace(" ", "▁")])
    llama2.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                        decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    llama2.train_from_iterator(texts, trainer=trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False))
    os.makedirs(f"{d}/l2")
    llama2.save(f"{d}/l2/tok.json")
    cases = [("llama3", f"{d}/l3/tok.json", llama3, "<|end_of_text|>"),
             ("gpt2+llama3 names", f"{d}/both/tok.json", both, "<|end_of_text|>"),
             ("llama2", f"{d}/l2/tok.json", llama2, "</s>"),
             ("tokenizer_config.json", f"{d}/named/tokenizer.json", named, "<|eot_id|>")]
    for case, (label, path, tok, eos) in enumerate(cases):
        out = f"{d}/out_{label.split()[0]}"
        if not ok(prep(records, "-o", out, "--tokenizer", path, "--add-eos", "--val-fraction",
                       "0.2"), f"eos {label}"):
            continue
        eos_id = tok.token_to_id(eos)
        if label == "llama2" and eos_id != 2:
            fail(f"eos {label}: </s> is id {eos_id}, expected 2")
        same_files(shards_of(out), ref_shards([records], tok, 0.2, 100_000_000, eos_id),
                   f"eos {label}: {eos} (id {eos_id}) after each record")
        if label == "tokenizer_config.json" and not os.path.isfile(
                f"{out}/tokenizer_config.json"):
            fail("eos tokenizer_config.json: not copied beside the output tokenizer.json")
        if BIN:  # carousel reads the same eos from the output directory
            vocab = tok.get_vocab_size()
            r = subprocess.run([BIN, "train", "base_num_decoder_layers=2",
                                "max_target_length=16", "per_device_batch_size=2",
                                "dataset_type=tokens", f"dataset_path={out}/train_*.bin",
                                f"tokenizer_path={out}/tokenizer.json", f"vocab_size={vocab}",
                                "steps=1", f"base_output_directory={d}", f"run_name=c{case}",
                                "log_level=warn"], capture_output=True, text=True, timeout=300)
            config = f"{d}/c{case}/checkpoints/1/config.json"
            if not os.path.exists(config):
                fail(f"eos {label}: carousel train exited {r.returncode}: {r.stderr[-300:]}")
                continue
            theirs = json.load(open(config)).get("eos_token_id")
            if theirs != eos_id:
                fail(f"eos {label}: carousel reads eos {theirs}, the shards hold {eos_id}")
    # No eos: one error naming --eos-token; --eos-token names one.
    plain = Tokenizer(models.WordLevel(vocab={"<unk>": 0, "<sep>": 1, "the": 2}, unk_token="<unk>"))
    plain.pre_tokenizer = pre_tokenizers.Whitespace()
    plain.save(f"{d}/plain.json")
    for path, words in [(f"{d}/plain.json",
                         "no special added <|end_of_text|>, </s>, <|endoftext|>"),
                        (f"{d}/noeos_config/tokenizer.json", "names no eos_token")]:
        r = prep(records, "-o", f"{d}/x", "--tokenizer", path, "--add-eos")
        lines = r.stderr.splitlines()
        if r.returncode != 2 or len(lines) != 1 or "--eos-token" not in lines[0] or \
                words not in lines[0] or os.path.exists(f"{d}/x"):
            fail(f"eos none ({path}): exit {r.returncode}, {r.stderr!r}")
    r = prep(records, "-o", f"{d}/x", "--tokenizer", f"{d}/plain.json", "--eos-token", "nope")
    if r.returncode != 2 or "--eos-token \"nope\" is not a token" not in r.stderr:
        fail(f"--eos-token nope: exit {r.returncode}, {r.stderr!r}")
    r = prep(records, "-o", f"{d}/sep", "--tokenizer", f"{d}/plain.json", "--eos-token", "<sep>")
    if ok(r, "--eos-token <sep>"):
        same_files(shards_of(f"{d}/sep"), ref_shards([records], plain, 0.05, 100_000_000, 1),
                   "--eos-token <sep>")
        if "with packing=true set eos_id=1" not in r.stdout:
            fail(f"--eos-token <sep>: no note that carousel reads another eos: {r.stdout!r}")
    print(f"3. eos: {', '.join(c[0] for c in cases)}, none (refused), --eos-token: checked"
          f"{'' if BIN else ' (carousel not given: its reading not compared)'}")


# --- 4. Resuming, errors mid-run, progress ----------------------------------------------------
def check_resume(files, tok_path):
    d = os.path.join(WORK, "resume")
    os.makedirs(d)
    args = ["--tokenizer", tok_path, "--add-eos", "--shard-tokens", "30000", "--batch-bytes",
            "40000", "--workers", "2"]
    ok(prep(*files, "-o", f"{d}/full", *args), "resume: the uninterrupted run")
    full = files_of(f"{d}/full")
    out = f"{d}/r"
    r = prep(*files, "-o", out, *args, env={"PREPARE_DATA_STOP_AFTER_SHARDS": "3"})
    lines = r.stderr.splitlines()
    if r.returncode != 130 or len(lines) != 1 or not lines[0].startswith("interrupted"):
        fail(f"resume: a stop after 3 shards: exit {r.returncode}, {r.stderr!r}")
    if len(shards_of(out)) != 3 or glob.glob(f"{out}/*.tmp"):
        fail(f"resume: after the stop: {sorted(os.listdir(out))}")
    steps = [("rerun after the stop", lambda: None),
             ("the last shard deleted", lambda: os.unlink(sorted(glob.glob(f"{out}/val_*"))[-1])),
             ("a shard cut short", lambda: os.truncate(f"{out}/train_000002.bin", 3000))]
    for label, damage in steps:
        damage()
        r = prep(*files, "-o", out, *args)
        if ok(r, f"resume: {label}") and "tokenized" not in r.stdout:
            fail(f"resume: {label}: nothing tokenized: {r.stdout!r}")
        same_files(files_of(out), full, f"resume: {label}")
    r = prep(*files, "-o", out, *args)
    if r.returncode != 0 or "complete already" not in r.stdout:
        fail(f"resume: a finished run is redone: {r.stdout!r} {r.stderr!r}")
    other = [a if a != "30000" else "45000" for a in args]  # another --shard-tokens
    r = prep(*files, "-o", out, *other)
    ok(prep(*files, "-o", f"{d}/other", *other), "resume: other arguments")
    if "starting over" not in r.stderr:
        fail(f"resume: other arguments: no 'starting over' note: {r.stderr!r}")
    same_files(files_of(out), files_of(f"{d}/other"), "resume: other arguments start over")
    os.utime(files[0])  # a changed input: its time
    r = prep(*files, "-o", f"{d}/other", *other)
    if "starting over" not in r.stderr or "complete already" in r.stdout:
        fail(f"resume: a touched input is not a new run: {r.stdout!r} {r.stderr!r}")
    # A trained tokenizer: stopped, resumed (not trained again), the same files.
    targs = ["--vocab-size", "800", "--shard-tokens", "30000", "--batch-bytes", "40000"]
    ok(prep(*files, "-o", f"{d}/tfull", *targs), "resume: trained, uninterrupted")
    r = prep(*files, "-o", f"{d}/t", *targs, env={"PREPARE_DATA_STOP_AFTER_SHARDS": "2"})
    r2 = prep(*files, "-o", f"{d}/t", *targs)
    if r.returncode != 130 or not ok(r2, "resume: trained"):
        fail(f"resume: trained: exits {r.returncode}, {r2.returncode}")
    same_files(files_of(f"{d}/t"), files_of(f"{d}/tfull"), "resume: trained tokenizer")
    print("4. resume: stopped, a shard deleted, a shard cut short; finished; other args: checked")


def check_failure_mid_run():
    """A tokenizer that fails on a later record: one error, the complete shards stay valid."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    d = os.path.join(WORK, "midrun")
    os.makedirs(d)
    tok = Tokenizer(models.WordLevel(vocab={"a": 0, "b": 1}, unk_token="<unk>"))  # no <unk>
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(f"{d}/tok.json")
    with open(f"{d}/in.jsonl", "w") as f:
        for i in range(3000):
            f.write(json.dumps({"text": "a b " * 20 + ("c" if i == 2500 else "")}) + "\n")
    r = prep(f"{d}/in.jsonl", "-o", f"{d}/out", "--tokenizer", f"{d}/tok.json", "--workers",
             "2", "--batch-bytes", "5000", "--shard-tokens", "10000", "--val-fraction", "0")
    lines = r.stderr.splitlines()
    if r.returncode != 2 or len(lines) != 1 or "the tokenizer cannot encode the input" not in \
            lines[0] or "Traceback" in r.stderr:
        fail(f"mid-run failure: exit {r.returncode}, {r.stderr!r}")
    shards = shards_of(f"{d}/out")
    manifest = json.load(open(f"{d}/out/prepare_data.manifest.json"))
    if len(shards) < 3 or glob.glob(f"{d}/out/*.tmp") or \
            [s["name"] for s in manifest["shards"]] != sorted(shards):
        fail(f"mid-run failure: shards {sorted(shards)}, manifest {manifest['shards'][:2]}")
    for name, b in shards.items():
        magic, version, n = struct.unpack("<3i", b[:12])
        if (magic, version, n) != (20240520, 1, 10000) or len(b) != 1024 + 2 * n or \
                set(struct.unpack(f"<{n}H", b[1024:])) != {0, 1}:
            fail(f"mid-run failure: {name} is not a whole shard of the records before")
    print(f"   a tokenizer failing mid-run: one error, {len(shards)} complete shards kept")


def check_progress(files, tok_path):
    r = prep(*files, "-o", os.path.join(WORK, "progress"), "--tokenizer", tok_path,
             "--batch-bytes", "200000", env={"PREPARE_DATA_PROGRESS_INTERVAL": "0"})
    lines = [x for x in r.stderr.splitlines() if x.startswith("tokenize:")]
    if not ok(r, "progress") or not lines or not all(
            re.search(r"% of [\d.,]+ MB, .* tokens/s, ETA \d+", x) for x in lines):
        fail(f"progress: {r.stderr[-600:]!r}")
    print(f"   progress: {len(lines)} lines like {lines[-1] if lines else None!r}")


# --- With --memory: peak RSS does not grow with the input --------------------------------------
def check_memory():
    spec = importlib.util.spec_from_file_location(
        "prepare_data_bench", os.path.join(SRC, "benchmarks/prepare_data_bench.py"))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    d = os.path.join(WORK, "memory")
    os.makedirs(d)
    bench.generate(f"{d}/sample.jsonl", 2_000_000)
    ok(prep(f"{d}/sample.jsonl", "-o", f"{d}/tok", "--vocab-size", "4096", "--val-fraction",
            "0"), "memory: the tokenizer")
    peaks = {}
    for mb in (50, 200):
        corpus = f"{d}/c{mb}.jsonl"
        bench.generate(corpus, mb * 1_000_000)
        rc, out, wall, largest, tree, _, _ = bench.measured(
            [PY, PREP, corpus, "-o", f"{d}/o{mb}", "--tokenizer", f"{d}/tok/tokenizer.json",
             "--add-eos", "--workers", "2"])
        if rc != 0:
            fail(f"memory: {mb} MB: exit {rc}")
        peaks[mb] = largest
        print(f"   {mb} MB: {wall:.0f} s, peak RSS {largest / 2**20:.0f} MiB (largest process),"
              f" {tree / 2**20:.0f} MiB (all)")
        os.unlink(corpus)
        shutil.rmtree(f"{d}/o{mb}")
    growth = (peaks[200] - peaks[50]) / 2**20
    if growth >= 100:
        fail(f"memory: peak RSS grew by {growth:.0f} MiB from 50 MB to 200 MB of input")
    print(f"memory: peak RSS grew by {growth:.0f} MiB from 50 to 200 MB of input (< 100)")


def main():
    try:
        import pyarrow  # noqa: F401
        import tokenizers  # noqa: F401
    except ImportError as e:
        print(f"SKIP: {e} (run scripts/setup.sh)")
        return 77
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    if MEMORY:
        check_memory()
    else:
        check_reference()
        files, tok_path = check_workers()
        check_eos()
        check_resume(files, tok_path)
        check_failure_mid_run()
        check_progress(files, tok_path)
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("prepare_data_scale: all checks passed")
    return 0


if __name__ == "__main__":
    if not os.path.exists(PY):
        print(f"SKIP: {PY} not found (run scripts/setup.sh)")
        sys.exit(77)
    if os.environ.get("PREPARE_DATA_SCALE_VENV") != "1":  # run in the .venv's Python
        sys.exit(subprocess.run([PY, __file__, *sys.argv[1:]],
                                env=dict(os.environ, PREPARE_DATA_SCALE_VENV="1")).returncode)
    sys.exit(main())
