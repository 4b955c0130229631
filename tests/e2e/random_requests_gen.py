"""Random but plausible OpenAI requests for test_random_requests.py: prompts, chat messages and
every sampling, stop, log-prob, echo and template field of docs/API.md, seeded (gen_request), and
now and then one invalid value with the field its 400 must name (invalidate)."""
import json
import random

from conftest import ADAPTERS, BASE, EOS, MAX_MODEL_LEN


MODELS = [BASE, BASE, None] + list(ADAPTERS)
WORDS = ["the", "quick", "brown", "fox", "Hello", "world", "Once", "upon", "a", "time", "0123456789",
         "abc", "zz", "e", "U", "6", "#", "é", "日本語", "🙂", "naïve", "\n", "\t", "data:", "[DONE]",
         '"q"', "{}", "\\", "<|user|>", "x" * 20]
# Stop strings: single characters that the tiny model's (byte-noise) output often holds,
# multi-character ones seen in its output, U+FFFD (an invalid byte's text), and rarer ones.
STOP_POOL = ["e", "6", "U", "#", " ", "\n", "0", "02", "_-", "w\\", "0\x01y", "\ufffd", "#\ufffde",
             "the", "zz", "é", "Hello", "\x02"]
BAD_WORD_POOL = ["e", "6", "U", "ab", "02", "xyz", "#"]


# ---- request generation ---------------------------------------------------------------------------

def rand_text(rng, lo, hi):
    """Text of lo..hi UTF-8 bytes (at least 1) from WORDS."""
    target = rng.randint(lo, hi)
    out = ""
    for _ in range(10_000):
        w = rng.choice(WORDS)
        piece = (" " if out and rng.random() < 0.7 else "") + w
        if len((out + piece).encode()) > hi:
            if len(out.encode()) >= max(lo, 1):
                break
            continue
        out += piece
        if len(out.encode()) >= target:
            break
    return out or "x"


def rand_ids(rng, lo, hi):
    return [rng.randrange(256) for _ in range(rng.randint(lo, hi))]


def render_chat(messages, add_generation_prompt, continue_final):
    """tiny_model's chat template (conftest's llama_dir), with transformers' continue_final_message
    cut; None when the request's rendering is not certain here (null content)."""
    out = ""
    for m in messages:
        c = m["content"]
        if c is None:
            return None
        if isinstance(c, list):
            c = "\n".join(p["text"] for p in c)
        out += f"<|{m['role']}|>{c}\n"
    if continue_final:
        final = messages[-1]["content"]
        if isinstance(final, list):
            final = "\n".join(p["text"] for p in final)
        # Only generated with content that has no outer whitespace: the cut drops the "\n".
        return out[:out.rindex(final) + len(final)]
    if add_generation_prompt:
        out += "<|assistant|>"
    return out


class Req:
    """One generated request: its route and body, whether it must succeed (else the params one of
    which its 400 must name), and what the checks need to know about it."""

    def __init__(self, i, path, body):
        self.i = i
        self.path = path
        self.body = body
        self.chat = path.endswith("chat/completions")
        self.stream = bool(body.get("stream"))
        self.invalid = None  # set of acceptable error params when the request must be a 400
        self.may_be_invalid = None  # params of a 400 that is fine (the prompt length unknown)
        self.prompts = None  # the prompts' token ids (each a list), None when unknown
        self.max_tokens = None  # effective max_tokens (None when unknown)
        self.echo_text = None  # chat echo: the content that leads each choice
        self.request_id = None  # X-Request-Id sent: the response id must carry it
        self.abandon = None  # a stream closed by the client after this many bytes

    def describe(self):
        s = json.dumps(self.body, ensure_ascii=True)
        if len(s) > 1200:
            s = s[:1200] + "..."
        header = f" X-Request-Id: {self.request_id}" if self.request_id else ""
        return f"request #{self.i} POST {self.path}{header} {s}"


def gen_request(rng, i):
    chat = rng.random() < 0.5
    body = {}
    model = rng.choice(MODELS)
    if model is not None:
        body["model"] = model
    stream = rng.random() < 0.4
    if stream:
        body["stream"] = True
        if rng.random() < 0.6:
            body["stream_options"] = {"include_usage": rng.random() < 0.8}
            if rng.random() < 0.15:
                del body["stream_options"]["include_usage"]  # false by default
            if rng.random() < 0.3:
                body["stream_options"]["continuous_usage_stats"] = True
    if rng.random() < 0.75:
        body["return_token_ids"] = True

    # The prompt.
    long_prompt = rng.random() < 0.12
    lo, hi = (250, 500) if long_prompt else (1, 60)
    prompts, messages = None, None
    add_gen, cont = True, False
    if not chat:
        kind = rng.random()
        if kind < 0.5:
            t = rand_text(rng, lo, hi)
            body["prompt"] = t
            prompts = [list(t.encode())]
        elif kind < 0.75:
            ids = rand_ids(rng, lo, hi)
            body["prompt"] = ids
            prompts = [ids]
        elif kind < 0.9:
            count = rng.randint(2, 4) if rng.random() < 0.9 else rng.randint(5, 20)
            ts = [rand_text(rng, 1, 40 if not long_prompt else hi) for _ in range(count)]
            body["prompt"] = ts
            prompts = [list(t.encode()) for t in ts]
        else:
            ps = [rand_ids(rng, 1, 40) for _ in range(rng.randint(2, 4))]
            body["prompt"] = ps
            prompts = ps
    else:
        messages = []
        if rng.random() < 0.4:
            messages.append({"role": "system", "content": rand_text(rng, 1, 30)})
        turns = rng.randint(1, 4)
        role = "user"
        for _ in range(turns):
            messages.append({"role": role, "content": rand_text(rng, lo // turns, hi // turns)})
            role = "assistant" if role == "user" else "user"
        r = rng.random()
        if r < 0.15:
            # Continue a final assistant message: content without outer whitespace.
            final = rand_text(rng, 1, 20).strip() or "Sure"
            messages.append({"role": "assistant", "content": final})
            cont, add_gen = True, False
            body["continue_final_message"] = True
            body["add_generation_prompt"] = False
        elif r < 0.25:
            add_gen = False
            body["add_generation_prompt"] = False
        elif r < 0.3:
            body["add_generation_prompt"] = True
        if rng.random() < 0.1:  # text parts
            m = rng.choice(messages)
            if not (cont and m is messages[-1]):
                m["content"] = [{"type": "text", "text": m["content"]},
                                {"type": "text", "text": rand_text(rng, 1, 10)}]
        if rng.random() < 0.03:
            m = rng.choice(messages[:-1] or messages)
            if not (cont and m is messages[-1]):
                m["content"] = None
        body["messages"] = messages
        rendered = render_chat(messages, add_gen, cont)
        prompts = None if rendered is None else [list(rendered.encode())]
        if rng.random() < 0.1:
            body["echo"] = True

    req = Req(i, "/v1/chat/completions" if chat else "/v1/completions", body)
    if rng.random() < 0.15:
        # From a small pool: requests sharing an id run at the same time, and must not mix.
        req.request_id = rng.choice(["rr-a", "rr-b", "rr-c", f"rr-{i}"])
    if stream and rng.random() < 0.05:
        req.abandon = rng.choice([1, 200, 2000])
    # vLLM's cache_salt (from a small pool: salted prompts share blocks only with their own salt)
    # and priority (no effect): neither changes an answer.
    if rng.random() < 0.15:
        body["cache_salt"] = rng.choice(["tenant-a", "tenant-b", f"t{i}"])
    if rng.random() < 0.05:
        body["priority"] = rng.choice([0, 1, -5, 2**40])
    req.prompts = prompts
    plen = max(len(p) for p in prompts) if prompts else None

    # truncate_prompt_tokens: rarely; keeps each prompt's last k tokens.
    if prompts and rng.random() < 0.05:
        k = rng.randint(1, max(1, min(plen, MAX_MODEL_LEN)))  # above the context: a 400
        body["truncate_prompt_tokens"] = k
        req.prompts = [p[-k:] for p in prompts]
        plen = max(len(p) for p in req.prompts)

    # max_tokens.
    mt_key = "max_tokens"
    if chat and rng.random() < 0.3:
        mt_key = "max_completion_tokens"
    r = rng.random()
    max_tokens = None
    if r < 0.08:
        pass  # the default (completions 16; chat the rest of the context)
    elif r < 0.25 and plen is not None:
        max_tokens = max(1, MAX_MODEL_LEN - plen + rng.choice([-3, -1, 0, 0, 1, 2]))
    else:
        max_tokens = rng.choice([1, 1, 2, 3, 5, 8, 16, 16, 32, 64, 100, 200, 300])
        if rng.random() < 0.03:
            # The whole context (capped at the room left), or over it (a 400).
            max_tokens = rng.choice([MAX_MODEL_LEN, MAX_MODEL_LEN + 1, 100_000, 2**24])
    if max_tokens is not None:
        body[mt_key] = max_tokens
        if chat and mt_key == "max_completion_tokens" and rng.random() < 0.3:
            body["max_tokens"] = rng.choice([1, 7, 1000])  # max_completion_tokens wins
    if max_tokens is None:
        req.max_tokens = 16 if not chat else (None if plen is None else MAX_MODEL_LEN - plen)
    else:
        req.max_tokens = max_tokens

    # n.
    n = rng.choice([1, 1, 1, 2, 3, 4]) if rng.random() < 0.97 else rng.randint(5, 16)
    if n != 1 or rng.random() < 0.2:
        body["n"] = n
    if not chat and rng.random() < 0.05:
        body["best_of"] = n  # no effect when equal to n

    # Sampling. Greedy (a temperature below 1e-5) takes n = 1 only, as vLLM 0.32: several
    # choices of a greedy request are mostly sampled instead, now and then sent to be refused.
    temp = rng.choice([0, 0, 0.7, 1.5, None, -1, 1e-6])
    greedy_n = n > 1 and temp is not None and temp < 1e-5
    if greedy_n and rng.random() < 0.85:
        temp, greedy_n = rng.choice([0.7, 1.5, None]), False
    if temp is not None:
        body["temperature"] = temp
    if rng.random() < 0.3:
        body["top_p"] = rng.choice([0.1, 0.5, 0.9, 1.0, 1])
    if rng.random() < 0.3:
        body["top_k"] = rng.choice([-1, 0, 1, 2, 40, 256, 1000])
    if rng.random() < 0.2:
        # min_p 1.0 at a temperature other than 1 was a 500 ("no candidate token left": the
        # top probability rounded below the floor); found by this test, sampler_test pins it.
        body["min_p"] = rng.choice([0, 0.0, 0.05, 0.3, 1.0])
    if rng.random() < 0.4:
        body["seed"] = rng.choice([0, 1, 42, -7, 2**31, 2**63 - 1, -(2**63), rng.randrange(10**9)])
    if rng.random() < 0.2:
        body["presence_penalty"] = rng.choice([-2, -0.5, 0, 0.5, 2])
    if rng.random() < 0.2:
        body["frequency_penalty"] = rng.choice([-2, -1.0, 0, 1.2, 2.0])
    if rng.random() < 0.2:
        body["repetition_penalty"] = rng.choice([0.5, 1, 1.1, 2.0, 10])

    # Stop strings and tokens.
    if rng.random() < 0.35:
        r = rng.random()
        if r < 0.3:
            body["stop"] = rng.choice(STOP_POOL)
        elif r < 0.9:
            body["stop"] = rng.sample(STOP_POOL, rng.randint(1, 3))
        else:
            body["stop"] = []
    if "stop" in body and rng.random() < 0.05:  # at the documented limits: 16, 256 bytes
        body["stop"] = rng.sample(STOP_POOL, 15) + ["é" * 128]
    if rng.random() < 0.2:
        body["stop_token_ids"] = rng.choice([[], [EOS], [rng.randrange(256)],
                                             rng.sample(range(256), 3), list(range(40, 60)),
                                             [rng.randrange(256) for _ in range(256)]])
    if rng.random() < 0.3:
        body["include_stop_str_in_output"] = rng.random() < 0.5
    if rng.random() < 0.4:
        body["ignore_eos"] = rng.random() < 0.7
    if max_tokens is not None and rng.random() < 0.2:
        body["min_tokens"] = rng.choice([0, 1, min(3, max_tokens), max_tokens])

    # Constraints (rare): bad words, allowed tokens, logit bias.
    r = rng.random()
    if r < 0.06:
        body["bad_words"] = rng.sample(BAD_WORD_POOL, rng.randint(1, 2))
    elif r < 0.12:
        stops = set(body.get("stop_token_ids", [])) | {EOS}
        allowed = [t for t in rng.sample(range(256), rng.randint(1, 20)) if t not in stops]
        body["allowed_token_ids"] = allowed or [65]
    elif r < 0.16:
        # Few allowed tokens, drawn among EOS, the stop ids and the bad words' bytes: the
        # constraints may leave nothing to draw (docs/API.md: a 400 at the first step, else
        # the choice ends with "stop").
        if rng.random() < 0.6:
            body["bad_words"] = rng.sample(BAD_WORD_POOL, rng.randint(1, 2))
        pool = [EOS, 65, ord("e"), ord("6"), ord("U"), ord("a"), ord("b")] + \
            list(body.get("stop_token_ids", []))[:3]
        body["allowed_token_ids"] = rng.sample(pool, rng.randint(1, 3))
    if rng.random() < 0.06:
        body["logit_bias"] = {str(rng.randrange(256)): rng.choice([-100, -5, 5, 100, 150])}

    # Log-probs and echo.
    if not chat:
        if rng.random() < 0.35:
            body["logprobs"] = rng.choice([0, 1, 2, 3, 5, 20])
        if rng.random() < 0.15:
            body["echo"] = True
            if rng.random() < 0.2 and max_tokens is not None:
                body[mt_key] = req.max_tokens = max_tokens = 0
                body.pop("min_tokens", None)
    else:
        r = rng.random()
        if r < 0.3:
            body["logprobs"] = True
            if rng.random() < 0.8:
                body["top_logprobs"] = rng.choice([0, 1, 2, 3, 5, 20])
        elif r < 0.35:
            body["logprobs"] = False
    if not stream and rng.random() < 0.05:
        body["prompt_logprobs"] = rng.randint(0, 3)
    if rng.random() < 0.1:
        body["skip_special_tokens"] = rng.random() < 0.5
    if rng.random() < 0.1:
        body["spaces_between_special_tokens"] = rng.random() < 0.5

    # Chat echo: the last message's content leads each choice when its role is the answer's.
    if chat and body.get("echo") and messages[-1]["content"] is not None:
        if not add_gen or messages[-1]["role"] == "assistant":
            c = messages[-1]["content"]
            req.echo_text = c if isinstance(c, str) else "\n".join(p["text"] for p in c)

    # allowed_token_ids all barred at the first step: by min_tokens (EOS and stop_token_ids,
    # even with ignore_eos) or as one-token bad words.
    if "allowed_token_ids" in body:
        barred = {w.strip().encode()[0] for w in body.get("bad_words", [])
                  if len(w.strip().encode()) == 1}
        if body.get("min_tokens"):
            barred |= {EOS} | set(body.get("stop_token_ids", []))
        if set(body["allowed_token_ids"]) <= barred:
            req.invalid = {"allowed_token_ids"}
    # What must be refused (vLLM 0.32): a prompt that fills the context, a max_tokens above the
    # whole context (a completion's default 16 counts, chat has none), and min_tokens above the
    # max_tokens that runs. A max_tokens over the room a prompt leaves is not refused: it is
    # capped there (each prompt its own), and the choice ends with "length" at the context's end.
    asked = max_tokens if max_tokens is not None else (None if chat else 16)
    min_tokens = body.get("min_tokens") or 0
    refused = set()
    if greedy_n:
        refused.add("n")
    if plen is not None and plen >= MAX_MODEL_LEN:
        refused.add("messages" if chat else "prompt")
    if asked is not None and asked > MAX_MODEL_LEN:
        refused.add(mt_key)
    if not refused and plen is not None and min_tokens > min(asked or MAX_MODEL_LEN,
                                                             MAX_MODEL_LEN - plen):
        refused.add("min_tokens")
    if refused:
        req.invalid = refused | (req.invalid or set())
    elif plen is None:  # null content: the rendered length is not computed here
        req.may_be_invalid = {"messages"} | ({"min_tokens"} if min_tokens else set())
    # Now and then one deliberately invalid value.
    if rng.random() < 0.1:
        invalidate(rng, req)
    return req


def invalidate(rng, req):
    body, chat = req.body, req.chat
    mt_key = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
    cases = [
        (mt_key, -1), (mt_key, "16"), (mt_key, 2.5), ("n", 0), ("n", 17), ("n", "2"),
        ("temperature", 101), ("temperature", "hot"), ("top_p", 0), ("top_p", 1.5),
        ("top_k", -2), ("min_p", 1.5), ("min_p", -0.1), ("presence_penalty", 2.5),
        ("frequency_penalty", -3), ("repetition_penalty", 0), ("repetition_penalty", 11),
        ("seed", "x"), ("stop", 5), ("stop", [""]), ("stop_token_ids", [256]),
        ("stop_token_ids", [-1]), ("ignore_eos", "yes"), ("include_stop_str_in_output", 1),
        ("unknown_field_xyz", 1), ("min_tokens", -1), ("stream", "true"),
        ("skip_special_tokens", "no"), ("logit_bias", {"999": 1}), ("model", 7),
        ("bad_words", [""]), ("allowed_token_ids", []),
    ]
    if chat:
        cases += [("top_logprobs", 21), ("logprobs", "yes"), ("messages", []),
                  ("messages", [{"role": "user"}, 5]), ("echo", "yes"),
                  ("top_logprobs", 2), ("continue_final_message", True)]
    else:
        cases += [("logprobs", 21), ("logprobs", -1), ("prompt", []), ("prompt", [[]]),
                  ("prompt", [300]), ("prompt", "x" * (MAX_MODEL_LEN + 10)), ("echo", "yes"),
                  ("suffix", "s"), ("best_of", 3)]
    if req.max_tokens is not None and req.max_tokens >= 1 and mt_key in body:
        cases.append(("min_tokens", req.max_tokens + 1))
    if not req.stream:
        cases.append(("stream_options", {"include_usage": True}))
    else:
        cases.append(("prompt_logprobs", 2))  # a stream carries no prompt log-probs
    field, value = rng.choice(cases)
    if field == "best_of" and body.get("n", 1) == 3:
        value = 4
    body[field] = value
    params = {field}
    if field == "prompt" and isinstance(value, str):  # too long, unless truncated
        body.pop("truncate_prompt_tokens", None)
    if field == "stream_options":
        body.pop("stream", None)
    if field == "stream":
        params.add("stream_options")
    if field == "top_logprobs" and value == 2:  # top_logprobs needs logprobs: true
        body.pop("logprobs", None)
        params.add("logprobs")
    if field == "continue_final_message":  # it excludes add_generation_prompt
        body["add_generation_prompt"] = True
        params.add("add_generation_prompt")
    if field in ("stop", "stop_token_ids", "min_tokens", "bad_words", "allowed_token_ids"):
        params |= {"min_tokens", "bad_words", "allowed_token_ids"}
    req.invalid = params if req.invalid is None else (req.invalid | params)


# ---- sending ------------------------------------------------------------------------------------
