# Makes a servable view of a tokenizer-less bench model: symlinks to its files plus a synthetic byte-level BPE tokenizer.json covering the whole vocabulary.
"""Servable copy of a model folder that has no tokenizer (bench-models/qwen2.5-0.5b-shape, the
tiny test fixtures).

    python tools/bench/serve/make_serve_model.py --model bench-models/qwen2.5-0.5b-shape \
        --out bench-models/qwen2.5-0.5b-shape-serve

The output folder holds symlinks to the source folder's files (config.json, model.safetensors,
...; nothing is copied) plus a synthetic `tokenizer.json` and `tokenizer_config.json`, so that
`loom serve` and vLLM detokenize every generated token the way they would for a real model:

- a byte-level BPE (GPT-2 byte alphabet, ByteLevel pre-tokenizer and decoder) whose vocabulary has
  exactly `vocab_size` entries: ids 0..255 are the 256 bytes, then every 2-character string of
  printable ASCII ('!'..'~', 94² = 8836 tokens), then 3-character strings, in order, until the
  vocabulary is full; one merge per multi-character token ("a b" for "ab", "ab c" for "abc");
- so every token id above 255 decodes to 2 or 3 printable ASCII characters, and a streaming server
  has a non-empty text delta for nearly every generated token (ids 128..255 are lone UTF-8
  continuation/lead bytes, which detokenizers hold back).

Why: without a tokenizer, loom streams no chunk for tokens whose text is empty (vLLM sends one per
token), so time-to-first-token could not be observed; and vLLM needs a tokenizer to start at all.
Needs only the Python standard library.
"""
import argparse
import json
import os
import sys


# GPT-2's byte -> printable character table: the one the e2e tests' tokenizer uses.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tests", "e2e"))
from tiny_model import bytes_to_unicode  # noqa: E402


def synthetic_tokenizer(vocab_size):
    if vocab_size < 256:
        raise ValueError(f"vocab_size {vocab_size} < 256: a byte-level tokenizer needs 256 ids")
    table = bytes_to_unicode()
    vocab = {table[b]: b for b in range(256)}
    merges = []
    printable = [chr(c) for c in range(ord("!"), ord("~") + 1)]  # map to themselves in `table`
    next_id = 256

    def add(left, right):
        nonlocal next_id
        vocab[left + right] = next_id
        merges.append(f"{left} {right}")
        next_id += 1

    pairs = [a + b for a in printable for b in printable]
    for p in pairs:
        if next_id >= vocab_size:
            break
        add(p[0], p[1])
    for p in pairs:
        if next_id >= vocab_size:
            break
        for c in printable:
            if next_id >= vocab_size:
                break
            add(p, c)
    if next_id < vocab_size:
        raise ValueError(f"vocab_size {vocab_size} is larger than this generator covers "
                         f"({next_id} tokens)")
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                  "use_regex": True}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": byte_level,
        "post_processor": dict(byte_level, trim_offsets=False),
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }


def make(model_dir, out_dir, force=False):
    model_dir = os.path.abspath(model_dir)
    out_dir = os.path.abspath(out_dir)
    # Never into the model: the links below replace same-named files in out_dir (with out_dir
    # the model folder, each weight file was deleted and replaced by a link to itself).
    real_model, real_out = os.path.realpath(model_dir), os.path.realpath(out_dir)
    if os.path.commonpath([real_model, real_out]) == real_model:
        raise SystemExit(f"make_serve_model.py: --out {out_dir} is --model {model_dir} or inside it")
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    vocab_size = int(config["vocab_size"])
    stamp = {"source": model_dir, "vocab_size": vocab_size, "generator": "make_serve_model.py v1"}
    stamp_path = os.path.join(out_dir, "serve_model.json")
    if not force and os.path.exists(stamp_path):
        with open(stamp_path) as f:
            if json.load(f) == stamp:
                return out_dir
    os.makedirs(out_dir, exist_ok=True)
    skip = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
            "merges.txt", "serve_model.json"}  # the stamp, written below: never a link into --model
    for name in sorted(os.listdir(model_dir)):
        src = os.path.join(model_dir, name)
        dst = os.path.join(out_dir, name)
        if name in skip or not os.path.isfile(src):
            continue
        if os.path.islink(dst):
            os.remove(dst)
        elif os.path.lexists(dst):
            raise SystemExit(f"make_serve_model.py: {dst} exists and is not a link; not replacing it")
        os.symlink(os.path.relpath(src, out_dir), dst)
    tok = synthetic_tokenizer(vocab_size)
    tmp = os.path.join(out_dir, "tokenizer.json.tmp")
    with open(tmp, "w") as f:
        json.dump(tok, f, ensure_ascii=False, separators=(",", ":"))
    os.replace(tmp, os.path.join(out_dir, "tokenizer.json"))
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast",
                   "model_max_length": int(config.get("max_position_embeddings", 2048)),
                   "bos_token": None, "eos_token": None, "clean_up_tokenization_spaces": False},
                  f, indent=2)
    with open(stamp_path, "w") as f:
        json.dump(stamp, f)
    return out_dir


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="source model folder (config.json, safetensors)")
    ap.add_argument("--out", required=True, help="folder to write (symlinks + tokenizer)")
    ap.add_argument("--force", action="store_true", help="rewrite even when up to date")
    args = ap.parse_args()
    out = make(args.model, args.out, args.force)
    print(f"[make_serve_model] {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
