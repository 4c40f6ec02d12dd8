#!/usr/bin/env python3
"""check_architecture.py — the layout rules of docs/architecture.md, checked on the source tree.

Usage: check_architecture.py [SOURCE_DIR]   (exit status 0: all hold; 1: each broken rule printed)

1. Layers: every #include "..." points to the including file's own folder or to one listed
   before it in LAYERS (the rooms bottom first; host/ by concern, bottom first). tests/ and
   benchmarks/ may include anything.
2. No include cycle between files.
3. No folder holds more than MAX_FILES_PER_FOLDER source files directly.
4. No source file is longer than MAX_LINES lines.
5. train() (host/run/trainer.cpp) is at most MAX_TRAIN_LINES lines.
6. No schedule name (read from the rows of host/schedule/registry.cpp) is compared as a string
   outside that file (a schedule's behaviour belongs to its registry row).
7. The parameter runtime (host/runtime/sharded_*.cpp) reduces over the groups a gradient is
   summed over (data, expert, expert_data, tie, pipe, tensor, kv_share) only through the
   placement rule (ShardedParams::holders, and the ZeRO-1 pieces of stage_pieces): no
   all_reduce or reduce_scatter names one of those communicators elsewhere, so no reduction is
   written per axis combination again.
8. models/ calls no weight GEMM (gemm, grouped_gemm, grouped_weight_gemm) outside its parallel
   pieces (models/parallel/linear.cpp): a weight's place on the tensor axis, its collective and
   (with a numeric format) its scales live in one piece, not at each call site.

Written by hand: include-graph linters (include-what-you-use, clang-tidy) know nothing of this
project's layering, and the rules are a few lines each.
"""
import os
import re
import sys

LAYERS = [
    "compute", "cuda", "collectives", "models",
    "host/schedule", "host/reliability", "host/config", "host/io", "host/data", "host/report",
    "host/mesh", "host/runtime", "host/plan", "host/run", "host/cli",
]
FREE = ("tests", "benchmarks")  # may include any layer
SOURCE_EXT = (".h", ".cpp", ".cu", ".cuh", ".py", ".sh")
MAX_FILES_PER_FOLDER = 20
MAX_LINES = 520
MAX_TRAIN_LINES = 80
REGISTRY = "host/schedule/registry.cpp"
RULE_FILES = re.compile(r"^host/runtime/sharded_[a-z_]+\.cpp$")
RULE_GROUPS = re.compile(
    r"comms_\.(data|expert|expert_data|tie|pipe|tensor|kv_share)->(?:all_reduce|reduce_scatter)\b")
RULE_FUNCTIONS = ("ShardedParams::Holders ShardedParams::holders(", "Pieces ShardedParams::stage_pieces(")
GEMM_CALL = re.compile(r"\bbe\.(gemm|grouped_gemm|grouped_weight_gemm)\(")
GEMM_HOME = "models/parallel/linear.cpp"
SKIP_DIRS = {".git", "build", ".venv", "out", ".gpu", "__pycache__", "docs", "configs"}


def layer_of(path):
    """Index of the deepest LAYERS entry that contains `path`; None for tests/benchmarks etc."""
    best = None
    for i, layer in enumerate(LAYERS):
        if path == layer or path.startswith(layer + "/"):
            if best is None or len(layer) > len(LAYERS[best]):
                best = i
    return best


def sources(root):
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("build-"))
        rel = os.path.relpath(folder, root)
        if rel == ".":
            continue
        yield rel, sorted(f for f in files if f.endswith(SOURCE_EXT))


def strongly_connected(graph):
    """Tarjan's algorithm, iterative: the components of more than one node."""
    index, low, on_stack, stack, out, counter = {}, {}, set(), [], [], [0]
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def function_span(text, signature):
    """(first, last) character offsets of the function whose definition holds `signature`."""
    at = text.find(signature)
    if at < 0:
        return None
    depth, i = 0, text.index("{", at)
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return at, j
    return None


def function_length(text, signature):
    """Lines from the line holding `signature` to its closing brace; None when absent."""
    span = function_span(text, signature)
    return None if span is None else text.count("\n", span[0], span[1]) + 1


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), ".."))
    problems = []
    with open(os.path.join(root, REGISTRY), encoding="utf-8") as f:
        registry = f.read()
    table = registry[registry.index("kSchedules[] = {"):]
    names = re.findall(r'^\s*\{(?:\.name\s*=\s*)?"([a-z0-9_]+)",', table[:table.index("\n};")], re.M)
    if not names:
        problems.append(f"{REGISTRY}: no schedule rows found in kSchedules")
    includes = {}  # file -> the files it includes
    include = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
    alternatives = "|".join(re.escape(n) for n in names) or "$^"
    compare = re.compile(r'[!=]=\s*"(%s)"|"(%s)"\s*[!=]=' % (alternatives, alternatives))
    for folder, files in sources(root):
        if len(files) > MAX_FILES_PER_FOLDER:
            problems.append(f"{folder}/ holds {len(files)} source files directly (at most "
                            f"{MAX_FILES_PER_FOLDER}): fold it into folders by concern")
        for name in files:
            path = f"{folder}/{name}"
            with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
                text = f.read()
            lines = text.count("\n")
            if lines > MAX_LINES:
                problems.append(f"{path} has {lines} lines (at most {MAX_LINES}): split it by "
                                "responsibility")
            if not name.endswith((".h", ".cpp", ".cu", ".cuh")):
                continue
            if path != REGISTRY and not path.startswith(FREE):
                for m in compare.finditer(text):
                    line = text.count("\n", 0, m.start()) + 1
                    problems.append(f"{path}:{line}: schedule name '{m.group(1) or m.group(2)}' "
                                    "compared as a string; give the registry row a field instead")
            if path.startswith("models/") and path != GEMM_HOME:
                for m in GEMM_CALL.finditer(text):
                    line = text.count("\n", 0, m.start()) + 1
                    problems.append(f"{path}:{line}: calls be.{m.group(1)} directly; use a piece "
                                    f"of {GEMM_HOME} (Linear, ColumnParallel, RowParallel, "
                                    "GroupedLinear)")
            if RULE_FILES.match(path):
                spans = [sp for sp in (function_span(text, sig) for sig in RULE_FUNCTIONS) if sp]
                for m in RULE_GROUPS.finditer(text):
                    if not any(a <= m.start() <= b for a, b in spans):
                        line = text.count("\n", 0, m.start()) + 1
                        problems.append(f"{path}:{line}: reduces over the '{m.group(1)}' "
                                        "communicator outside the placement rule "
                                        "(ShardedParams::holders): read the parameter's holders")
            mine = layer_of(path)
            deps = includes.setdefault(path, set())
            for m in include.finditer(text):
                target = m.group(1)
                line = text.count("\n", 0, m.start()) + 1
                if not os.path.exists(os.path.join(root, target)):
                    continue  # generated (build_info.h) or relative to the file
                deps.add(target)
                theirs = layer_of(target)
                if mine is None or theirs is None:
                    continue
                if theirs > mine:
                    problems.append(f"{path}:{line}: includes {target}: {LAYERS[mine]}/ may "
                                    f"include only {', '.join(LAYERS[:mine + 1])}")
    for cycle in strongly_connected({k: sorted(v) for k, v in includes.items()}):
        problems.append("include cycle between " + ", ".join(cycle))
    trainer = os.path.join(root, "host/run/trainer.cpp")
    if os.path.exists(trainer):
        with open(trainer, encoding="utf-8") as f:
            n = function_length(f.read(), "TrainResult train(")
        if n is None:
            problems.append("host/run/trainer.cpp: train() not found")
        elif n > MAX_TRAIN_LINES:
            problems.append(f"host/run/trainer.cpp: train() is {n} lines (at most "
                            f"{MAX_TRAIN_LINES}): give the new concern a component of its own")
    for p in problems:
        print(p)
    print(f"check_architecture: {len(problems)} problem(s)" if problems else
          "check_architecture: layers, cycles, folder sizes, file sizes, train(), schedule names "
          "the gradient rule and the GEMM pieces all hold")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
