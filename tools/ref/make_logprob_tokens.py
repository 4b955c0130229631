# Writes the token texts vLLM 0.32 puts in log-prob entries, for loom's logprob_text_test.
"""Reference cases for loom's LogprobTokenText (src/server/logprob_text.h).

vLLM 0.32 writes a log-prob entry's token text with
  vllm.tokenizers.detokenizer_utils.convert_ids_list_to_tokens  (decode alone; leading spaces a
      Metaspace decode strips put back from the vocabulary piece)
  vllm.v1.engine.logprobs.LogprobsProcessor._correct_decoded_token  (a text ending in U+FFFD:
      what the token completes with 1-4 of the sequence's preceding ids, "" while incomplete)
This script calls those two functions themselves (vLLM's CPU build, the peer of
../shared/PEERS.md) over transformers' AutoTokenizer of each tokenizer fixture, for encoded
texts (SentencePiece words, byte-fallback CJK and emoji, byte-level BPE splitting characters,
special tokens) and seeded random id sequences (byte tokens and specials among them). Each
position's context is the up to 4 ids before it in its sequence, as for generated tokens.

Output: tests/fixtures/detokenizer/logprob_tokens.json
  {"vllm": version, "cases": {"<tokenizer>/tokenizer.json": [{"ids": [...], "texts": [...]}]}}
Usage: /work/peers/vllm-venv/bin/python tools/ref/make_logprob_tokens.py
"""
import json
import os
import random
import sys

import vllm
from transformers import AutoTokenizer
from vllm.tokenizers.detokenizer_utils import convert_ids_list_to_tokens
from vllm.v1.engine.logprobs import LogprobsProcessor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_detokenizer_streams import random_ids  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TOKENIZERS = os.path.join(ROOT, "tests", "fixtures", "tokenizers")
OUT = os.path.join(ROOT, "tests", "fixtures", "detokenizer", "logprob_tokens.json")
NAMES = ["TinyLlama-1.1B-Chat-v1.0", "Mistral-7B-Instruct-v0.3", "Phi-3-mini-4k-instruct",
         "Qwen2.5-0.5B-Instruct", "gpt2", "SmolLM-135M-Instruct"]
TEXTS = ["The capital of 日本 😀 is  Tōkyō.", "  two leading spaces\nand a new line",
         "emoji 👨‍👩‍👧 family, ∑ maths ≈ ✓", "中文字符和标点。", "x"]


class _Processor:  # what _correct_decoded_token reads of its LogprobsProcessor
    def __init__(self, tokenizer):
        self.tokenizer = tokenizer


def vllm_texts(tok, ids):
    decoded = convert_ids_list_to_tokens(tok, ids)
    out = []
    for i, (tid, text) in enumerate(zip(ids, decoded)):
        if text.endswith("\ufffd"):
            text = LogprobsProcessor._correct_decoded_token(_Processor(tok), tid, ids[max(0, i - 4):i])
        out.append(text)
    return out


def main():
    cases = {}
    for name in NAMES:
        tok = AutoTokenizer.from_pretrained(os.path.join(TOKENIZERS, name))
        rng = random.Random(5)
        vocab = len(tok)
        byte_ids = [i for i in range(vocab) if (t := tok.convert_ids_to_tokens(i)) is not None
                    and len(t) == 6 and t.startswith("<0x")]
        specials = list(tok.all_special_ids)
        seqs = [tok.encode(t, add_special_tokens=True) for t in TEXTS]
        for _ in range(12):
            seqs.append(random_ids(rng, rng.randrange(1, 24), vocab, specials, byte_ids))
        cases[name + "/tokenizer.json"] = [{"ids": s, "texts": vllm_texts(tok, s)} for s in seqs]
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump({"vllm": vllm.__version__, "cases": cases}, f, ensure_ascii=False,
                  separators=(",", ":"))
        f.write("\n")
    print(OUT, os.path.getsize(OUT), "bytes")


if __name__ == "__main__":
    main()
