#!/usr/bin/env python3
"""prepare_data_shards.py — scripts/prepare_data.py's output side: the output directory (every
file created beside its name and renamed into place, never through a symlink or into a FIFO),
the llm.c token shards written as they fill, and the manifest that makes a run resumable.

Shard format (host/data/token_files.cpp), llm.c's: a header of 256 int32 (magic, version, token
count), then the tokens — uint16 with magic 20240520, version 1 (its GPT-2 shards) when every
token id fits, else uint32 with magic 20240801, version 7 (its Llama 3 shards).

The manifest (MANIFEST in the output directory) records what the run was asked (its `key`: the
inputs with their sizes and times, the tokenizer, every flag that changes the output), the scan's
totals, the tokenizer written, and each shard once it is complete and renamed into place: its
name, its tokens, and where to start again after it (the input, byte offset or row, line, the
documents, bytes and tokens before that point). A rerun with the same key continues after the
last shard that is still there, whole; any other run starts over.
"""
import fcntl
import json
import os
import re
import stat
import struct

HEADER_INTS = 256
NARROW = (20240520, 1, "H")  # magic, version, array code: uint16 ids (llm.c's GPT-2 shards)
WIDE = (20240801, 7, "I")    # uint32 ids (llm.c's Llama 3 shards)
MANIFEST = "prepare_data.manifest.json"
MANIFEST_VERSION = 1
COMPANIONS = ("tokenizer_config.json", "special_tokens_map.json")
OUTPUT = re.compile(r"((train|val)_\d{6}\.bin|tokenizer\.json|tokenizer_config\.json|"
                    r"special_tokens_map\.json|prepare_data\.manifest\.json)(\.tmp)?")
SHARD = re.compile(r"(train|val)_\d{6}\.bin(\.tmp)?")


def entry_kind(mode):
    return ("a symbolic link" if stat.S_ISLNK(mode) else "a FIFO (named pipe)"
            if stat.S_ISFIFO(mode) else "a directory" if stat.S_ISDIR(mode) else
            "not a regular file")


def check_outputs(out, names, lstat, error):
    """Every entry of the output directory under an output's name is a regular file: one that
    is a symlink, a FIFO, a directory or a device is refused, never written through or into."""
    for name in sorted(n for n in names if OUTPUT.fullmatch(n)):
        mode = lstat(name).st_mode
        if not stat.S_ISREG(mode):
            raise error(f"'{os.path.join(out, name)}' is {entry_kind(mode)}; prepare_data.py "
                        f"writes its outputs as new regular files, never through a link or "
                        f"into a FIFO: remove it, or give another -o")


def check_output_dir(out, error):
    """Before any work: the output names already in -o DIR, when it is there, are regular files."""
    if os.path.isdir(out):
        check_outputs(out, os.listdir(out), lambda n: os.lstat(os.path.join(out, n)), error)


def read_manifest(out):
    """The manifest in -o DIR as a dict, or None when there is none or it is not one (then the
    run starts over)."""
    path = os.path.join(out, MANIFEST)
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None
        with open(path, encoding="utf-8") as f:
            m = json.load(f)
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(m, dict) or m.get("version") != MANIFEST_VERSION or \
            not isinstance(m.get("shards"), list):
        return None
    return m


class OutputDir:
    """-o DIR, opened once: every output is created relative to its descriptor (openat) as a new
    file (O_EXCL | O_NOFOLLOW) beside its final name and renamed into place, so nothing is ever
    opened through a symlink, blocks on a FIFO or is seen half written. Shards not in `keep`
    (those of an earlier run, or after the point a resumed run continues from) are removed:
    they would join the glob."""

    def __init__(self, out, keep, error):
        os.makedirs(out, exist_ok=True)
        self.out, self.error = out, error
        self.fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:  # held until the process ends: two runs into one directory would undo each other
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise error(f"another prepare_data.py run is writing into '{out}': wait for it to "
                        f"end, or give another -o")
        names = os.listdir(self.fd)
        check_outputs(out, names, self.lstat, error)
        for name in names:
            if SHARD.fullmatch(name) and name not in keep:
                os.unlink(name, dir_fd=self.fd)

    def lstat(self, name):
        return os.stat(name, dir_fd=self.fd, follow_symlinks=False)

    def create(self, name):
        """A new file `name`.tmp, open for writing; commit() renames it into place."""
        tmp = name + ".tmp"
        try:
            check_outputs(self.out, [tmp], self.lstat, self.error)
            os.unlink(tmp, dir_fd=self.fd)  # a regular file left by an interrupted run
        except FileNotFoundError:
            pass
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o644, dir_fd=self.fd)
        return os.fdopen(fd, "w+b")

    def commit(self, f, name, sync=False):
        try:
            f.flush()
            if sync:  # a shard the manifest names must be whole, even after a crash
                os.fsync(f.fileno())
        finally:
            f.close()
        # rename replaces what is at `name` (checked; a link made since is replaced, its target
        # untouched), never follows it
        os.replace(name + ".tmp", name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        return os.path.join(self.out, name)

    def discard(self, f, name):
        f.close()
        try:
            os.unlink(name + ".tmp", dir_fd=self.fd)
        except OSError:
            pass

    def write(self, name, chunks, sync=False):
        f = self.create(name)
        try:
            for chunk in chunks:
                f.write(chunk)
        except OSError:  # a full disk: no half-written .tmp left behind
            self.discard(f, name)
            raise
        return self.commit(f, name, sync)

    def save_manifest(self, manifest):
        self.write(MANIFEST, [json.dumps(manifest, indent=1).encode()], sync=True)

    def size_of(self, name):
        """The size of regular file `name`, or None."""
        try:
            st = self.lstat(name)
        except OSError:
            return None
        return st.st_size if stat.S_ISREG(st.st_mode) else None


def valid_shards(out, manifest, fmt):
    """The manifest's shards, in the order written, up to the first that is missing or not
    whole (its size and header): a resumed run continues after the last of these."""
    magic, version, code = fmt
    itemsize = 2 if code == "H" else 4
    good = []
    for s in manifest["shards"]:
        path = os.path.join(out, s.get("name", ""))
        try:
            if not SHARD.fullmatch(s["name"]) or s["name"].endswith(".tmp") or \
                    not stat.S_ISREG(os.lstat(path).st_mode) or \
                    os.path.getsize(path) != HEADER_INTS * 4 + itemsize * s["tokens"]:
                break
            with open(path, "rb") as f:
                if struct.unpack("<3i", f.read(12)) != (magic, version, s["tokens"]):
                    break
        except (OSError, KeyError, TypeError, struct.error):
            break
        good.append(s)
    return good


class ShardStream:
    """The training split's tokens, then the held-out split's, as shards of at most
    shard_tokens tokens each, written as they fill: each shard streams into its .tmp file, gets
    its header and is renamed into place when full (or its split ends), and then the manifest
    records it with `mark`, the point to start reading again for the tokens after it."""

    def __init__(self, out, fmt, shard_tokens, manifest, on_shard=None):
        self.out, self.fmt, self.shard_tokens = out, fmt, shard_tokens
        self.itemsize = 2 if fmt[2] == "H" else 4
        self.manifest, self.on_shard = manifest, on_shard
        self.count = {"train": 0, "val": 0}
        self.tokens = {"train": 0, "val": 0}  # in complete shards
        for s in manifest["shards"]:
            prefix = s["name"][:s["name"].index("_")]
            self.count[prefix] += 1
            self.tokens[prefix] += s["tokens"]
        self.emitted = manifest["shards"][-1]["end"] if manifest["shards"] else 0
        self.file = self.prefix = None
        self.filled = 0
        self.mark = None  # where the batch being written starts (set by the caller)

    def write(self, prefix, data):
        """Append tokens (little-endian bytes) to split `prefix`."""
        if self.file is not None and self.prefix != prefix:
            self._close()
        self.prefix = prefix
        data = memoryview(data)
        while len(data):
            if self.file is None:
                self._open()
            n = min(len(data) // self.itemsize, self.shard_tokens - self.filled)
            self.file.write(data[:n * self.itemsize])
            data = data[n * self.itemsize:]
            self.filled += n
            self.emitted += n
            if self.filled == self.shard_tokens:
                self._close()

    def end(self):
        """The split being written ends: its last shard, however full, is written."""
        if self.file is not None:
            self._close()

    def abandon(self):
        """An error or interruption: the shard being filled is removed; complete ones stay."""
        if self.file is not None:
            self.out.discard(self.file, self.name)
            self.file = None

    def _open(self):
        self.name = f"{self.prefix}_{self.count[self.prefix]:06d}.bin"
        self.file = self.out.create(self.name)
        self.file.write(bytes(HEADER_INTS * 4))  # the header once the count is known
        self.filled = 0

    def _close(self):
        magic, version, _ = self.fmt
        header = [magic, version, self.filled] + [0] * (HEADER_INTS - 3)
        self.file.seek(0)
        self.file.write(struct.pack(f"<{HEADER_INTS}i", *header))
        f, self.file = self.file, None
        self.out.commit(f, self.name, sync=True)
        self.count[self.prefix] += 1
        self.tokens[self.prefix] += self.filled
        self.manifest["shards"].append({"name": self.name, "tokens": self.filled,
                                        "end": self.emitted, "resume": self.mark})
        self.out.save_manifest(self.manifest)
        if self.on_shard:
            self.on_shard()
