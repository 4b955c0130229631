# Writes streaming-detokenization reference cases: HF tokenizers' DecodeStream driven as vLLM drives it.
"""Reference cases for loom's StreamingDetokenizer (tests/unit/detokenizer_test.cc).

vLLM V1's FastIncrementalDetokenizer (vllm/v1/engine/detokenizer.py, up to 0.11; 0.32 primes
with DecodeStream(ids=prompt), the same pieces unless the prompt's text ends inside a character)
streams a sequence's text with the HF `tokenizers` DecodeStream:
  - it primes the stream with the prompt's suffix: the shortest of the last 4..23 ids whose
    Tokenizer.decode (skip_special_tokens=True, the binding's default) has no U+FFFD; the whole
    prompt when it has at most 4 ids or no such suffix exists; each id stepped, output dropped;
  - it steps each generated id; DecodeStream returns a piece or None (text held: it ends in
    U+FFFD, or did not grow);
  - when DecodeStream raises "Invalid prefix encountered" (a run of <0xNN> byte tokens that was
    valid, emitted, then turned invalid as a whole), _protected_step starts a fresh DecodeStream
    and steps the id into it (vLLM issue 17448). vLLM steps the prompt unprotected (the request
    fails); these cases reset there too, as loom does.
For each tokenizer file under tests/fixtures/tokenizers/ named below, seeded random cases
(prompt + generated ids: byte tokens, added/special tokens and random ids) and a few encoded
texts (CJK and emoji through byte fallback, invalid byte runs then text), both skip settings:
  prompt, generated, skip, pieces (one string per generated id; None as "")

Usage: python tools/ref/make_detokenizer_streams.py  (tokenizers 0.23.3 wrote the committed file)
"""
import json
import os
import random

import tokenizers
from tokenizers import Tokenizer
from tokenizers.decoders import DecodeStream

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TOKENIZERS = os.path.join(ROOT, "tests", "fixtures", "tokenizers")
OUT = os.path.join(ROOT, "tests", "fixtures", "detokenizer", "streams.json")
NAMES = ["gpt2", "TinyLlama-1.1B-Chat-v1.0", "Mistral-7B-Instruct-v0.3", "Qwen2.5-0.5B-Instruct",
         "SmolLM-135M-Instruct", "custom-bpe-whitespace-Abhay557",
         "Phi-3-mini-4k-instruct"]
INVALID_PREFIX = "Invalid prefix encountered"
TEXTS = ["日本語のテキスト、そして 😀 絵文字", "The capital of France is Paris. 東京",
         "Ünïcödé ∑ ≈ ✓ 👨‍👩‍👧 done", "\n\n  indented\tcode()  "]


def vllm_pieces(tok, prompt, generated, skip):
    suffix = prompt
    if len(prompt) > 4:
        for i in range(4, min(len(prompt) + 1, 24)):
            if "\ufffd" not in tok.decode(prompt[-i:]):
                suffix = prompt[-i:]
                break
    stream = [DecodeStream(skip_special_tokens=skip)]

    def step(t):
        try:
            return stream[0].step(tok, t)
        except Exception as e:  # vLLM's _protected_step
            if not str(e).startswith(INVALID_PREFIX):
                raise
            stream[0] = DecodeStream(skip_special_tokens=skip)
            return stream[0].step(tok, t)

    for t in suffix:
        step(t)
    return [step(t) or "" for t in generated]


def byte_like_ids(tok):
    out = []
    for tid in range(tok.get_vocab_size(with_added_tokens=False)):
        s = tok.id_to_token(tid)
        if s is None:
            continue
        if len(s) == 6 and s.startswith("<0x") and s.endswith(">"):
            out.append(tid)
        elif len(s) == 1 and ord(s) >= 0xA1 and ord(s) <= 0x143:  # byte-level bytes >= 0x80
            out.append(tid)
    return out


def random_ids(rng, n, vocab, specials, byte_ids):
    """n ids: a tenth special, four tenths byte tokens (when the vocabulary has them), the rest
    anywhere below `vocab`. Shared with make_logprob_tokens.py."""
    ids = []
    for _ in range(n):
        kind = rng.randrange(10)
        if kind == 0 and specials:
            ids.append(rng.choice(specials))
        elif kind < 5 and byte_ids:
            ids.append(rng.choice(byte_ids))
        else:
            ids.append(rng.randrange(vocab))
    return ids


def main():
    cases = {}
    for name in NAMES:
        tok = Tokenizer.from_file(os.path.join(TOKENIZERS, name, "tokenizer.json"))
        tok.no_truncation()
        tok.no_padding()
        specials = sorted(tok.get_added_tokens_decoder().keys())
        byte_ids = byte_like_ids(tok)
        rng = random.Random(17)
        vocab = tok.get_vocab_size(with_added_tokens=True)
        mine = []
        for trial in range(40):
            prompt = random_ids(rng, rng.randrange(0, 30), vocab, specials, byte_ids)
            generated = random_ids(rng, 1 + rng.randrange(40), vocab, specials, byte_ids)
            mine.append((prompt, generated))
        for text in TEXTS:
            ids = tok.encode(text, add_special_tokens=False).ids
            cut = len(ids) // 3
            mine.append((tok.encode("Q: " + text[:3], add_special_tokens=True).ids, ids))
            mine.append((ids[:cut], ids[cut:]))  # the prompt may end inside a character
            if byte_ids:  # a valid run, then bytes that make it invalid, then text
                tail = tok.encode(" and then words.", add_special_tokens=False).ids
                mine.append((ids[:2], ids[2:8] + byte_ids[-3:] + tail))
        entries = []
        for prompt, generated in mine:
            for skip in (True, False):
                entries.append({"prompt": prompt, "generated": generated, "skip": skip,
                                "pieces": vllm_pieces(tok, prompt, generated, skip)})
        cases[name + "/tokenizer.json"] = entries
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump({"tokenizers_version": tokenizers.__version__, "cases": cases}, f,
                  ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(OUT, os.path.getsize(OUT), "bytes")


if __name__ == "__main__":
    main()
