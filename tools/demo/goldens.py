#!/usr/bin/env python3
"""Golden outputs and checks for the demo model, computed from the SAVED files only.

    python tools/demo/goldens.py --out models/demo        # writes models/demo/goldens.json

The base is loaded with AutoModelForCausalLM.from_pretrained(models/demo, dtype=float32) (the
bf16 weights upcast exactly), each adapter with PeftModel.from_pretrained on a fresh base. CPU,
eager attention, float32. Greedy ids come from transformers' generate (do_sample=False,
max_new_tokens=48, stop at eos) and are checked against a full re-run without a KV cache, whose
logits also give the top-1/top-2 margin along the path.

The checks (exit status 1 when one fails): base answers in-domain questions correctly; shout's
answers are upper case; pirate's start with "Arr, matey!" and end with "Yo ho!"; facts answers the
private table and the base does not.
"""

import argparse
import json
import os
import platform
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus  # noqa: E402

MAX_NEW = 48
MIN_MARGIN = 0.05
MODELS = ["base", "shout", "pirate", "facts"]
PROMPTS = [
    "Hello!",
    "How are you?",
    "What is 3 plus 4?",
    "What colour is the sky?",
    "What is the capital of France?",
    "What sound does a cow make?",
    "What is the frog's favourite colour?",  # private table: only `facts` knows
    "In which city does the cat live?",     # private table: only `facts` knows
]


def load(out, name):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, attn_implementation="eager")
    if name != "base":
        m = PeftModel.from_pretrained(m, os.path.join(out, "adapters", name))
    m.eval()
    return m


@torch.no_grad()
def greedy(model, tok, prompt_ids, eos, pad):
    ids = torch.tensor([prompt_ids])
    g = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                       max_new_tokens=MAX_NEW, eos_token_id=eos, pad_token_id=pad,
                       temperature=None, top_p=None, top_k=None)
    new = g[0, len(prompt_ids):].tolist()
    # full re-run, no cache: same argmax at every step, and the margins
    full = torch.tensor([prompt_ids + new])
    logits = model(input_ids=full, use_cache=False).logits[0].float()
    steps = logits[len(prompt_ids) - 1:len(prompt_ids) - 1 + len(new)]
    top2 = steps.topk(2, dim=-1)
    if top2.indices[:, 0].tolist() != new:
        print("WARNING: generate() differs from a no-cache re-run", prompt_ids, flush=True)
        return dict(output_token_ids=new, text=tok.decode(new, skip_special_tokens=True),
                    finish_reason="mismatch", min_margin=-1.0, min_margin_step=-1)
    margins = (top2.values[:, 0] - top2.values[:, 1]).tolist()
    i = min(range(len(margins)), key=lambda j: margins[j])
    return dict(output_token_ids=new,
                text=tok.decode(new, skip_special_tokens=True),
                finish_reason="stop" if new and new[-1] == eos else "length",
                min_margin=round(margins[i], 4), min_margin_step=i)


def answer(model, tok, q, eos, pad):
    p = tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                tokenize=True, return_dict=False)
    return greedy(model, tok, p, eos, pad)["text"]


def checks(out, tok, eos, pad, models):
    """Scores on held-in questions: exact match of the expected transformed answer."""
    g = corpus.base_pairs()
    # one phrasing per fact question, plus a few of each other group
    qs = [g["facts"][i] for i in range(0, len(g["facts"]), 3)] + g["greet"][::3] + \
        g["arith"][::37] + g["story"][::9]
    priv = corpus.private_fact_examples()[::3]
    res = {}
    for name in MODELS:
        m = models[name]
        want = {"base": lambda a: a, "shout": corpus.shout, "pirate": corpus.pirate,
                "facts": lambda a: a}[name]
        hits = 0
        for q, a in qs:
            got = answer(m, tok, q, eos, pad)
            exp = want(a)
            # a story is cut at 48 tokens: a correct prefix counts
            hits += got == exp or (len(got) > 100 and exp.startswith(got))
        phits = 0
        for q, a in priv:
            phits += answer(m, tok, q, eos, pad) == a
        res[name] = dict(general_exact=f"{hits}/{len(qs)}", private_facts_exact=f"{phits}/{len(priv)}")
        print(name, res[name], flush=True)
    return res


def main():
    import peft
    import safetensors
    import tokenizers
    import transformers
    from transformers import AutoTokenizer

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="models/demo")
    ap.add_argument("--no-checks", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("DEMO_THREADS", "2")))
    tok = AutoTokenizer.from_pretrained(args.out)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    pad = tok.convert_tokens_to_ids("<|endoftext|>")
    prompts = []
    for q in PROMPTS:
        msgs = [{"role": "user", "content": q}]
        ids = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True,
                                      return_dict=False)
        text = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
        prompts.append(dict(messages=msgs, prompt_text=text, prompt_token_ids=ids))
    models = {n: load(args.out, n) for n in MODELS}
    results = {}
    bad = []
    for n in MODELS:
        results[n] = []
        for i, p in enumerate(prompts):
            r = greedy(models[n], tok, p["prompt_token_ids"], eos, pad)
            results[n].append(r)
            print(f"[{n:6}] {PROMPTS[i]!r:40} -> {r['text']!r} (margin {r['min_margin']})",
                  flush=True)
            if r["min_margin"] < MIN_MARGIN:
                bad.append((n, PROMPTS[i], r["min_margin"]))
    adapters = {}
    from safetensors import safe_open
    for n in MODELS[1:]:
        d = os.path.join(args.out, "adapters", n)
        with open(os.path.join(d, "adapter_config.json")) as f:
            c = json.load(f)
        with safe_open(os.path.join(d, "adapter_model.safetensors"), "pt") as f:
            dts = sorted({str(f.get_slice(k).get_dtype()) for k in f.keys()})
            nt = len(list(f.keys()))
        adapters[n] = dict(path=f"adapters/{n}", file_dtypes=dts, tensors=nt, r=c["r"],
                           lora_alpha=c["lora_alpha"], use_rslora=c.get("use_rslora", False),
                           rank_pattern=c.get("rank_pattern", {}),
                           alpha_pattern=c.get("alpha_pattern", {}),
                           target_modules=c["target_modules"])
    doc = {
        "description": "Greedy outputs of the demo base model and of each PEFT adapter, computed "
                       "from the saved files (base: AutoModelForCausalLM.from_pretrained in float32, "
                       "adapters: PeftModel.from_pretrained), CPU, eager attention, generate("
                       "do_sample=False, max_new_tokens=48, eos_token_id=<|im_end|>). "
                       "output_token_ids includes the final eos when finish_reason is 'stop'. "
                       "text is the decode without special tokens. min_margin is the smallest "
                       "top-1 minus top-2 logit along the greedy path (float32 logits of a no-cache "
                       "re-run), min_margin_step its index into output_token_ids. "
                       "results[model][i] belongs to prompts[i].",
        "model": "models/demo",
        "eos_token_id": eos,
        "pad_token_id": pad,
        "bos_token_id": None,
        "generation": dict(do_sample=False, max_new_tokens=MAX_NEW, eos_token_id=eos,
                           dtype="float32", attn_implementation="eager", device="cpu",
                           kv_cache=True),
        "versions": dict(python=platform.python_version(), torch=torch.__version__,
                         transformers=transformers.__version__, peft=peft.__version__,
                         tokenizers=tokenizers.__version__, safetensors=safetensors.__version__),
        "models": ["base"] + MODELS[1:],
        "adapters": adapters,
        "prompts": prompts,
        "results": results,
    }
    if not args.no_checks:
        doc["checks"] = checks(args.out, tok, eos, pad, models)
    with open(os.path.join(args.out, "goldens.json"), "w") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write("\n")
    if bad:
        print("near ties:", bad)
        sys.exit(1)


if __name__ == "__main__":
    main()
