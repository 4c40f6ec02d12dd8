#!/usr/bin/env python3
"""prepare_data_pool.py — scripts/prepare_data.py's work on batches of documents: parsing them
(the scan that counts the bytes before the split) and tokenizing them, in --workers processes
or in the main one, the results in input order; and the progress line on stderr.

Order: the main process submits batches in input order and takes the results back in that order
(a window of at most 2 x workers batches in flight, so the reading never runs ahead of the
tokenizing and memory stays bounded), so the shards are the same for any number of workers.
Each worker tokenizes on one core (TOKENIZERS_PARALLELISM=false): --workers N uses N cores.
"""
import collections
import contextlib
import multiprocessing
import os
import signal
import sys
import time
from array import array

from prepare_data_inputs import UsageError, one_line, parse_batch

STATE = {}  # this process's: the text field, the tokenizer, the eos id, the token type code


def setup(field, tokenizer_text=None, eos_id=None, code="H"):
    """Ready this process for scan_batch / encode_batch."""
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one core each (read at every encode call)
    STATE.update(field=field, eos_id=eos_id, code=code, tok=None)
    if tokenizer_text is not None:
        from tokenizers import Tokenizer
        STATE["tok"] = Tokenizer.from_str(tokenizer_text)


def scan_batch(b):
    """(documents, their UTF-8 bytes) of a batch, every document checked."""
    _, _, sizes = parse_batch(b, STATE["field"])
    return len(sizes), sum(sizes)


def encode_batch(b):
    """(UTF-8 bytes per document, tokens per document, the tokens as little-endian bytes):
    each document encoded on its own (no special tokens added), an eos after it when its flag
    and an eos id say so."""
    texts, eos, sizes = parse_batch(b, STATE["field"])
    tok, eos_id = STATE["tok"], STATE["eos_id"]
    # encode_batch_fast (tokenizers >= 0.21): the same ids, without the offsets (10% faster)
    encode = getattr(tok, "encode_batch_fast", tok.encode_batch)
    try:
        encodings = encode(texts, add_special_tokens=False)
    except BaseException as e:  # a --tokenizer that cannot encode (a WordLevel without its unk)
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        where = f"line {b.line}" if b.kind != "parquet" else f"row {b.offset + 1}"
        raise UsageError(f"the tokenizer cannot encode the input: '{b.path}' at or after {where} "
                         f"({one_line(e)})")
    out, counts = array(STATE["code"]), []
    for enc, last in zip(encodings, eos):
        ids = enc.ids
        out.extend(ids)
        if last and eos_id is not None:
            out.append(eos_id)
            counts.append(len(ids) + 1)
        else:
            counts.append(len(ids))
    if sys.byteorder == "big":  # llm.c shards are little-endian
        out.byteswap()
    return sizes, counts, out.tobytes()


def worker_main(initargs, tasks, results):
    """A worker process: batches from its task queue, results (or the error) to its pipe, in
    the order given."""
    # Ctrl-C reaches the whole process group: the main process alone ends the run (and says how
    # to resume); a worker stopping on its own would only print a traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        setup(*initargs)
    except BaseException as e:  # reported with the first result
        failed = UsageError(f"a worker process could not start ({one_line(e)})")
    else:
        failed = None
    while True:
        item = tasks.get()
        if item is None:
            return
        fn, b = item
        try:
            if failed:
                raise failed
            out = ("ok", fn(b))
        except UsageError as e:
            out = ("error", e)
        except MemoryError:
            out = ("error", UsageError("out of memory in a worker process (fewer --workers or a "
                                       "smaller --batch-bytes)"))
        except BaseException as e:  # never a traceback: one line, the main process ends the run
            out = ("error", UsageError(f"a worker process failed on '{b.path}' ({type(e).__name__}:"
                                       f" {one_line(e)})"))
        results.send(out)


@contextlib.contextmanager
def ordered(workers, initargs):
    """A function map(fn, batches) -> (batch, fn(batch)) in batch order: in this process for 1
    worker, else in `workers` spawned processes (spawn, not fork: the tokenizers library's
    threads do not survive a fork), batch k going to worker k mod workers. Each worker has a
    task queue (its feeder thread: the main process never blocks handing out work) and a result
    pipe, read in batch order; a worker that dies closes its pipe, which is then one error.
    (Not concurrent.futures: Python 3.11's process pool can hang for ever when a worker is
    killed mid-run, cpython issue 94777.)"""
    if workers <= 1:
        setup(*initargs)
        yield lambda fn, batches: ((b, fn(b)) for b in batches)
        return
    ctx = multiprocessing.get_context("spawn")
    procs, tasks, results = [], [], []
    for _ in range(workers):
        q, (r, w) = ctx.Queue(), ctx.Pipe(duplex=False)
        p = ctx.Process(target=worker_main, args=(initargs, q, w), daemon=True)
        p.start()
        w.close()  # the worker's end: a worker's death is then EOF here
        procs.append(p)
        tasks.append(q)
        results.append(r)
    window = 2 * workers  # batches in flight: memory stays bounded whatever the input size

    def run(fn, batches):
        pending, k = collections.deque(), 0
        for b in batches:
            if b.kind == "error":  # a reading error waits its turn: an earlier batch may fail
                pending.append((b, None))
            else:
                tasks[k % workers].put((fn, b))
                pending.append((b, k % workers))
                k += 1
            if len(pending) >= window:
                yield take(pending)
        while pending:
            yield take(pending)

    def take(pending):
        b, i = pending.popleft()
        if i is None:
            raise b.data
        try:
            status, out = results[i].recv()
        except (EOFError, OSError):
            raise UsageError("a worker process ended unexpectedly (killed, or out of memory? "
                             "try fewer --workers); run the same command again to continue")
        if status == "error":
            raise out
        return b, out
    try:
        yield run
    except BaseException:
        for p in procs:  # mid-batch: not waited for
            p.kill()
        for q in tasks:
            q.cancel_join_thread()  # its feeder thread may be stuck on a pipe no one reads
        raise
    else:
        for q in tasks:
            q.put(None)
    finally:
        for p in procs:
            p.join()
        for q, r in zip(tasks, results):
            q.close()
            r.close()


def default_workers():
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return max(1, min(cores, 8))


def seconds(s):
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else (
        f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s")


class Progress:
    """One line on stderr: bytes read of the inputs' size, tokens/s and an ETA from the bytes
    per second of this run; redrawn every 0.5 s on a terminal, a line every 30 s otherwise
    (PREPARE_DATA_PROGRESS_INTERVAL=SECONDS sets it)."""

    def __init__(self, phase, total, done=0, stream=sys.stderr):
        self.phase, self.total, self.start_done, self.stream = phase, max(total, 1), done, stream
        self.tty = stream.isatty()
        default = 0.5 if self.tty else 30.0
        try:
            self.interval = float(os.environ.get("PREPARE_DATA_PROGRESS_INTERVAL", default))
        except ValueError:
            self.interval = default
        self.t0 = self.last = time.monotonic()
        self.shown = False

    def update(self, done, tokens=None, force=False):
        now = time.monotonic()
        if not force and now - self.last < self.interval:
            return
        self.last = now
        elapsed = max(now - self.t0, 1e-9)
        rate = (done - self.start_done) / elapsed
        eta = seconds((self.total - done) / rate) if rate > 0 else "?"
        line = (f"{self.phase}: {min(100.0, 100.0 * done / self.total):5.1f}% of "
                f"{self.total / 1e6:,.1f} MB, {rate / 1e6:.1f} MB/s")
        if tokens is not None:
            line += f", {tokens:,} tokens, {tokens / elapsed:,.0f} tokens/s"
        line += f", ETA {eta}"
        self.stream.write(f"\r\x1b[K{line}" if self.tty else line + "\n")
        self.stream.flush()
        self.shown = True

    def close(self):
        if self.tty and self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
