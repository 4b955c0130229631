# Encode throughput of loom's tokenizer vs the HF tokenizers library, same text, one thread each.
"""Side-by-side tokenizer benchmark; writes docs/PERFORMANCE.md's tokenizer section.

For each tokenizer: a ~1 MB mixed text (Python sources and docs = English prose + code, plus
multi-script lines: CJK, Cyrillic, Arabic, Devanagari, emoji, digits) is encoded N times without
special tokens by `loom tokenize --bench N` and by `Tokenizer.encode` of the HF library
(RAYON_NUM_THREADS=1; a single encode call does not parallelize anyway) — the Rust tokenizer
that transformers' AutoTokenizer builds for the folder, which `loom tokenize --model` mirrors. Both sides report the
median time; the first (cold-cache) run is listed too. The ids of the two are checked equal
before timing.

Usage: python tools/bench/bench_tokenizer.py [--loom build/loom] [--iterations 5] [--no-write]
Needs: pip install tokenizers transformers.
"""
import argparse
import glob
import json
import os
import random
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
import tokenizers  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "tokenizers")
TOKENIZERS = ["gpt2", "Qwen2.5-0.5B-Instruct", "TinyLlama-1.1B-Chat-v1.0", "SmolLM-135M-Instruct"]
BEGIN, END = "<!-- bench:tokenizer:begin -->", "<!-- bench:tokenizer:end -->"

MULTI = [
    "東京は日本の首都であり、世界で最も人口の多い都市圏の一つです。",
    "人工智能正在改变我们的生活方式，包括医疗、教育和交通。",
    "Москва — столица России, крупнейший по численности населения город страны.",
    "القاهرة هي عاصمة مصر وأكبر مدنها، ويبلغ عدد سكانها ٢٠ مليون نسمة.",
    "भारत एक विशाल देश है जिसकी जनसंख्या १४० करोड़ से अधिक है।",
    "Emoji test 😀😃 👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️ 🚀🤖 and more 🎉🎉🎉",
    "Numbers 3.14159265358979 2718281828 1,234,567.89 -42 0xDEADBEEF 1e-10",
    "Ünïcödé façade naïve coöperate résumé Ångström ﬁnance Ⅻ ½ ²",
    "한국어 문장도 포함되어 있습니다. 서울은 대한민국의 수도입니다.",
]


def make_text(target=1_000_000):
    rng = random.Random(0)
    pydir = os.path.dirname(os.__file__)
    files = sorted(glob.glob(os.path.join(pydir, "*.py")))
    parts, size = [], 0
    for f in files:
        with open(f, encoding="utf-8", errors="replace") as fh:
            chunk = fh.read()
        parts.append(chunk)
        size += len(chunk.encode())
        for _ in range(len(chunk) // 2000):
            line = rng.choice(MULTI)
            parts.append(line + "\n")
            size += len(line.encode()) + 1
        if size >= target:
            break
    return "".join(parts).encode()[:target].decode("utf-8", errors="ignore")


def hf_tokenizer(model_dir):
    """The folder's tokenizer as transformers builds it (what `loom tokenize --model` mirrors)."""
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(model_dir).backend_tokenizer


def bench_hf(tok, text, iterations):
    tok.no_truncation()
    tok.no_padding()
    times, ids = [], None
    for _ in range(iterations):
        t0 = time.perf_counter()
        enc = tok.encode(text, add_special_tokens=False)
        times.append(time.perf_counter() - t0)
        ids = enc.ids
    first = times[0]
    times.sort()
    return {"first_s": first, "median_s": times[len(times) // 2], "tokens": len(ids)}, ids


def run_loom(loom, model_dir, text_file, extra):
    out = subprocess.run([loom, "tokenize", "--model", model_dir, "--file", text_file] + extra,
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--loom", default=os.path.join(ROOT, "build", "loom"))
    p.add_argument("--iterations", type=int, default=5)
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()
    text = make_text()
    nbytes = len(text.encode())
    rows = []
    with tempfile.NamedTemporaryFile("w", suffix=".txt", encoding="utf-8", delete=False) as fh:
        fh.write(text)
        text_file = fh.name
    try:
        for name in TOKENIZERS:
            model_dir = os.path.join(FIXTURES, name)
            hf, hf_ids = bench_hf(hf_tokenizer(model_dir), text, args.iterations)
            loom_ids = run_loom(args.loom, model_dir, text_file, ["--no-special-tokens"])["ids"]
            same = loom_ids == hf_ids
            lb = run_loom(args.loom, model_dir, text_file, ["--bench", str(args.iterations)])
            row = {"tokenizer": name, "tokens": hf["tokens"], "ids_equal": same,
                   "hf_mb_s": nbytes / hf["median_s"] / 1e6, "loom_mb_s": lb["mb_per_s"],
                   "hf_first_s": hf["first_s"], "loom_first_s": lb["first_s"]}
            row["ratio"] = row["loom_mb_s"] / row["hf_mb_s"]
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        os.unlink(text_file)
    if not all(r["ids_equal"] for r in rows):
        sys.exit("ids differ between loom and the HF library; not writing figures")
    if not args.no_write:
        write_doc(rows, nbytes, args.iterations)


def write_doc(rows, nbytes, iterations):
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next(l.split(":", 1)[1].strip() for l in fh if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    lines = [
        BEGIN,
        "## Tokenizer encode throughput",
        "",
        f"`tools/bench/bench_tokenizer.py`: one {nbytes / 1e6:.2f} MB mixed text (Python sources "
        "and docs, plus CJK / Cyrillic / Arabic / Devanagari / emoji / digit lines), encoded "
        f"without special tokens, median of {iterations} runs, one thread each, same run, on "
        f"{cpu} (shared with other jobs; figures vary run to run). HF = `tokenizers` "
        f"{tokenizers.__version__} `Tokenizer.encode` (from Python; the tokenizer transformers "
        "builds for the folder); loom = "
        "`loom tokenize --bench`. Ids are checked identical first. Cold = the first run "
        "(empty word caches on both sides).",
        "",
        "| tokenizer | tokens | HF MB/s | loom MB/s | loom / HF | HF cold s | loom cold s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(f"| {r['tokenizer']} | {r['tokens']} | {r['hf_mb_s']:.2f} | "
                     f"{r['loom_mb_s']:.2f} | {r['ratio']:.2f}× | {r['hf_first_s']:.3f} | "
                     f"{r['loom_first_s']:.3f} |")
    lines.append(END)
    block = "\n".join(lines)
    path = os.path.join(ROOT, "docs", "PERFORMANCE.md")
    doc = open(path, encoding="utf-8").read() if os.path.exists(path) else "# loom performance\n"
    if BEGIN in doc and END in doc:
        head, rest = doc.split(BEGIN, 1)
        doc = head + block + rest.split(END, 1)[1]
    else:
        doc = doc.rstrip("\n") + "\n\n" + block + "\n"
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(doc)
    print("wrote", path)


if __name__ == "__main__":
    main()
