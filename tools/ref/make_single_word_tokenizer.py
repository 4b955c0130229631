# Writes tests/fixtures/tokenizers/tiny-single-word/ (a byte-level BPE with one single_word added token) and prints HF tokenizers' ids for the strings tokenizer_test.cc checks.
"""A single_word added token matches only where no word character (HF: the regex `\\w`, which
includes '_', combining marks and joiners) touches it. Usage (tokenizers 0.23.3 made the ids in
tests/unit/tokenizer_test.cc, SingleWordAddedTokenUsesTheWordCharacterClass):

    python tools/ref/make_single_word_tokenizer.py
"""
import json
import os

from tokenizers import Tokenizer, pre_tokenizers

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "tests", "fixtures", "tokenizers", "tiny-single-word")
TEXTS = ["a_<x>", "e\u0301<x>", "_<x>", "a <x>", "<x>b", "<x>_", "\u200d<x>", "<x>\u0301", "-<x>-",
         "1<x>"]


def main():
    vocab = {chr(c): c - 33 for c in range(33, 127)}
    vocab["\u0120"] = 94
    vocab["ab"] = 95
    next_id = 96
    for ch in sorted(pre_tokenizers.ByteLevel.alphabet()):
        if ch not in vocab:
            vocab[ch] = next_id
            next_id += 1
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                  "use_regex": True}
    spec = {"version": "1.0",
            "added_tokens": [{"id": next_id, "content": "<x>", "single_word": True, "lstrip": False,
                              "rstrip": False, "normalized": False, "special": False}],
            "normalizer": None, "pre_tokenizer": byte_level, "post_processor": None,
            "decoder": byte_level, "model": {"type": "BPE", "vocab": vocab, "merges": ["a b"]}}
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, "tokenizer.json")
    with open(path, "w") as f:
        json.dump(spec, f, ensure_ascii=False)
    t = Tokenizer.from_file(path)
    for text in TEXTS:
        print(json.dumps(text), t.encode(text, add_special_tokens=False).ids)


if __name__ == "__main__":
    main()
