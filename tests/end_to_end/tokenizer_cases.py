#!/usr/bin/env python3
"""tokenizer_cases.py — part 3 of script_inputs_test.py: tokenizer.json files read by
scripts/prepare_data.py and by the carousel binary alike (the same vocab_size, or the same
refusal in the same words after the path), and generated tokenizers read by
scripts/tokenizer_json.py as the installed tokenizers library reads them.

    run(prepare_data_module, carousel_binary, work_dir, run) -> the failures, one line each

TOKENIZER_CASES are also the seeds of tests/fuzz/corpus/tokenizer.
"""
import json
import os
import random
import re

failures = []
BIN = RUN = None  # the carousel binary and script_inputs_test.run, set by run()


def fail(msg):
    failures.append(msg)
    print(f"FAIL: {msg}")


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


FLAGS = {"single_word": False, "lstrip": False, "rstrip": False, "normalized": False}


def added(i, content, special=True, **kw):
    return dict({"id": i, "content": content}, **FLAGS, special=special, **kw)


def tokenizer(vocab, added_tokens=None, model_type="WordLevel", **top):
    model = {"type": model_type, "vocab": vocab}
    if model_type == "WordLevel":
        model["unk_token"] = "a"
    elif model_type == "Unigram":
        model["unk_id"] = 0
    j = {"version": "1.0", "truncation": None, "padding": None,
         "added_tokens": [] if added_tokens is None else added_tokens,
         "normalizer": None, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None,
         "decoder": None, "model": model}
    j.update(top)
    return j


ABC = {"a": 0, "b": 1, "c": 2}
TOKENIZER_CASES = [  # name, tokenizer.json (object or text), expected: vocab size or words
    ("dense", tokenizer(ABC, [added(3, "<|endoftext|>")]), 4),
    ("huge_added_id", tokenizer(ABC, [added(5000, "<|endoftext|>")]),
     'added token "<|endoftext|>" (added_tokens[0]) has id 5000, but the tokenizers library'),
    ("u32_added_id", tokenizer(ABC, [added(1 << 40, "X")]), "largest token id is 1099511627776"),
    ("negative_added_id", tokenizer(ABC, [added(-1, "X")]), "id is -1, not a non-negative"),
    ("float_added_id", tokenizer(ABC, [added(3.0, "X")]), "id is a number, not a non-negative"),
    ("no_added_id", tokenizer(ABC, [{k: v for k, v in added(3, "X").items() if k != "id"}]),
     "id is missing"),
    ("empty_content", tokenizer(ABC, [added(3, "")]), "content is empty, not a token"),
    ("number_content", tokenizer(ABC, [added(3, 7)]), "content is 7, not a token"),
    ("added_not_object", tokenizer(ABC, [5]), "added_tokens[0] is 5, not an object"),
    ("added_not_list", tokenizer(ABC, {}), "added_tokens is an object, not a list"),
    ("special_string", tokenizer(ABC, [added(3, "X", special="yes")]),
     "special is a string, not true or false"),
    ("negative_vocab_id", tokenizer({"a": 0, "b": -1}), 'token "b" is -1, not a non-negative'),
    ("string_vocab_id", tokenizer({"a": 0, "b": "1"}), 'token "b" is a string, not a non-neg'),
    ("u64_vocab_id", tokenizer({"a": 0, "b": 1 << 64}), 'token "b" is a number, not a non-neg'),
    ("vocab_string", tokenizer("abc"), "model.vocab is a string, neither an object"),
    ("no_model", {"version": "1.0"}, " has no model.vocab"),
    ("empty_vocab", tokenizer({}), " has an empty vocabulary"),
    ("id_2_24", tokenizer({"a": 0, "b": 1 << 24}), "largest token id is 16777216"),
    ("sparse", tokenizer({"a": 0, "b": 5}, [added(2, "X")]), 6),
    ("in_vocab", tokenizer(ABC, [added(1, "b"), added(3, "X")]), 4),
    ("in_vocab_other_id", tokenizer(ABC, [added(4, "b")]), 'added token "b" (added_tokens[0]) '
                                                          'has id 4, but the tokenizers library'),
    ("twice", tokenizer(ABC, [added(3, "X"), added(3, "X", special=False)]), 4),
    ("out_of_order", tokenizer(ABC, [added(4, "X"), added(3, "Y")]), 'added token "X" '
                                                                     "(added_tokens[0]) has id 4"),
    ("unigram", tokenizer([["a", 0.0], ["b", -1.0]], [added(2, "X")], "Unigram"), 3),
    ("unigram_piece", tokenizer([["a", 0.0], ["b", -1.0]], [added(1, "b")], "Unigram"), 2),
    ("newline_token", tokenizer({"a": 0, "b\nc": -2}), 'token "b\\nc" is -2'),
    ("not_json", "{not json", "is not valid JSON"),
    ("nan", '{"model": {"vocab": {"a": NaN}}}', "is not valid JSON"),
    # Refused by the tokenizers library only (carousel reads ids, not the whole schema).
    ("library_fields", tokenizer(ABC, [{"id": 3, "content": "X", "special": True}]), "library"),
    ("library_deep", json.dumps(tokenizer(ABC)).replace('"normalizer": null', '"normalizer": ' +
                                                        "[" * 3000 + "]" * 3000), "library"),
]


def carousel_reading(path, scratch):
    """('vocab', n) or ('refused', words after the path) from the carousel binary."""
    r = RUN([BIN, "train", "dataset_type=tokens", f"tokenizer_path={path}", "vocab_size=1",
             "dataset_path=/nonexistent/x.bin", "steps=1", f"base_output_directory={scratch}",
             "run_name=tok", "base_num_decoder_layers=1", "enable_checkpointing=false"])
    text = r.stdout + r.stderr
    m = re.search(r"has a vocabulary of (\d+) tokens but vocab_size=1", text)
    if m:
        return "vocab", int(m.group(1))
    if "dataset_path" in text and "tokenizer_path" not in text.split("[error]")[-1]:
        return "vocab", 1
    for line in text.splitlines():
        if "[error]" in line and "tokenizer_path" in line:
            return "refused", line.split(path + "'", 1)[-1]
    return "unknown", text[-500:]


def script_reading(pd, path):
    try:
        _, vocab, _ = pd.load_tokenizer(path)
        return "vocab", vocab
    except pd.UsageError as e:
        return "refused", str(e).split(path + "'", 1)[-1]


def run(pd, binary, d, run_command):
    global BIN, RUN
    BIN, RUN = binary, run_command
    os.makedirs(d)
    same = 0
    for name, j, expected in TOKENIZER_CASES:
        path = write(f"{d}/{name}.json", j if isinstance(j, str) else json.dumps(j))
        ours, theirs = script_reading(pd, path), carousel_reading(path, f"{d}/runs")
        label = f"tokenizer {name}: prepare_data.py {ours}, carousel {theirs}"
        if expected == "library":  # carousel reads it; the library (so the script) cannot
            if ours[0] != "refused" or "is not a Hugging Face tokenizer.json" not in ours[1] and \
                    "is not valid JSON" not in ours[1] or theirs[0] != "vocab":
                fail(label)
            continue
        if isinstance(expected, int):
            if ours != ("vocab", expected) or theirs != ("vocab", expected):
                fail(f"{label}; expected vocab_size {expected}")
        elif ours[0] != "refused" or theirs[0] != "refused" or expected not in ours[1]:
            fail(f"{label}; expected both to refuse with {expected!r}")
        elif "is not valid JSON" in expected:
            pass  # the JSON parsers' own words differ
        elif ours[1] != theirs[1]:
            fail(f"{label}: other words")
        same += 1
    # Generated tokenizers through both, and many more through tokenizer_json.py against the
    # tokenizers library: the ids carousel accepts are the library's.
    from tokenizers import Tokenizer
    rng = random.Random(8)
    tally = {"agree": 0, "refused": 0}
    for case in range(1540):
        n = rng.randint(0, 5)
        words = rng.sample(["a", "b", "c", "d", "e", "f", "g"], n)
        unigram = rng.random() < 0.2
        if unigram:
            vocab = [[w, -1.0] for w in words] + ([["a", -2.0]] if rng.random() < 0.2 else [])
        else:
            vocab = {w: (i if rng.random() < 0.7 else rng.randint(0, 12)) for i, w in
                     enumerate(words)}
        contents = [rng.choice(["X", "Y", "Z", "a", "c", "<s>"]) for _ in range(rng.randint(0, 4))]
        toks = [added(0, c, special=rng.random() < 0.5) for c in contents]
        j = tokenizer(vocab, toks, "Unigram" if unigram else "WordLevel")
        if unigram and not vocab:
            continue  # the library refuses an empty Unigram
        try:
            lib = Tokenizer.from_str(json.dumps(j))
        except Exception as e:
            fail(f"generated tokenizer {case} is not loadable: {e}: {json.dumps(j)}")
            continue
        for t in toks:  # the library's ids, sometimes one changed
            t["id"] = lib.token_to_id(t["content"])
        if toks and rng.random() < 0.3:
            rng.choice(toks)["id"] = rng.randint(0, 12)
        text = json.dumps(j)
        true_ids = {t["content"]: Tokenizer.from_str(text).token_to_id(t["content"]) for t in toks}
        consistent = all(true_ids[t["content"]] == t["id"] for t in toks)
        try:
            size = pd.tokenizer_json.vocab_size(j)
            if not consistent:
                fail(f"tokenizer_json accepts written ids the library changes: {text}")
            everything = Tokenizer.from_str(text).get_vocab(with_added_tokens=True).values()
            if size != max(everything, default=-1) + 1:
                fail(f"tokenizer_json reads vocab_size {size}, the library {max(everything)}+1")
            tally["agree"] += 1
        except pd.tokenizer_json.Refused as e:  # also ids that older library versions change
            if consistent and not re.search(r"empty vocabulary|\(earlier versions\)", str(e)):
                fail(f"tokenizer_json refuses ({e}) ids the library keeps: {text}")
            tally["refused"] += 1
        if case < 25:  # and through carousel: the same reading
            path = write(f"{d}/generated.json", text)
            ours, theirs = script_reading(pd, path), carousel_reading(path, f"{d}/runs")
            if ours != theirs:
                fail(f"generated tokenizer {case}: prepare_data.py {ours}, carousel {theirs}: "
                     f"{text}")
    print(f"tokenizer.json: {same} hand-written cases read alike by prepare_data.py and carousel, "
          f"1540 generated ones as the tokenizers library reads them ({tally}), the first 25 "
          f"also alike by prepare_data.py and carousel")
    return failures
