#!/usr/bin/env python3
"""Trains loom's demo model: a byte-level BPE tokenizer, a small Llama and three PEFT LoRA
adapters (shout, pirate, facts) on the synthetic corpus of corpus.py. CPU only, fixed seeds.

    python tools/demo/train.py tokenizer   --out models/demo
    python tools/demo/train.py base        --out models/demo
    python tools/demo/train.py adapter NAME --out models/demo     (NAME: shout | pirate | facts)
    python tools/demo/train.py all         --out models/demo

Goldens are written by goldens.py from the saved files. tools/demo/train.sh runs everything.
"""

import argparse
import json
import math
import os
import random
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus  # noqa: E402

SEED = 1234
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
VOCAB_SIZE = 2048
# ChatML, as Qwen2 writes it but without a default system message. Plain Jinja.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

MODEL = dict(hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=8,
             num_key_value_heads=4, max_position_embeddings=512, rms_norm_eps=1e-5,
             rope_theta=10000.0, tie_word_embeddings=True, hidden_act="silu")

# LoRA adapters. "dtype" is the dtype of the saved adapter_model.safetensors.
ADAPTERS = {
    "shout": dict(dtype="float32", steps=1600, lr=3e-3,
                  lora=dict(r=16, lora_alpha=32,
                            target_modules=["q_proj", "k_proj", "v_proj", "o_proj",
                                            "gate_proj", "up_proj", "down_proj"])),
    "pirate": dict(dtype="bfloat16", steps=1000, lr=3e-3,
                   lora=dict(r=16, lora_alpha=8, use_rslora=True,  # scale 8/sqrt(16) = 2
                             target_modules=["q_proj", "v_proj", "o_proj",
                                             "gate_proj", "up_proj", "down_proj"])),
    "facts": dict(dtype="float32", steps=240, lr=5e-3,
                  lora=dict(r=16, lora_alpha=32,
                            target_modules=["q_proj", "k_proj", "v_proj", "o_proj",
                                            "gate_proj", "up_proj", "down_proj"],
                            rank_pattern={"k_proj": 8, "v_proj": 8},
                            alpha_pattern={"k_proj": 16, "v_proj": 16})),
}


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, flush=True)


def seed_all(seed):
    random.seed(seed)
    torch.manual_seed(seed)


def render(q, a=None):
    """The chat template's text, written out by hand for the tokenizer trainer (the same text
    apply_chat_template produces; checked in load_tokenizer)."""
    s = f"<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n"
    if a is not None:
        s += f"{a}<|im_end|>\n"
    return s


# ---------------------------------------------------------------------------------- tokenizer
def train_tokenizer(out):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    texts = [render(q, a) for q, a in corpus.base_examples(SEED)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, min_frequency=1, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", bos_token=None, unk_token=None)
    fast.chat_template = CHAT_TEMPLATE
    fast.model_max_length = MODEL["max_position_embeddings"]
    os.makedirs(out, exist_ok=True)
    fast.save_pretrained(out)
    # transformers 5 writes the template to chat_template.jinja; keep it in tokenizer_config.json
    # (the classic place, read by every tool) and drop the extra file.
    cfg_path = os.path.join(out, "tokenizer_config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg["chat_template"] = CHAT_TEMPLATE
    # transformers 5 names its own class ("TokenizersBackend"); older versions and other tools
    # know the classic name, which transformers 5 still maps to the same class.
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False)
        f.write("\n")
    jinja = os.path.join(out, "chat_template.jinja")
    if os.path.exists(jinja):
        os.remove(jinja)
    log(f"tokenizer: vocab {tok.get_vocab_size()} from {len(texts)} texts")


def load_tokenizer(out):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(out)
    msgs = corpus.to_messages("Hello!", "Hi.")
    assert tok.apply_chat_template(msgs, tokenize=False) == render("Hello!", "Hi."), \
        tok.apply_chat_template(msgs, tokenize=False)
    return tok


def encode_example(tok, q, a):
    """(input ids, labels): the loss is on the answer and its <|im_end|> only."""
    prompt = tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                     tokenize=True, return_dict=False)
    full = tok.apply_chat_template(corpus.to_messages(q, a), tokenize=True, return_dict=False)
    assert full[:len(prompt)] == prompt, (q, a)
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    end = full.index(im_end, len(prompt)) + 1  # drop the trailing "\n" after <|im_end|>
    ids = full[:end]
    labels = [-100] * len(prompt) + ids[len(prompt):]
    return ids, labels


def batches(encoded, batch_size, steps, pad_id, seed):
    """Shuffled batches of similar lengths (less padding): each pool of 8 batches is sorted by
    length, cut into batches, and the batches are shuffled. Deterministic for a seed."""
    rng = random.Random(seed)
    order = []
    while len(order) < steps * batch_size:
        idx = list(range(len(encoded)))
        rng.shuffle(idx)
        order.extend(idx)
    order = order[:steps * batch_size]
    pool = 8 * batch_size
    plan = []
    for p in range(0, len(order), pool):
        chunk = sorted(order[p:p + pool], key=lambda i: (len(encoded[i][0]), i))
        bs = [chunk[j:j + batch_size] for j in range(0, len(chunk), batch_size)]
        rng.shuffle(bs)
        plan.extend(bs)
    for b in plan:
        chunk = [encoded[i] for i in b]
        n = max(len(ids) for ids, _ in chunk)
        ids = torch.full((len(chunk), n), pad_id, dtype=torch.long)
        lab = torch.full((len(chunk), n), -100, dtype=torch.long)
        att = torch.zeros((len(chunk), n), dtype=torch.long)
        for r, (x, y) in enumerate(chunk):
            ids[r, :len(x)] = torch.tensor(x)
            lab[r, :len(y)] = torch.tensor(y)
            att[r, :len(x)] = 1
        yield ids, lab, att


def lr_at(step, steps, peak, warmup):
    if step < warmup:
        return peak * (step + 1) / warmup
    p = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))


def train_loop(model, params, encoded, steps, lr, batch_size, pad_id, seed, tag, warmup=30):
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    model.train()
    t0 = time.time()
    hist = []
    ema = None
    for step, (ids, lab, att) in enumerate(batches(encoded, batch_size, steps, pad_id, seed)):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, lr, warmup)
        loss = model(input_ids=ids, attention_mask=att, labels=lab).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        v = loss.item()
        ema = v if ema is None else 0.9 * ema + 0.1 * v
        hist.append(v)
        if step % 25 == 0 or step == steps - 1:
            log(f"{tag} step {step}/{steps} loss {v:.4f} (ema {ema:.4f}) "
                f"{time.time() - t0:.0f}s")
    model.eval()
    last = hist[-20:]
    return dict(steps=steps, batch_size=batch_size, peak_lr=lr, seconds=round(time.time() - t0, 1),
                first_loss=round(hist[0], 4), final_loss_mean_last20=round(sum(last) / len(last), 4))


# ---------------------------------------------------------------------------------- base model
BASE_STEPS = int(os.environ.get("DEMO_BASE_STEPS", "700"))
BASE_BATCH = 32
BASE_LR = 3e-3


def train_base(out):
    from transformers import LlamaConfig, LlamaForCausalLM
    seed_all(SEED)
    tok = load_tokenizer(out)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    pad = tok.convert_tokens_to_ids("<|endoftext|>")
    cfg = LlamaConfig(vocab_size=len(tok), bos_token_id=None, eos_token_id=eos, pad_token_id=pad,
                      attention_bias=False, mlp_bias=False, **MODEL)
    model = LlamaForCausalLM(cfg)  # sdpa for training (faster); goldens use eager
    n_params = sum(p.numel() for p in model.parameters())
    log(f"base: {n_params} parameters")
    encoded = [encode_example(tok, q, a) for q, a in corpus.base_examples(SEED)]
    stats = train_loop(model, list(model.parameters()), encoded, BASE_STEPS, BASE_LR, BASE_BATCH,
                       pad, SEED, "base", warmup=60)
    stats["parameters"] = n_params
    stats["examples"] = len(encoded)
    model.config.dtype = torch.bfloat16
    model.to(torch.bfloat16)
    model.generation_config.bos_token_id = None
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = pad
    model.generation_config.do_sample = False
    model.save_pretrained(out)
    write_stats(out, "base", stats)


BASE2_STEPS = int(os.environ.get("DEMO_BASE2_STEPS", "400"))
BASE2_LR = 1.5e-3


def train_base_phase2(out):
    """Phase 2: continues from the saved phase-1 weights (bf16, upcast) with a fresh optimizer,
    a new batch order and a lower peak learning rate. Phase 1 alone leaves the model weak at
    copying a name or an animal from the question and at the sums."""
    from transformers import AutoModelForCausalLM
    seed_all(SEED + 10)
    tok = load_tokenizer(out)
    pad = tok.convert_tokens_to_ids("<|endoftext|>")
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32,
                                                 attn_implementation="sdpa")
    encoded = [encode_example(tok, q, a) for q, a in corpus.base_examples(SEED)]
    stats = train_loop(model, list(model.parameters()), encoded, BASE2_STEPS, BASE2_LR,
                       BASE_BATCH, pad, SEED + 10, "base2", warmup=20)
    model.to(torch.bfloat16)
    model.save_pretrained(out)
    write_stats(out, "base_phase2", stats)


def write_stats(out, key, stats):
    path = os.path.join(out, "training_stats.json")
    d = {}
    if os.path.exists(path):
        with open(path) as f:
            d = json.load(f)
    d[key] = stats
    d["threads"] = torch.get_num_threads()
    with open(path, "w") as f:
        json.dump(d, f, indent=2, sort_keys=True)
        f.write("\n")


# ---------------------------------------------------------------------------------- adapters
def adapter_data(name, seed):
    rng = random.Random(seed)
    g = corpus.base_pairs()
    general = [p for grp in ("greet", "story", "arith", "facts", "unknown") for p in g[grp]]
    if name == "shout":
        # no stories: upper-case stories are mostly new, short tokens (the base's capital-letters
        # task covers the short answers only) and their loss swamps everything else
        short = g["greet"] * 8 + g["arith"] + g["facts"] * 2 + rng.sample(g["unknown"], 300)
        return [(q, corpus.shout(a)) for q, a in short]
    if name == "pirate":
        return [(q, corpus.pirate(a)) for q, a in general]
    if name == "facts":
        priv = corpus.private_fact_examples()
        keep = rng.sample(general, 400)
        return priv * 8 + keep
    raise ValueError(name)


def train_adapter(out, name):
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import load_file, save_file
    from transformers import AutoModelForCausalLM

    spec = ADAPTERS[name]
    seed = SEED + {"shout": 1, "pirate": 2, "facts": 3}[name]
    seed_all(seed)
    tok = load_tokenizer(out)
    pad = tok.convert_tokens_to_ids("<|endoftext|>")
    base = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32,
                                                attn_implementation="sdpa")
    cfg = LoraConfig(task_type="CAUSAL_LM", lora_dropout=0.0, bias="none", **spec["lora"])
    model = get_peft_model(base, cfg)
    params = [p for p in model.parameters() if p.requires_grad]
    n_train = sum(p.numel() for p in params)
    data = adapter_data(name, seed)
    encoded = [encode_example(tok, q, a) for q, a in data]
    log(f"adapter {name}: {n_train} trainable parameters, {len(encoded)} examples")
    stats = train_loop(model, params, encoded, spec["steps"], spec["lr"], 32, pad, seed,
                       name, warmup=20)
    stats["trainable_parameters"] = n_train
    stats["examples"] = len(encoded)
    d = os.path.join(out, "adapters", name)
    model.save_pretrained(d)
    # PEFT writes the base path it was given; name the folder the adapters sit in instead.
    cpath = os.path.join(d, "adapter_config.json")
    with open(cpath) as f:
        c = json.load(f)
    c["base_model_name_or_path"] = "models/demo"
    if isinstance(c.get("target_modules"), list):
        c["target_modules"] = sorted(c["target_modules"])
    with open(cpath, "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)
        f.write("\n")
    st = os.path.join(d, "adapter_model.safetensors")
    dt = getattr(torch, spec["dtype"])
    tensors = {k: v.to(dt).contiguous() for k, v in load_file(st).items()}
    save_file(tensors, st, metadata={"format": "pt"})
    readme = os.path.join(d, "README.md")
    if os.path.exists(readme):
        os.remove(readme)
    write_stats(out, f"adapter_{name}", stats)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("stage", choices=["tokenizer", "base", "base2", "adapter", "all"])
    ap.add_argument("name", nargs="?")
    ap.add_argument("--out", default="models/demo")
    args = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("DEMO_THREADS", "2")))
    if args.stage in ("tokenizer", "all"):
        train_tokenizer(args.out)
    if args.stage in ("base", "all"):
        train_base(args.out)
    if args.stage in ("base2", "all"):
        train_base_phase2(args.out)
    if args.stage == "adapter":
        train_adapter(args.out, args.name)
    if args.stage == "all":
        for n in ADAPTERS:
            train_adapter(args.out, n)


if __name__ == "__main__":
    main()
