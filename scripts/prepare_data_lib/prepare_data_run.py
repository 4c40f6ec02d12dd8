#!/usr/bin/env python3
"""prepare_data_run.py — scripts/prepare_data.py's passes over its inputs, streamed: the scan
(every input checked, its documents and bytes counted, so the split is known before any shard is
written), the training of a tokenizer on the training split, and the tokenizing into shards as
they fill; and resuming from the manifest an interrupted run left (prepare_data_shards.py).
"""
import hashlib
import json
import os
import signal
import sys
import time

import prepare_data_pool as pool
import tokenizer_json
from prepare_data_inputs import (UsageError, check_inputs, empty_jsonl, input_kind, parse_batch,
                                 read_batches)
from prepare_data_shards import (MANIFEST, MANIFEST_VERSION, NARROW, WIDE, COMPANIONS, OutputDir,
                                 ShardStream, read_manifest, valid_shards)
from prepare_data_tokenizer import (companion_config, companions, read_tokenizer, resolve_eos,
                                    tokenizer_text, train_tokenizer)


class Interrupted(Exception):
    """SIGTERM, or the PREPARE_DATA_STOP_AFTER_SHARDS=N test hook (a stop after the N-th shard
    this run writes): the run ends as after Ctrl-C."""


class Splitter:
    """Which split document k goes to, knowing only the bytes up to it: the held-out split is
    the last documents together at least val_fraction of the `total` bytes (at least one
    document each side), i.e. document k trains unless the documents after it hold less. (The
    same cut as walking back from the end, done walking forward, so it streams.)"""

    def __init__(self, total, docs, val_fraction):
        self.total, self.docs, self.target = total, docs, val_fraction * total
        self.all_train = val_fraction == 0

    def train(self, k, through):  # `through`: the bytes of documents 0..k
        return self.all_train or k == 0 or (
            k + 1 < self.docs and not self.total - through < self.target)


class Tally:
    """Documents and bytes per input, in order: a JSONL input without records is refused once
    it has been read through."""

    def __init__(self, files, field):
        self.files, self.field = files, field
        self.counts, self.next, self.docs, self.bytes = [0] * len(files), 0, 0, 0

    def add(self, b, docs, nbytes):
        self.through(b.file)
        self.counts[b.file] += docs
        self.docs += docs
        self.bytes += nbytes

    def through(self, upto):
        while self.next < upto:
            if input_kind(self.files[self.next]) == "jsonl" and self.counts[self.next] == 0:
                raise empty_jsonl(self.files[self.next], self.field)
            self.next += 1

    def close(self, val_fraction):
        self.through(len(self.files))
        if self.bytes == 0:
            raise UsageError("the inputs hold no text")
        if val_fraction > 0 and self.docs < 2:
            raise UsageError(f"--val-fraction {val_fraction} needs at least 2 documents "
                             f"(paragraphs, JSONL/Parquet records) to split; the inputs hold "
                             f"{self.docs}")
        return self.docs, self.bytes


def shard_format(vocab):
    return NARROW if vocab <= (1 << 16) else WIDE  # uint16 ids when every id fits


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def scan(args, workers, total_size):
    """(documents, bytes) of all inputs, every document parsed and checked."""
    tally, progress = Tally(args.inputs, args.text_field), pool.Progress("scan", total_size)
    with pool.ordered(workers, (args.text_field,)) as run:
        for b, (docs, nbytes) in run(pool.scan_batch, read_batches(
                args.inputs, args.text_field, args.batch_bytes)):
            tally.add(b, docs, nbytes)
            progress.update(b.done)
    progress.close()
    return tally.close(args.val_fraction)


def training_docs(args, splitter, total_size):
    """(None, document) for each document of the training split, read as the trainer asks."""
    progress, k, through = pool.Progress("train tokenizer", total_size), 0, 0
    for b in read_batches(args.inputs, args.text_field, args.batch_bytes):
        texts, _, sizes = parse_batch(b, args.text_field)
        for text, size in zip(texts, sizes):
            through += size
            if not splitter.train(k, through):
                progress.close()
                return
            k += 1
            yield None, text
        progress.update(b.done)
    progress.close()


def encode(args, workers, splitter, stream, initargs, total_size):
    """Tokenize from where the stream's last complete shard says (the beginning when none),
    writing the tokens after those already in shards."""
    shards = stream.manifest["shards"]
    mark = shards[-1]["resume"] if shards else None
    k, through, pos = (mark["doc"], mark["bytes"], mark["tokens"]) if mark else (0, 0, 0)
    skip = stream.emitted - pos  # tokens from `mark` on that complete shards already hold
    size = stream.itemsize
    done = sum(os.path.getsize(f) for f in args.inputs[:mark["file"]]) if mark else 0
    progress, made = pool.Progress("tokenize", total_size, done), 0
    batches = read_batches(args.inputs, args.text_field, args.batch_bytes, mark)
    with pool.ordered(workers, initargs) as run:
        for b, (sizes, counts, data) in run(pool.encode_batch, batches):
            stream.mark = {"file": b.file, "offset": b.offset, "line": b.line, "doc": k,
                           "bytes": through, "tokens": pos}
            first_val = len(sizes)  # the documents after the first held-out one are held out
            for i, s in enumerate(sizes):
                through += s
                if first_val == len(sizes) and not splitter.train(k + i, through):
                    first_val = i
            k += len(sizes)
            cut, n = sum(counts[:first_val]), len(data) // size
            for prefix, lo, hi in (("train", 0, cut), ("val", cut, n)):
                drop = min(skip, hi - lo)
                skip -= drop
                if hi - lo - drop > 0:
                    stream.write(prefix, memoryview(data)[(lo + drop) * size:hi * size])
                    made += hi - lo - drop
                pos += hi - lo
            progress.update(b.done, made)
    stream.end()
    progress.close()
    return made


def stop_hook():
    """PREPARE_DATA_STOP_AFTER_SHARDS=N: stop as an interruption after N shards (tests)."""
    try:
        stop = int(os.environ.get("PREPARE_DATA_STOP_AFTER_SHARDS", "0"))
    except ValueError:
        stop = 0
    written = [0]

    def on_shard():
        written[0] += 1
        if stop and written[0] >= stop:
            raise Interrupted(f"PREPARE_DATA_STOP_AFTER_SHARDS={stop}")
    return on_shard


def on_sigterm(signum, frame):
    raise Interrupted("SIGTERM")


def prepare(args):
    """The whole run; returns the exit status."""
    signal.signal(signal.SIGTERM, on_sigterm)
    prints = check_inputs(args.inputs)
    total_size = sum(p[1] for p in prints)
    workers = args.workers if total_size > args.batch_bytes else 1  # one batch: no pool
    key = {"inputs": prints, "text_field": args.text_field, "val_fraction": args.val_fraction,
           "shard_tokens": args.shard_tokens, "add_eos": args.add_eos,
           "eos_token": args.eos_token, "vocab_size": None, "tokenizer": None}
    extra, config = {}, None
    if args.tokenizer:  # read, checked and its eos found before any work
        _, vocab, tok_bytes, j = read_tokenizer(args.tokenizer)
        extra = companions(args.tokenizer)
        config = companion_config(extra)
        eos_name, eos_id = resolve_eos(args.add_eos, args.eos_token, j, config,
                                       f"--tokenizer '{args.tokenizer}'")
        key["tokenizer"] = {"sha256": sha256(tok_bytes),
                            **{n: sha256(b) for n, b in sorted(extra.items())}}
    else:
        key["vocab_size"] = args.vocab_size
    old = read_manifest(args.out)
    same = old is not None and old.get("key") == json.loads(json.dumps(key)) and \
        isinstance(old.get("scan"), dict)
    if old is not None and not same:
        print(f"note: '{os.path.join(args.out, MANIFEST)}' is from a run with other arguments "
              f"or inputs: starting over", file=sys.stderr)

    if same:  # resumed: the scan's counts are the manifest's
        docs, total = old["scan"]["docs"], old["scan"]["bytes"]
    else:
        docs, total = scan(args, workers, total_size)
    splitter = Splitter(total, docs, args.val_fraction)
    manifest = {"version": MANIFEST_VERSION, "key": key, "scan": {"docs": docs, "bytes": total},
                "shards": []}

    written_tok = os.path.join(args.out, "tokenizer.json")
    resumed = same and old.get("tokenizer_sha256") and os.path.isfile(written_tok) and \
        not os.path.islink(written_tok) and \
        sha256(open(written_tok, "rb").read()) == old["tokenizer_sha256"]
    why_pairs = old.get("pair_merges") if resumed else None
    if resumed and not args.tokenizer:  # the tokenizer trained before, not trained again
        with open(written_tok, "rb") as f:
            tok_bytes = f.read()
        vocab = tokenizer_json.vocab_size(json.loads(tok_bytes.decode()))
    keep = set()
    if resumed:
        manifest["shards"] = valid_shards(args.out, old, shard_format(vocab))
        keep = {s["name"] for s in manifest["shards"]}
    out = OutputDir(args.out, keep, UsageError)
    if resumed:
        manifest["tokenizer_sha256"], manifest["pair_merges"] = old["tokenizer_sha256"], why_pairs
    else:
        out.save_manifest(manifest)  # the scan is kept even if the training is interrupted
        if not args.tokenizer:
            tok = train_tokenizer(training_docs(args, splitter, total_size), args.vocab_size)
            text, why_pairs = tokenizer_text(tok)
            tok_bytes = text.encode()
            vocab = max(tok.get_vocab(with_added_tokens=True).values()) + 1
        out.write("tokenizer.json", [tok_bytes])
        for name in COMPANIONS:  # this run's, none of another run's
            if name in extra:
                out.write(name, [extra[name]])
            elif out.size_of(name) is not None:
                os.unlink(name, dir_fd=out.fd)
        manifest["tokenizer_sha256"] = sha256(tok_bytes)
        manifest["pair_merges"] = why_pairs
        out.save_manifest(manifest)
    fmt = shard_format(vocab)
    if not args.tokenizer:
        j = json.loads(tok_bytes.decode())
        eos_name, eos_id = resolve_eos(args.add_eos, args.eos_token, j, None,
                                       "the trained tokenizer")

    t0 = time.monotonic()
    complete = resumed and old.get("complete") and len(manifest["shards"]) == len(old["shards"])
    stream = ShardStream(out, fmt, args.shard_tokens, manifest, stop_hook())
    if complete:
        print(f"{args.out}: complete already (its {MANIFEST} says so and every shard is there)")
        made = 0
    else:
        try:
            made = encode(args, workers, splitter, stream,
                          (args.text_field, tok_bytes.decode(), eos_id, fmt[2]), total_size)
        except BaseException:
            stream.abandon()  # the shard being filled; the complete ones stay, resumable
            raise
        manifest["complete"] = True
        out.save_manifest(manifest)
        took = time.monotonic() - t0
        print(f"tokenized {made:,} tokens in {took:.1f} s ({made / max(took, 1e-9):,.0f} "
              f"tokens/s, {workers} worker(s))")
    return report(args, stream, vocab, why_pairs, eos_name, eos_id, j, config)


def report(args, stream, vocab, why_pairs, eos_name, eos_id, j, config):
    tok_path = os.path.join(args.out, "tokenizer.json")
    for prefix in ("train", "val") if args.val_fraction > 0 else ("train",):
        print(f"{prefix}: {stream.count[prefix]} shard(s), {stream.tokens[prefix]} tokens")
    print(f"tokenizer: {tok_path} ({vocab} tokens)")
    if why_pairs:
        print(f"note: {tok_path} keeps its BPE merges as pairs ({why_pairs}), so it needs "
              f"tokenizers >= 0.20 (transformers >= 4.45) to load")
    if eos_id is not None:
        theirs = tokenizer_json.eos_token(j, config)
        their_id = None if theirs is None else tokenizer_json.id_of(j, theirs)
        if their_id != eos_id:
            theirs = "no eos" if their_id is None else f"the eos id {their_id}"
            print(f"note: documents end with {tokenizer_json.quoted(eos_name)} (id {eos_id}), "
                  f"but carousel reads {theirs} from {tok_path}: with packing=true set "
                  f"eos_id={eos_id}")
    cmd = (f"carousel train dataset_type=tokens 'dataset_path={args.out}/train_*.bin' "
           f"tokenizer_path={tok_path} vocab_size={vocab}")
    if args.val_fraction > 0:
        cmd += f" 'eval_dataset_path={args.out}/val_*.bin' eval_interval=100"
    print("train with:", cmd)
    return 0
