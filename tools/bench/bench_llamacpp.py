# Measures llama.cpp (through llama-cpp-python's low-level C API) prefill and decode tokens/s on a GGUF; prints one JSON line.
"""llama.cpp peer benchmark.

    .venv-bench/bin/python tools/bench/bench_llamacpp.py \
        --gguf bench-models/qwen2.5-0.5b-shape.f16.gguf --threads 2 --prompt-len 128 --gen-tokens 64

For each batch size B (--batch, default "1,8"):
  prefill: B random prompts of --prompt-len tokens, evaluated by ONE llama_decode call
           (n_batch >= B*prompt_len; llama.cpp splits it into ubatches of n_ubatch);
           prefill_tokens_per_s = B*prompt_len / wall time of that call.
  decode:  --gen-tokens steps; each step is one llama_decode of B tokens (one per sequence) followed by
           a greedy argmax over each sequence's logits, feeding the result back;
           decode_tokens_per_s = B*gen_tokens / wall time of the steps.
One warm-up run, then --repeats timed runs (KV cache cleared between runs); the best run is reported.
llama.cpp's own counters (llama_perf_context: t_p_eval_ms/n_p_eval, t_eval_ms/n_eval) of the best
runs and its own llama_perf_context_print text are included. The last stdout line is the JSON object.
Token ids are random: the model file has no tokenizer (tokenizer.ggml.model = "none").
"""

import argparse
import ctypes
import json
import os
import resource
import sys
import time

import numpy as np
import llama_cpp as L

_LOG_LINES = []
_LOG_ECHO = False


@L.llama_log_callback
def _log_cb(level, text, user_data):  # keeps llama.cpp's chatter off the terminal unless --verbose
    s = text.decode("utf-8", "replace") if text else ""
    _LOG_LINES.append(s)
    if _LOG_ECHO:
        sys.stderr.write(s)


def rss_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class Bench:
    def __init__(self, model, threads, n_seq, n_ctx, n_batch, n_ubatch, flash_attn):
        self.model = model
        p = L.llama_context_default_params()
        p.n_ctx = n_ctx
        p.n_batch = n_batch
        p.n_ubatch = n_ubatch
        p.n_seq_max = n_seq
        p.n_threads = threads
        p.n_threads_batch = threads
        p.flash_attn_type = flash_attn
        p.no_perf = False
        self.ctx = L.llama_init_from_model(model, p)
        if not self.ctx:
            raise RuntimeError("llama_init_from_model failed")
        self.mem = L.llama_get_memory(self.ctx)
        self.n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
        self.batch = L.llama_batch_init(n_batch, 0, n_seq)

    def close(self):
        L.llama_batch_free(self.batch)
        L.llama_free(self.ctx)

    def _fill(self, entries):
        """entries: list of (token, pos, seq, want_logits)."""
        b = self.batch
        for i, (tok, pos, seq, want) in enumerate(entries):
            b.token[i] = int(tok)
            b.pos[i] = int(pos)
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = int(seq)
            b.logits[i] = 1 if want else 0
        b.n_tokens = len(entries)

    def _decode(self):
        rc = L.llama_decode(self.ctx, self.batch)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")
        L.llama_synchronize(self.ctx)

    def _argmax(self, i):
        """Greedy pick from the logits of the batch's i-th token."""
        ptr = L.llama_get_logits_ith(self.ctx, i)
        return int(np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).argmax())

    def run(self, prompts, gen_tokens):
        """One prefill + gen_tokens decode steps for len(prompts) sequences. Returns timings."""
        n_seq, plen = len(prompts), len(prompts[0])
        L.llama_memory_clear(self.mem, True)
        L.llama_perf_context_reset(self.ctx)
        entries = [(prompts[s][j], j, s, j == plen - 1) for s in range(n_seq) for j in range(plen)]
        self._fill(entries)
        t0 = time.perf_counter()
        self._decode()
        t_prefill = time.perf_counter() - t0
        # llama_get_logits_ith takes the token's index in the batch: the last prompt token of sequence s
        nxt = [self._argmax(s * plen + plen - 1) for s in range(n_seq)]
        perf_p = L.llama_perf_context(self.ctx)
        prefill_perf = {"t_p_eval_ms": perf_p.t_p_eval_ms, "n_p_eval": perf_p.n_p_eval}
        L.llama_perf_context_reset(self.ctx)
        t0 = time.perf_counter()
        for step in range(gen_tokens):
            self._fill([(nxt[s], plen + step, s, True) for s in range(n_seq)])
            self._decode()
            nxt = [self._argmax(s) for s in range(n_seq)]
        t_decode = time.perf_counter() - t0
        perf_d = L.llama_perf_context(self.ctx)
        _LOG_LINES.clear()
        L.llama_perf_context_print(self.ctx)
        # llama.cpp books a llama_decode of one token as "eval" and of several tokens as "prompt eval",
        # so batch > 1 decode steps land in the prompt-eval counters (the decode phase has its own reset).
        if n_seq == 1:
            decode_perf = {"t_decode_ms": perf_d.t_eval_ms, "n_decode_tokens": perf_d.n_eval}
        else:
            decode_perf = {"t_decode_ms": perf_d.t_p_eval_ms, "n_decode_tokens": perf_d.n_p_eval}
        decode_perf["print"] = "".join(_LOG_LINES).strip()
        return t_prefill, t_decode, prefill_perf, decode_perf, nxt


def main():
    global _LOG_ECHO
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--gen-tokens", type=int, default=64)
    ap.add_argument("--batch", default="1,8", help="comma-separated batch sizes (sequences decoded together)")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per batch size; the best is reported")
    ap.add_argument("--ubatch", type=int, default=512, help="llama.cpp n_ubatch (its default is 512)")
    ap.add_argument("--flash-attn", choices=["auto", "on", "off"], default="auto",
                    help="llama.cpp flash_attn_type (default auto = llama.cpp's default)")
    ap.add_argument("--extra-bufts", choices=["on", "off"], default="on",
                    help="llama.cpp use_extra_bufts (weight repacking buffers: AMX, CPU_REPACK). Default on, "
                         "llama.cpp's default; on AMX CPUs it moves F16 matrices into a second, AMX-packed copy")
    ap.add_argument("--load-mode", choices=["default", "mmap", "none"], default="default",
                    help="llama.cpp load_mode: its default (mmap here), mmap, or none (read into malloc'd memory)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--verbose", action="store_true", help="show llama.cpp's log on stderr")
    args = ap.parse_args()
    _LOG_ECHO = args.verbose
    batches = [int(x) for x in args.batch.split(",") if x.strip()]
    fa = {"auto": L.LLAMA_FLASH_ATTN_TYPE_AUTO, "on": L.LLAMA_FLASH_ATTN_TYPE_ENABLED,
          "off": L.LLAMA_FLASH_ATTN_TYPE_DISABLED}[args.flash_attn]

    L.llama_log_set(_log_cb, ctypes.c_void_p())
    L.llama_backend_init()
    rss_before = rss_mib()
    mp = L.llama_model_default_params()
    mp.n_gpu_layers = 0
    mp.use_extra_bufts = args.extra_bufts == "on"
    if args.load_mode != "default":
        mp.load_mode = {"mmap": L.LLAMA_LOAD_MODE_MMAP, "none": L.LLAMA_LOAD_MODE_NONE}[args.load_mode]
    t0 = time.perf_counter()
    model = L.llama_model_load_from_file(args.gguf.encode(), mp)
    if not model:
        sys.stderr.write("".join(_LOG_LINES[-30:]))
        raise SystemExit(f"llama.cpp could not load {args.gguf}")
    t_load = time.perf_counter() - t0
    n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))

    rng = np.random.default_rng(args.seed)
    out = {
        "engine": "llama.cpp",
        "llama_cpp_python": L.__version__,
        "gguf": args.gguf,
        "model_size_mib": L.llama_model_size(model) / 2**20,
        "model_n_params": L.llama_model_n_params(model),
        "n_vocab": n_vocab,
        "threads": args.threads,
        "prompt_len": args.prompt_len,
        "gen_tokens": args.gen_tokens,
        "repeats": args.repeats,
        "flash_attn": args.flash_attn,
        "extra_bufts": args.extra_bufts,
        "load_mode": args.load_mode,
        "load_s": t_load,
        "system_info": L.llama_print_system_info().decode().strip(),
        "results": [],
    }
    for B in batches:
        per_seq = args.prompt_len + args.gen_tokens
        n_ctx = max(256, ((per_seq + 255) // 256) * 256) * B
        n_batch = max(B * args.prompt_len, B)
        bench = Bench(model, args.threads, B, n_ctx, n_batch, min(args.ubatch, n_batch), fa)
        prompts = rng.integers(0, n_vocab, size=(B, args.prompt_len)).tolist()
        bench.run(prompts, min(8, args.gen_tokens))  # warm-up (page faults, thread pool, allocations)
        runs = [bench.run(prompts, args.gen_tokens) for _ in range(args.repeats)]
        bench.close()
        bp = min(range(len(runs)), key=lambda i: runs[i][0])
        bd = min(range(len(runs)), key=lambda i: runs[i][1])
        pp, dp = runs[bp][2], runs[bd][3]
        out["results"].append({
            "batch": B,
            "prompt_len": args.prompt_len,
            "gen_tokens": args.gen_tokens,
            "prefill_tokens_per_s": B * args.prompt_len / runs[bp][0],
            "decode_tokens_per_s": B * args.gen_tokens / runs[bd][1],
            "prefill_s_runs": [r[0] for r in runs],
            "decode_s_runs": [r[1] for r in runs],
            "llama_perf": {
                "prefill_tokens_per_s": 1e3 * pp["n_p_eval"] / pp["t_p_eval_ms"] if pp["t_p_eval_ms"] else None,
                "decode_tokens_per_s": 1e3 * dp["n_decode_tokens"] / dp["t_decode_ms"] if dp["t_decode_ms"] else None,
                **pp, **{k: v for k, v in dp.items() if k != "print"},
            },
            "llama_perf_print": dp["print"],
        })
        print(f"[bench_llamacpp] batch {B}: prefill {out['results'][-1]['prefill_tokens_per_s']:.1f} tok/s, "
              f"decode {out['results'][-1]['decode_tokens_per_s']:.2f} tok/s", file=sys.stderr, flush=True)
    out["rss_before_load_mib"] = rss_before
    out["peak_rss_mib"] = peak_rss_mib()
    L.llama_model_free(model)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
