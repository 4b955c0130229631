# Writes seeded random-string tokenizer vectors (ids + decoded text) with the HF `tokenizers` library.
"""Random encode vectors for loom's tokenizer tests.

For every tokenizer.json that make_tokenizer_vectors.py covers (its TOKENIZERS) this writes
tests/fixtures/tokenizer_vectors/random/<name>.json: CASES seeded random strings (0-200 code
points) drawn from a mixture of fragments chosen to hit tokenizer edge cases, each with
  ids            Tokenizer.from_file(f).encode(text, add_special_tokens=False).ids
  ids_special    ... add_special_tokens=True
  decoded        decode(ids_special, skip_special_tokens=False)
  decoded_skip   decode(ids_special, skip_special_tokens=True)
tests/unit/tokenizer_random_test.cc compares every case exactly.

The strings are Python str without surrogates, so always valid UTF-8. The seed of each file is
SEED + the tokenizer's index in sorted order; the files record it with the library versions.

Usage: python tools/ref/make_tokenizer_random_vectors.py [--cases N] [--only NAME] [--seed S]
"""
import argparse
import json
import os
import random
import sys

import tokenizers
from tokenizers import Tokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tokenizer_vectors import FIXTURES, OUT, TOKENIZERS  # noqa: E402

SEED = 20261207
CASES = 400
RANDOM_OUT = os.path.join(OUT, "random")

# Cases loom deliberately encodes or decodes differently, each naming the documented deviation
# in docs/. None so far: every generated case must match.
EXCLUDED = []

WHITESPACE = [" ", " ", " ", "\t", "\n", "\r\n", "\r", "\u00a0", "\u3000", "\u2009", "\u2028",
              "\u0085", "\x0b", "\x0c", "\u200a", "\u202f", "\u1680"]
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d"]
PUNCT = list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~") + ["…", "—", "–", "«", "»", "¿", "¡", "、", "。",
                                                     "，", "！", "・", "“", "”", "‘", "’", "§", "¶"]
WORDS = ["the", "hello", "world", "token", "izer", "don", "can", "it", "a", "I", "ing", "tion",
         "Llama", "GPT", "http", "www", "com", "foo_bar", "x", "self", "return", "def", "ü",
         "naïve", "café", "straße", "İstanbul", "ǅemal", "ΣΊΣΥΦΟΣ", "Москва", "ĳ"]
CJK = "日本語中文字符串東京大都市的是了我你他们这个说漢字テキストですカタカナひらがなー々〆"
HANGUL = "한국어텍스트입니다가나다라마바사아자차카타파하힣"
THAI = "ภาษาไทยไม่มีช่องว่างกขฃคฅฆงจฉชซฌญ" + "\u0e31\u0e34\u0e35\u0e36\u0e37\u0e38\u0e39\u0e47\u0e48\u0e49"
ARABIC = "العربيةمعأرقام١٢٣ًٌٍَُِّْ"
HEBREW = "עברית" + "\u05b0\u05b4\u05bc\u05c1"
DEVANAGARI = "हिन्दीपाठऔरसंख्या१२३क्षत्रज्ञ" + "\u0901\u0902\u093c\u094d\u0951"
EMOJI = ["😀", "🦙", "🚀", "❤️", "❤", "👍🏽", "👍🏿", "👨‍👩‍👧‍👦", "👩🏽‍💻", "🏳️‍🌈", "🇫🇷", "🇯🇵", "🇺🇸",
         "☺︎", "☺️", "1️⃣", "#️⃣", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "🧑‍🤝‍🧑", "✋🏻", "👁‍🗨", "🫠", "🤖"]
ZERO_WIDTH = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u034f", "\u180e",
              "\u200e", "\u200f", "\u202e", "\ufe0f", "\ufe0e", "\U000e0101"]
NORM_SENSITIVE = ["ﬁ", "ﬂ", "ﬀ", "ﬃ", "Ａ", "ｂ", "１", "？", "²", "³", "¹", "₂", "½", "Å", "A\u030a",
                  "\u212b", "é", "e\u0301", "\u1100\u1161\u11a8", "\u1112\u1161\u11ab", "각",
                  "ㄱ", "ﾊﾟ", "ｶﾞ", "㍻", "㈱", "™", "℡", "Ⅻ", "①", "ℌ", "µ", "Ω", "\u2126", "ſ",
                  "ǅ", "ẞ", "ß", "İ", "ı", "\u1e9b\u0323", "q\u0307\u0323", "\u0344", "\u0958",
                  "\uf900", "\u2024", "…", "\u3000", "ｰ", "〜", "\u00a8", "\u00b4", "Ⓐ", "ǈ"]
WEIRD_VALID = ["\ufffd", "\ufffe", "\uffff", "\U0010ffff", "\U000fffff", "\ue000", "\uf8ff",
               "Ã©", "â€™", "Ġ", "Ċ", "ĉ", "▁", "▁▁", "<0xFF>", "<0x0A>", "\\xff", "\\u00e9",
               "\x00", "\x01", "\x1b[0m", "\x7f", "\x80", "\x9f", "\U0001d400", "\U00020000",
               "\U0002a6d6", "\U000e0041", "</s>", "<s>", "<unk>", "<pad>", "[UNK]", "<|endoftext|>",
               "<|im_start|>", "<mask>", "<"]


def rare_char(rng):
    """A code point unlikely to be in any vocab (never a surrogate)."""
    while True:
        r = rng.random()
        if r < 0.4:
            cp = rng.randrange(0x0250, 0x3000)
        elif r < 0.7:
            cp = rng.randrange(0xA000, 0xFFFF)
        elif r < 0.9:
            cp = rng.randrange(0x10000, 0x30000)
        else:
            cp = rng.randrange(0x30000, 0x110000)
        if not 0xD800 <= cp <= 0xDFFF:
            return chr(cp)


def rand_case(rng, w):
    r = rng.random()
    if r < 0.5:
        return w
    if r < 0.65:
        return w.upper()
    if r < 0.8:
        return w.capitalize()
    return "".join(c.upper() if rng.random() < 0.5 else c.lower() for c in w)


def ascii_word(rng):
    if rng.random() < 0.5:
        return rand_case(rng, rng.choice(WORDS))
    n = rng.randrange(1, 12)
    return rand_case(rng, "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(n)))


def digits(rng):
    n = rng.choice([1, 1, 2, 3, 3, 4, 5, 7, 10, 16, 30])
    s = "".join(rng.choice("0123456789") for _ in range(n))
    r = rng.random()
    if r < 0.1:
        s += "." + str(rng.randrange(1000))
    elif r < 0.15:
        s = "".join(rng.choice("０１２３４５６７８９١٢٣१२३") for _ in range(min(n, 6)))
    return s


def whitespace(rng):
    n = rng.choice([1, 1, 1, 2, 3, 5, 9])
    return "".join(rng.choice(WHITESPACE) for _ in range(n))


def punct(rng):
    return "".join(rng.choice(PUNCT) for _ in range(rng.choice([1, 1, 2, 3, 6])))


def contraction(rng):
    c = rand_case(rng, rng.choice(CONTRACTIONS))
    if rng.random() < 0.15:
        c = c.replace("'", rng.choice(["’", "`"]))
    return rng.choice(["", ascii_word(rng), " ", "n"]) + c


def script_run(rng, chars, lo=1, hi=8):
    return "".join(rng.choice(chars) for _ in range(rng.randrange(lo, hi)))


def combining(rng):
    base = rng.choice(["a", "e", "o", "Z", "क", "ก", "ا", " ", "1", "\u25cc"])
    return base + "".join(chr(rng.randrange(0x0300, 0x0370)) for _ in range(rng.randrange(1, 5)))


def fragment(rng, added):
    kinds = [
        (14, ascii_word), (6, digits), (10, whitespace), (5, punct), (4, contraction),
        (3, lambda r: script_run(r, CJK)), (2, lambda r: script_run(r, HANGUL)),
        (2, lambda r: script_run(r, THAI)), (2, lambda r: script_run(r, ARABIC)),
        (1, lambda r: script_run(r, HEBREW)), (2, lambda r: script_run(r, DEVANAGARI)),
        (2, combining), (4, lambda r: "".join(r.choice(EMOJI) for _ in range(r.randrange(1, 4)))),
        (3, lambda r: r.choice(ZERO_WIDTH)), (4, lambda r: r.choice(NORM_SENSITIVE)),
        (3, lambda r: "".join(rare_char(r) for _ in range(r.randrange(1, 4)))),
        (3, lambda r: r.choice(WEIRD_VALID)),
        (1, lambda r: chr(r.randrange(0x20, 0x7f)) * r.randrange(2, 40)),
    ]
    if added:
        kinds.append((9, lambda r: added_piece(r, added)))
    total = sum(w for w, _ in kinds)
    x = rng.randrange(total)
    for w, f in kinds:
        if x < w:
            return f(rng)
        x -= w
    raise AssertionError


def added_piece(rng, added):
    """An added token whole (often), or a part of one, maybe with whitespace around it."""
    c = rng.choice(added).content
    r = rng.random()
    if r < 0.6 or len(c) < 2:
        s = c
    elif r < 0.7:
        s = c[:rng.randrange(1, len(c))]
    elif r < 0.8:
        s = c[rng.randrange(1, len(c)):]
    elif r < 0.9:
        i = rng.randrange(len(c))
        s = c[i:rng.randrange(i + 1, len(c) + 1)]
    else:
        s = rand_case(rng, c)
    if rng.random() < 0.3:
        s = whitespace(rng) + s
    if rng.random() < 0.3:
        s = s + whitespace(rng)
    return s


def random_text(rng, added):
    if rng.random() < 0.02:
        return ""
    limit = rng.choice([3, 8, 20, 40, 80, 200])
    target = rng.randrange(1, limit + 1)
    parts = []
    n = 0
    while n < target:
        f = fragment(rng, added)
        if rng.random() < 0.35:
            f = " " + f
        parts.append(f)
        n += len(f)
    text = "".join(parts)
    if len(text) > 200:
        text = text[:200]
    r = rng.random()
    if r < 0.1:
        text = whitespace(rng) + text
    elif r < 0.2:
        text = text + whitespace(rng)
    return text


def vectors(index, name, rel, cases, base_seed):
    tok = Tokenizer.from_file(os.path.join(FIXTURES, rel))
    tok.no_truncation()
    tok.no_padding()
    added = list(tok.get_added_tokens_decoder().values())
    added.sort(key=lambda t: t.content)
    seed = base_seed + index
    rng = random.Random(seed)
    out_cases = []
    excluded = {text for n, text, _ in EXCLUDED if n == name}
    while len(out_cases) < cases:
        text = random_text(rng, added)
        if text in excluded:
            continue
        text.encode("utf-8")  # raises on a surrogate
        enc = tok.encode(text, add_special_tokens=False).ids
        enc_sp = tok.encode(text, add_special_tokens=True).ids
        out_cases.append({
            "text": text, "ids": enc, "ids_special": enc_sp,
            "decoded": tok.decode(enc_sp, skip_special_tokens=False),
            "decoded_skip": tok.decode(enc_sp, skip_special_tokens=True),
        })
    os.makedirs(RANDOM_OUT, exist_ok=True)
    path = os.path.join(RANDOM_OUT, f"{name}.json")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(json.dumps({"tokenizer": rel, "seed": seed, "tokenizers": tokenizers.__version__,
                             "python": sys.version.split()[0]}, ensure_ascii=False)[:-1])
        fh.write(', "cases": [\n')
        fh.write(",\n".join(json.dumps(c, ensure_ascii=False, separators=(",", ":"))
                            for c in out_cases))
        fh.write("\n]}\n")
    return os.path.getsize(path)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--cases", type=int, default=CASES)
    p.add_argument("--only", default=None)
    p.add_argument("--seed", type=int, default=SEED, help="explore with another seed (not committed)")
    args = p.parse_args()
    total = 0
    for index, (name, rel) in enumerate(sorted(TOKENIZERS.items())):
        if args.only and name != args.only:
            continue
        size = vectors(index, name, rel, args.cases, args.seed)
        total += size
        print(f"wrote random/{name}.json ({args.cases} cases, {size} bytes)")
    print("total bytes", total)


if __name__ == "__main__":
    main()
