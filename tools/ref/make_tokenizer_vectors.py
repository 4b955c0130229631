# Writes tokenizer reference vectors (ids + decoded text) with the HF `tokenizers` library.
"""Reference vectors for loom's tokenizer tests.

For every tokenizer file under tests/fixtures/tokenizers/ this writes
tests/fixtures/tokenizer_vectors/<name>.json with, for a corpus of hard strings:
  ids            Tokenizer.from_file(f).encode(text, add_special_tokens=False).ids
  ids_special    ... add_special_tokens=True
  decoded        decode(ids_special, skip_special_tokens=False)
  decoded_skip   decode(ids_special, skip_special_tokens=True)
  ids_transformers  (folders with a tokenizer_config.json) transformers'
                 AutoTokenizer.from_pretrained(folder).encode(text): what `loom generate --prompt`
                 must produce (Tokenizer::FromModelDir)
and, for seeded random id sequences, their decoded text (both skip settings).

Truncation and padding stored in a tokenizer.json are switched off first, as transformers
does when it loads a tokenizer (loom applies neither).

It also builds tests/fixtures/tokenizers/Qwen2.5-0.5B-Instruct/tokenizer.json from the
shared vocab.json + merges.txt + tokenizer_config.json with transformers (Qwen2Tokenizer),
which is how the qwen2 llama.cpp vectors get a tokenizer to check against.

Folders without tokenizer.json (tests/fixtures/tokenizers/slow/<name>/: vocab.json + merges.txt
or a SentencePiece tokenizer.model, copied from the shared fixtures or trained here with
sentencepiece) get tests/fixtures/tokenizer_vectors/slow/<name>.json: the same fields, all from
transformers' AutoTokenizer (ids / ids_special: encode(text, add_special_tokens=False / True);
decoded*: its backend tokenizer's decode), which is what loom's conversion must reproduce.

Usage: python tools/ref/make_tokenizer_vectors.py [--copy] [--slow]
  --copy  first copy the tokenizer folders from ../shared/fixtures/tokenizers/
  --slow  first (re)build the slow folders (copies + sentencepiece training)
"""
import argparse
import json
import os
import random
import shutil

from tokenizers import Tokenizer

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SHARED = os.path.abspath(os.path.join(ROOT, "..", "shared", "fixtures", "tokenizers"))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "tokenizers")
OUT = os.path.join(ROOT, "tests", "fixtures", "tokenizer_vectors")

# Folders copied from the shared fixtures (every one that has a tokenizer.json, plus Qwen2.5 whose
# tokenizer.json is built here).
FOLDERS = [
    "Llama-2-7b", "Mistral-7B-Instruct-v0.3", "Phi-3-mini-4k-instruct", "SmolLM-135M-Instruct",
    "TinyLlama-1.1B-Chat-v1.0", "custom-bpe-bytelevel-nfkc-AIwithMann",
    "custom-bpe-whitespace-Abhay557", "gpt2", "pythia-410m", "tiny-added-tokens-llama-style",
    "tiny-swift-transformers-bpe", "torchtune-test-assets",
]
# Files not needed by the tests (the slow-tokenizer forms) are not copied.
SKIP_FILES = {"tokenizer.model", "vocab.json", "merges.txt"}

# Tokenizer files → vector names.
# Copied but without vectors: files the HF library refuses to load (loom refuses them too; the
# C++ tests check that). Llama-2-7b's "merges" hold entries such as "   " that are not two tokens
# separated by one space; tiny-added-tokens-llama-style has "merges": {} (an object, not a list);
# tiny-swift-transformers-bpe has added_tokens without their required flags (single_word, ...).
REFUSED = {"Llama-2-7b", "tiny-added-tokens-llama-style", "tiny-swift-transformers-bpe"}
TOKENIZERS = {f: f"{f}/tokenizer.json" for f in FOLDERS
              if f != "torchtune-test-assets" and f not in REFUSED}
TOKENIZERS["torchtune-test-assets"] = "torchtune-test-assets/tokenizer.json"
TOKENIZERS["torchtune-tiny-bpe"] = "torchtune-test-assets/tiny_bpe_tokenizer.json"
TOKENIZERS["torchtune-gemma-cropped"] = "torchtune-test-assets/tokenizer_gemma_cropped.json"
TOKENIZERS["Qwen2.5-0.5B-Instruct"] = "Qwen2.5-0.5B-Instruct/tokenizer.json"
# A Unigram tokenizer.json: transformers' conversion of slow/spm-unigram, saved (build_slow).
TOKENIZERS["spm-unigram-json"] = "spm-unigram-json/tokenizer.json"
TOKENIZERS["spm-unigram-nfkc-json"] = "spm-unigram-nfkc-json/tokenizer.json"

CORPUS = [
    "", " ", "  ", "   ", "\t", "\n", "\n\n", "\t\n", " \n \n ", "\r\n", "a", "Hello world",
    " Hello world", "Hello world ", "  Hello   world  ", "hello\tworld\n", "Hello\n\n\nworld",
    "Hello, world! How's it going? I'm fine, you'll see, we'd've... 'S 'T 'RE",
    "The quick brown fox jumps over the lazy dog.",
    "1234567890 12345678901234567890 3.14159 1,000,000 -42 +7 0x1F 1e-9",
    "Numbers: 1 22 333 4444 55555 666666 7777777",
    "Ünïcödé ñ çå ß Æ Œ ﬁ ﬀ ① ² ½ Ⅻ ｆｕｌｌｗｉｄｔｈ",
    "e\u0301 a\u0300 o\u0308 n\u0303 (combining marks) \u1e9b\u0323 \u212b \u00c5",
    "Zalgo: Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319a\u0310l\u0357g\u0360o",
    "日本語のテキストです。東京は大きい都市です。", "中文字符串，包括标点符号！", "한국어 텍스트 입니다",
    "Русский текст с пробелами", "Ελληνικά κείμενα ΣΊΣΥΦΟΣ", "עברית ו العربية مع أرقام ١٢٣",
    "हिन्दी पाठ और संख्या १२३", "ภาษาไทย ไม่มีช่องว่าง",
    "emoji: 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️ 🤖🚀", "🦙🦙 llama🦙", "\u200b\u200c\u200d zero widths \ufeff",
    "tabs\t\tand\t\t\tspaces    mixed \t \t", "trailing spaces     ", "     leading spaces",
    "line1\nline2\r\nline3\rline4\u2028line5\u2029", "nbsp\u00a0here and\u3000ideographic",
    "code: def f(x):\n    return x**2  # comment\n\tif x: pass",
    "<html><body class=\"a\">text &amp; more</body></html>",
    "URL https://example.com/path?q=1&b=2#frag and email a.b@c.org",
    "MixedCASE camelCase snake_case kebab-case SCREAMING_CASE",
    "punctuation!!! ??? ... ,,, ;;; ::: --- ___ ((( ))) [[[ ]]] {{{ }}} @@@ ### $$$ %%% ^^^",
    "İstanbul İ ı ǅ Σ ς σ ẞ",
    "'s 're 've 'm 'll 'd 'S 'RE 'VE 'M 'LL 'D",
    "a" * 200, "ab " * 80, "9" * 120, "😀" * 30,
    "\u0000 null \u0001 controls \u007f \u0085",
    "ﬀ ﬁ ﬂ ﬃ ﬄ ℌ ℍ ㌀ ㍻ ™ ℡ ㈱",
    "Ok. \u2581 already metaspace \u2581\u2581 and ▁x",
    "<0x41> <unk> literal byte token text",
]


def special_strings(tok):
    """Strings that write the tokenizer's added tokens in text, in hard positions."""
    added = list(tok.get_added_tokens_decoder().values())
    random.Random(0).shuffle(added)
    out = []
    for t in added[:6]:
        c = t.content
        out += [c, f"Hello{c}world", f" {c} x ", f"{c}{c}", f"a {c}\n{c}b", f"{c[:-1]}"]
    if len(added) >= 2:
        out.append(f"{added[0].content} text {added[1].content} more")
    return out


def build_qwen():
    from transformers import AutoTokenizer
    src = os.path.join(SHARED, "Qwen2.5-0.5B-Instruct")
    dst = os.path.join(FIXTURES, "Qwen2.5-0.5B-Instruct")
    os.makedirs(dst, exist_ok=True)
    t = AutoTokenizer.from_pretrained(src)
    t.backend_tokenizer.save(os.path.join(dst, "tokenizer.json"), pretty=False)
    for f in ("tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(os.path.join(src, f), os.path.join(dst, f))


def copy_folders():
    for f in FOLDERS:
        src = os.path.join(SHARED, f)
        dst = os.path.join(FIXTURES, f)
        os.makedirs(dst, exist_ok=True)
        for name in sorted(os.listdir(src)):
            if name in SKIP_FILES:
                continue
            shutil.copy(os.path.join(src, name), os.path.join(dst, name))
            os.chmod(os.path.join(dst, name), 0o644)
    build_qwen()


SLOW_DIR = os.path.join(FIXTURES, "slow")
SLOW_OUT = os.path.join(OUT, "slow")
# name → (shared folder to copy files from or None, files, tokenizer_config.json or None to copy).
SLOW_COPIED = {
    "Qwen2.5-0.5B-Instruct": ("Qwen2.5-0.5B-Instruct", ["vocab.json", "merges.txt", "tokenizer_config.json"]),
    "gpt2": ("gpt2", ["vocab.json", "merges.txt", "tokenizer_config.json"]),
    "TinyLlama-1.1B-Chat-v1.0": ("TinyLlama-1.1B-Chat-v1.0", ["tokenizer.model", "tokenizer_config.json"]),
}
# Trained SentencePiece models (600 pieces, identity normalization, byte fallback, a user-defined
# and a control piece) with the tokenizer_config.json each folder gets.
SLOW_TRAINED = {
    "spm-unigram": ("unigram", {"tokenizer_class": "PreTrainedTokenizerFast"}),
    "spm-unigram-first": ("unigram", {"tokenizer_class": "TokenizersBackend", "legacy": False,
                                      "add_bos_token": True, "add_eos_token": True}),
    "spm-bpe": ("bpe", {"tokenizer_class": "TokenizersBackend", "add_bos_token": True}),
    "spm-bpe-gemma": ("bpe", {"tokenizer_class": "GemmaTokenizer", "add_bos_token": True,
                              "bos_token": "<s>", "eos_token": "</s>"}),
    "spm-bpe-llama-legacy": ("bpe", {
        "tokenizer_class": "LlamaTokenizerFast", "legacy": True, "add_bos_token": True,
        "add_eos_token": True,
        "added_tokens_decoder": {"600": {"content": "<|user|>", "lstrip": False, "normalized": False,
                                         "rstrip": True, "single_word": False, "special": True}}}),
    "spm-bpe-llama-noprefix": ("bpe", {"tokenizer_class": "LlamaTokenizer", "legacy": False,
                                       "add_prefix_space": False}),
    # Real configs (a string: copy that shared folder's tokenizer_config.json) on the tiny models.
    "spm-bpe-llama2-config": ("bpe", "Llama-2-7b"),
    "spm-bpe-gemma-it-config": ("bpe", "gemma-2b-it"),
    "spm-unigram-raw": ("unigram-raw", {"tokenizer_class": "TokenizersBackend", "add_eos_token": True}),
    # nmt_nfkc: a precompiled_charsmap normalizer (T5-style).
    "spm-unigram-nfkc": ("unigram-nfkc", {"tokenizer_class": "TokenizersBackend", "legacy": False}),
    # T5-style ids (pad 0, eos 1, unk 2, no bos) with T5Tokenizer and 5 sentinels.
    "spm-unigram-t5": ("unigram-t5", {"tokenizer_class": "T5Tokenizer", "extra_ids": 5}),
    # None: no tokenizer_config.json, only a config.json of model_type llama (TokenizersBackend).
    "spm-bpe-no-tokenizer-config": ("bpe", None),
}


def train_spm(kind):
    import io
    import sentencepiece as spm
    import transformers
    src = os.path.join(os.path.dirname(transformers.__file__), "tokenization_utils_base.py")
    with open(src, encoding="utf-8") as fh:
        lines = [l for l in fh.read().splitlines() if l.strip()]
    lines += ["Ünïcödé ñ çå ß Æ 日本語のテキストです。 Русский текст", "emoji 😀 🦙 ｆｕｌｌ",
              "1234567890 3.14159"] * 20
    out = io.BytesIO()
    raw = kind.endswith("-raw")  # no dummy prefix, extra whitespace kept
    rule = "nmt_nfkc" if kind.endswith("-nfkc") else "identity"
    ids = dict(pad_id=0, eos_id=1, unk_id=2, bos_id=-1) if kind.endswith("-t5") else {}
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=out, vocab_size=600,
        model_type=kind.split("-")[0], add_dummy_prefix=not raw, remove_extra_whitespaces=not raw,
        normalization_rule_name=rule, byte_fallback=True,
        user_defined_symbols=["<tool>", "@@"], control_symbols=["<ctrl>"],
        num_threads=1, minloglevel=2, shuffle_input_sentence=False, **ids)
    return out.getvalue()


def build_slow():
    for name, (folder, files) in SLOW_COPIED.items():
        dst = os.path.join(SLOW_DIR, name)
        os.makedirs(dst, exist_ok=True)
        for f in files:
            shutil.copy(os.path.join(SHARED, folder, f), os.path.join(dst, f))
            os.chmod(os.path.join(dst, f), 0o644)
    models = {}
    for name, (model_type, config) in SLOW_TRAINED.items():
        if model_type not in models:
            models[model_type] = train_spm(model_type)
        dst = os.path.join(SLOW_DIR, name)
        os.makedirs(dst, exist_ok=True)
        with open(os.path.join(dst, "tokenizer.model"), "wb") as fh:
            fh.write(models[model_type])
        if config is None:
            with open(os.path.join(dst, "config.json"), "w", encoding="utf-8") as fh:
                fh.write('{"model_type": "llama"}\n')
            continue
        if isinstance(config, str):
            shutil.copy(os.path.join(SHARED, config, "tokenizer_config.json"),
                        os.path.join(dst, "tokenizer_config.json"))
            os.chmod(os.path.join(dst, "tokenizer_config.json"), 0o644)
            continue
        with open(os.path.join(dst, "tokenizer_config.json"), "w", encoding="utf-8") as fh:
            json.dump(config, fh, indent=2)
            fh.write("\n")


def save_unigram_json():
    from transformers import AutoTokenizer
    for name in ("spm-unigram", "spm-unigram-nfkc"):
        dst = os.path.join(FIXTURES, f"{name}-json")
        os.makedirs(dst, exist_ok=True)
        t = AutoTokenizer.from_pretrained(os.path.join(SLOW_DIR, name))
        t.backend_tokenizer.save(os.path.join(dst, "tokenizer.json"), pretty=False)


def slow_vectors(name):
    from transformers import AutoTokenizer
    auto = AutoTokenizer.from_pretrained(os.path.join(SLOW_DIR, name))
    backend = auto.backend_tokenizer
    cases = []
    for text in CORPUS + special_strings(backend):
        ids_special = auto.encode(text, add_special_tokens=True)
        cases.append({
            "text": text, "ids": auto.encode(text, add_special_tokens=False),
            "ids_special": ids_special,
            "decoded": backend.decode(ids_special, skip_special_tokens=False),
            "decoded_skip": backend.decode(ids_special, skip_special_tokens=True),
        })
    out = {"folder": f"slow/{name}", "class": type(auto).__name__, "cases": cases}
    os.makedirs(SLOW_OUT, exist_ok=True)
    with open(os.path.join(SLOW_OUT, f"{name}.json"), "w", encoding="utf-8") as fh:
        json.dump(out, fh, ensure_ascii=False, indent=0)
        fh.write("\n")


def vectors(name, rel):
    tok = Tokenizer.from_file(os.path.join(FIXTURES, rel))
    tok.no_truncation()
    tok.no_padding()
    folder = os.path.join(FIXTURES, os.path.dirname(rel))
    auto = None
    if rel.endswith("/tokenizer.json") and os.path.exists(os.path.join(folder, "tokenizer_config.json")):
        from transformers import AutoTokenizer
        auto = AutoTokenizer.from_pretrained(folder)
    cases = []
    for text in CORPUS + special_strings(tok):
        enc = tok.encode(text, add_special_tokens=False).ids
        enc_sp = tok.encode(text, add_special_tokens=True).ids
        case = {
            "text": text, "ids": enc, "ids_special": enc_sp,
            "decoded": tok.decode(enc_sp, skip_special_tokens=False),
            "decoded_skip": tok.decode(enc_sp, skip_special_tokens=True),
        }
        if auto is not None:
            case["ids_transformers"] = auto.encode(text)
        cases.append(case)
    rng = random.Random(1234)
    vocab = tok.get_vocab_size(with_added_tokens=True)
    special_ids = sorted(tok.get_added_tokens_decoder().keys())
    randoms = []
    for n in range(40):
        ids = [rng.randrange(vocab) for _ in range(rng.randrange(1, 24))]
        if special_ids and n % 4 == 0:
            ids.insert(rng.randrange(len(ids) + 1), rng.choice(special_ids))
        randoms.append({
            "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False),
            "decoded_skip": tok.decode(ids, skip_special_tokens=True),
        })
    out = {"tokenizer": rel, "cases": cases, "random_decode": randoms}
    with open(os.path.join(OUT, f"{name}.json"), "w", encoding="utf-8") as fh:
        json.dump(out, fh, ensure_ascii=False, indent=0)
        fh.write("\n")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--copy", action="store_true")
    p.add_argument("--slow", action="store_true")
    p.add_argument("--only-slow", action="store_true", help="write the slow-folder vectors only")
    args = p.parse_args()
    if args.copy:
        copy_folders()
    if args.slow:
        build_slow()
        save_unigram_json()
    for name in sorted(list(SLOW_COPIED) + list(SLOW_TRAINED)):
        slow_vectors(name)
        print("wrote slow", name)
    if args.only_slow:
        return
    os.makedirs(OUT, exist_ok=True)
    for name in sorted(REFUSED):
        try:
            Tokenizer.from_file(os.path.join(FIXTURES, name, "tokenizer.json"))
            raise SystemExit(f"{name}: expected the HF library to refuse it")
        except Exception as e:  # the library raises a plain Exception
            print("refused as expected:", name, "-", e)
    for name, rel in sorted(TOKENIZERS.items()):
        vectors(name, rel)
        print("wrote", name)


if __name__ == "__main__":
    main()
