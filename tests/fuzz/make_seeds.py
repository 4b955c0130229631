#!/usr/bin/env python3
"""Writes the seed corpora of tokenizer_fuzz and chat_template_fuzz (tests/fuzz/corpus/).

Seeds come from the committed fixtures (tests/fixtures/tokenizers, tests/fixtures/chat_templates,
../shared/fixtures/tokenizers config-only folders) plus one small synthetic tokenizer per pipeline
component and the hostile inputs of tests/unit/tokenizer_hardening_test.cc and
jinja_limits_test.cc. Input formats: see the header of each *_fuzz.cc. Run from the repo root.
"""
import json
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"
SHARED = ROOT.parent / "shared" / "fixtures"
OUT = ROOT / "tests" / "fuzz" / "corpus"

TEXTS = [
    "Hello, world! It's 2024.",
    "<s>[INST] caf\u00e9 \u4e2d\u6587 \U0001F389 [/INST]</s>",
    "  spaces\tand\nnew lines 12345 ",
]


def tiny_byte_level():
    vocab = {chr(c): c - 33 for c in range(33, 127)}
    vocab["\u0120"] = 94
    vocab["ab"] = 95
    return {"version": "1.0", "added_tokens": [], "normalizer": None,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False},
            "post_processor": None, "decoder": {"type": "ByteLevel"},
            "model": {"type": "BPE", "vocab": vocab, "merges": ["a b"]}}


def seed(*parts):
    return b"\0".join(p if isinstance(p, bytes) else p.encode("utf-8") for p in parts)


def tokenizer_seeds():
    out = {}
    for d in sorted((FIX / "tokenizers").iterdir()):
        tj = d / "tokenizer.json"
        if not tj.exists() or tj.stat().st_size > 20_000:
            continue
        cfg = d / "tokenizer_config.json"
        out[f"fixture-{d.name}"] = seed(tj.read_bytes(), cfg.read_bytes() if cfg.exists() else b"",
                                        TEXTS[len(out) % len(TEXTS)])
    tiny = json.dumps(tiny_byte_level())
    for d in sorted((SHARED / "tokenizers").iterdir()):
        cfg = d / "tokenizer_config.json"
        if d.name.endswith("config-only") and cfg.exists() and cfg.stat().st_size < 200_000:
            out[f"config-{d.name}"] = seed(tiny, cfg.read_bytes(), TEXTS[0])
    components = {
        "normalizer": [{"type": t} for t in ["NFC", "NFD", "NFKC", "NFKD", "Lowercase", "ByteLevel"]]
        + [{"type": "Strip", "strip_left": True, "strip_right": False},
           {"type": "Prepend", "prepend": "\u2581"},
           {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
           {"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": " "},
           {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Lowercase"}]}],
        "pre_tokenizer": [{"type": t} for t in ["Whitespace", "WhitespaceSplit", "Punctuation"]]
        + [{"type": "Digits", "individual_digits": True},
           {"type": "CharDelimiterSplit", "delimiter": "-"},
           {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": True},
           {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}"}, "behavior": "Isolated",
            "invert": False},
           {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithNext",
            "invert": True},
           {"type": "Sequence", "pretokenizers": [{"type": "Digits"},
                                                  {"type": "ByteLevel", "use_regex": False}]}],
        "decoder": [{"type": t} for t in ["ByteFallback", "Fuse"]]
        + [{"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always"},
           {"type": "Strip", "content": " ", "start": 1, "stop": 0},
           {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
           {"type": "BPEDecoder", "suffix": "</w>"},
           {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"}]}],
        "post_processor": [
            {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                                      {"Sequence": {"id": "A", "type_id": 0}}],
             "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
            {"type": "RobertaProcessing", "cls": ["<s>", 0], "sep": ["</s>", 2]},
            {"type": "ByteLevel"}],
    }
    for field, values in components.items():
        for i, value in enumerate(values):
            j = tiny_byte_level()
            j[field] = value
            out[f"component-{field}-{i}"] = seed(json.dumps(j), "", TEXTS[i % len(TEXTS)])
    added = tiny_byte_level()
    added["added_tokens"] = [
        {"id": 96, "content": "<|im_start|>", "special": True, "single_word": False,
         "lstrip": False, "rstrip": False, "normalized": False},
        {"id": 97, "content": " ab", "special": False, "single_word": True,
         "lstrip": True, "rstrip": True, "normalized": True}]
    out["component-added-tokens"] = seed(json.dumps(added), "", "<|im_start|>user ab ab!")
    # Hostile inputs (each once crashed, hung or blew up memory).
    deep = "[" * 5000 + "]" * 5000
    out["bad-deep-tokenizer"] = seed('{"model": ' + deep + "}")
    out["bad-deep-config"] = seed(tiny, '{"x": ' + deep + "}", "a")
    out["bad-class-type"] = seed(tiny, '{"tokenizer_class": 5}', "a")
    out["bad-decoder-key"] = seed(tiny, '{"added_tokens_decoder": {"abc": {"content": "x"}}}', "a")
    huge = tiny_byte_level()
    huge["model"]["vocab"]["zz"] = 2000000000
    out["bad-huge-id"] = seed(json.dumps(huge))
    chain = tiny_byte_level()
    chain["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Replace", "pattern": {"Regex": ""}, "content": "ab"}] * 40}
    out["bad-chained-replace"] = seed(json.dumps(chain), "", "hello")
    chain["normalizer"] = None
    chain["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"Regex": ""}, "content": "ab"}] * 40}
    out["bad-chained-replace-decoder"] = seed(json.dumps(chain), "", "hello world")
    backtrack = tiny_byte_level()
    backtrack["pre_tokenizer"] = {"type": "Split", "pattern": {"Regex": "(a+)+$"},
                                  "behavior": "Isolated", "invert": False}
    out["bad-backtracking"] = seed(json.dumps(backtrack), "", "a" * 40 + "!")
    return out


def chat_seeds():
    cases = json.loads((FIX / "chat_templates" / "cases.json").read_text())
    convs = list(cases["conversations"].items())
    tools = json.dumps(cases["tools"])
    out = {}
    for i, path in enumerate(sorted((FIX / "chat_templates").glob("*.jinja"))):
        name, conv = convs[i % len(convs)]
        parts = [path.read_text(), json.dumps(conv)]
        if "tool" in name or "tool" in path.name:
            parts.append(tools)
        out[f"fixture-{path.stem}"] = seed(*parts)
    hostile = {
        "indent-float": "{{ 'x'|indent(1e11) }}",
        "indent-int": "{{ 'x'|indent(100000000000) }}",
        "repeat-wrap": "{{ 'aaaa' * 2**62 }}",
        "list-repeat-wrap": "{{ [1, 2] * 2**62 }}",
        "int-overflow": "{{ 1e300|int }}{{ '1e300'|int }}",
        "sum-overflow": "{{ [9223372036854775807, 1]|sum }}",
        "abs-overflow": "{{ (-9223372036854775807 - 1)|abs }}",
        "slice-overflow": "{{ [1, 2, 3][0:10:9223372036854775807] }}{{ 'abc'[::-9223372036854775807] }}",
        "long-loop": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        "replace-bomb": "{{ ('a' * 10000)|replace('', 'x' * 10000) }}",
        "join-bomb": "{{ ('x' * 1000000).join(['a'] * 1000) }}",
        "shared-list-bomb": "{% set x = ['a' * 1000] * 1000 %}{% set y = [x] * 100000 %}{{ y }}",
        "format-index": "{{ '{99999999999999999999999}'.format(1) }}",
        "batch-fill": "{{ [1]|batch(10**15, 0)|list }}",
        "macro-recursion": "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
        "string-doubling": "{% set ns = namespace(s='xx') %}{% for i in range(64) %}"
                           "{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
    }
    for name, text in hostile.items():
        out[f"bad-{name}"] = seed(text)
    deep = "[" * 5000 + "]" * 5000
    out["bad-deep-messages"] = seed("{{ messages }}", '[{"role": "user", "content": ' + deep + "}]")
    out["bad-deep-tools"] = seed("{{ tools }}", "[]", deep)
    return out


def main():
    for sub, seeds in (("tokenizer", tokenizer_seeds()), ("chat_template", chat_seeds())):
        d = OUT / sub
        d.mkdir(parents=True, exist_ok=True)
        for old in d.iterdir():
            if not old.name.startswith("crash-"):  # crashers found by fuzzing are kept
                old.unlink()
        for name, data in seeds.items():
            (d / name).write_bytes(data)
        print(f"{d}: {len(seeds)} seeds")


if __name__ == "__main__":
    main()
