"""What test_random_requests.py checks on each answer: the reply normalized (full or streamed)
into choices, every invariant of a 200 (choices, finish and stop reasons, usage, lengths, stop
strings and tokens, log-probs, text = decoded ids), OpenAI error objects for a 4xx, and what a
replay must reproduce bit for bit."""
import json
import math
import threading
from collections import Counter

from conftest import BASE, EOS, MAX_MODEL_LEN
from random_requests_gen import Req


class Failures:
    def __init__(self):
        self.items = []
        self.lock = threading.Lock()

    def add(self, req, what, detail=""):
        with self.lock:
            self.items.append(f"{what}\n  {req.describe()}\n  {detail}"[:4000])



# ---- normalizing the answers --------------------------------------------------------------------

def new_choice():
    return {"text": "", "token_ids": None, "prompt_token_ids": None, "finish_reason": None,
            "stop_reason": None, "finishes": 0, "roles": [], "logprobs": None,
            "prompt_logprobs": None, "after_finish": False}


def normalize_full(req, body, fail):
    """A non-streamed 200 body → {index: choice} and usage (None where malformed)."""
    prefix, obj = ("chatcmpl-", "chat.completion") if req.chat else ("cmpl-", "text_completion")
    if body.get("object") != obj or not str(body.get("id", "")).startswith(prefix):
        fail("wrong object/id", f"{body.get('object')!r} {body.get('id')!r}")
    if req.request_id and body.get("id") != prefix + req.request_id:
        fail(f"id {body.get('id')!r} does not follow X-Request-Id {req.request_id!r}")
    if body.get("model") != req.body.get("model", BASE):
        fail("wrong model", repr(body.get("model")))
    choices = {}
    if not isinstance(body.get("choices"), list):
        fail("no choices list", json.dumps(body)[:500])
        return None, None
    for c in body["choices"]:
        idx = c.get("index")
        if idx in choices:
            fail("duplicate choice index", repr(idx))
        ch = choices[idx] = new_choice()
        ch["finish_reason"], ch["stop_reason"] = c.get("finish_reason"), c.get("stop_reason")
        ch["finishes"] = 1 if ch["finish_reason"] is not None else 0
        ch["token_ids"] = c.get("token_ids")
        if req.chat:
            msg = c.get("message") or {}
            ch["text"] = msg.get("content")
            ch["roles"] = [msg.get("role")]
            ch["prompt_token_ids"] = c.get("prompt_token_ids", body.get("prompt_token_ids"))
            lp = c.get("logprobs")
            ch["logprobs"] = None if lp is None else lp.get("content")
            ch["prompt_logprobs"] = body.get("prompt_logprobs")
        else:
            ch["text"] = c.get("text")
            ch["prompt_token_ids"] = c.get("prompt_token_ids")
            ch["logprobs"] = c.get("logprobs")
            ch["prompt_logprobs"] = c.get("prompt_logprobs")
    return choices, body.get("usage")


def normalize_stream(req, events, fail):
    """Streamed events → {index: choice} (deltas concatenated) and the usage chunk's usage."""
    obj = "chat.completion.chunk" if req.chat else "text_completion"
    prefix = "chatcmpl-" if req.chat else "cmpl-"
    choices, usage, ids = {}, None, set()
    # vLLM 0.32: include_usage defaults to false; continuous_usage_stats acts only with it.
    want_usage = bool((req.body.get("stream_options") or {}).get("include_usage"))
    continuous = want_usage and req.body["stream_options"].get("continuous_usage_stats")
    cont_usage = {}  # choice index → the completion_tokens of its chunks
    for k, ev in enumerate(events):
        if "error" in ev:
            fail("an error event in the stream", json.dumps(ev)[:500])
            return None, None
        if ev.get("object") != obj or not str(ev.get("id", "")).startswith(prefix):
            fail("wrong chunk object/id", f"{ev.get('object')!r} {ev.get('id')!r}")
        if req.request_id and ev.get("id") != prefix + req.request_id:
            fail(f"chunk id {ev.get('id')!r} does not follow X-Request-Id {req.request_id!r}")
        ids.add(ev.get("id"))
        if ev.get("model") != req.body.get("model", BASE):
            fail("wrong model in a chunk", repr(ev.get("model")))
        if ev.get("choices") and continuous:
            u = ev.get("usage")
            if not isinstance(u, dict) or len(ev["choices"]) != 1:
                fail("continuous_usage_stats: a chunk without usage, or with several choices",
                     json.dumps(ev)[:300])
            else:
                idx = ev["choices"][0].get("index")
                cont_usage.setdefault(idx, []).append(u)
        elif ev.get("usage") is not None:
            if not want_usage:
                fail("usage in a stream that did not ask for it", json.dumps(ev)[:300])
            if ev.get("choices") != [] or k != len(events) - 1:
                fail("the usage chunk is not the last one, or has choices", json.dumps(ev)[:300])
            usage = ev["usage"]
            continue
        chunk_prompt_ids = ev.get("prompt_token_ids")
        for c in ev.get("choices") or []:
            idx = c.get("index")
            ch = choices.setdefault(idx, new_choice())
            if ch["finishes"]:
                ch["after_finish"] = True
            if c.get("finish_reason") is not None:
                ch["finishes"] += 1
                ch["finish_reason"], ch["stop_reason"] = c["finish_reason"], c.get("stop_reason")
            if c.get("token_ids") is not None:
                ch["token_ids"] = (ch["token_ids"] or []) + c["token_ids"]
            pids = c.get("prompt_token_ids", chunk_prompt_ids)
            if pids is not None:
                if ch["prompt_token_ids"] is not None:
                    fail("prompt_token_ids in more than one chunk of a choice", f"choice {idx}")
                ch["prompt_token_ids"] = pids
            if req.chat:
                delta = c.get("delta") or {}
                if not isinstance(delta.get("content"), str):  # vLLM 0.32: "" too
                    fail("a chat delta without content", json.dumps(c)[:300])
                if "role" in delta:
                    ch["roles"].append(delta["role"])
                ch["text"] += delta.get("content") or ""
                lp = c.get("logprobs")
                if lp is not None:
                    ch["logprobs"] = (ch["logprobs"] or []) + (lp.get("content") or [])
            else:
                ch["text"] += c.get("text") or ""
                lp = c.get("logprobs")
                if lp is not None:
                    if ch["logprobs"] is None:
                        ch["logprobs"] = {"tokens": [], "token_logprobs": [], "top_logprobs": [],
                                          "text_offset": []}
                    for key in ch["logprobs"]:
                        ch["logprobs"][key] += lp.get(key) or []
    if len(ids) > 1:
        fail("chunks with different ids", repr(sorted(map(str, ids)))[:300])
    if want_usage and usage is None:
        fail("include_usage but no usage chunk")
    for idx, us in cont_usage.items():
        ct = [u.get("completion_tokens") for u in us]
        ch = choices.get(idx)
        note("continuous usage checked")
        if ct != sorted(ct) or any(u.get("prompt_tokens", 0) + u.get("completion_tokens", 0)
                                   != u.get("total_tokens") for u in us):
            fail(f"continuous usage of choice {idx} not increasing or not adding up",
                 json.dumps(us)[:600])
        elif ch and ch["token_ids"] is not None and ct[-1] != len(ch["token_ids"]):
            fail(f"continuous usage of choice {idx} ends at {ct[-1]}, "
                 f"{len(ch['token_ids'])} tokens", json.dumps(us[-3:]))
        if req.prompts and idx is not None and isinstance(idx, int):
            n = req.body.get("n", 1)
            want_pt = len(req.prompts[min(idx // n, len(req.prompts) - 1)])
            if any(u.get("prompt_tokens") != want_pt for u in us):
                fail(f"continuous usage of choice {idx}: prompt_tokens "
                     f"{sorted({u.get('prompt_tokens') for u in us})} != {want_pt}")
    return choices, usage


# ---- the invariants -------------------------------------------------------------------------------

STATS = Counter()  # what the checks saw, printed at the end (so a vacuous run shows)
_stats_lock = threading.Lock()


def note(*keys):
    with _stats_lock:
        STATS.update(keys)


def is_num(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def finite_logprob(x):
    return is_num(x) and math.isfinite(x) and x <= 0


def decode(ids):
    return bytes(ids).decode("utf-8", "replace")


def valid_utf8(ids):
    try:
        bytes(ids).decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def check_error(req, status, body, fail):
    if not isinstance(body, dict) or set(body) != {"error"}:
        fail(f"{status} body is not an error object", json.dumps(body)[:500])
        return
    e = body["error"]
    if not isinstance(e, dict) or not {"message", "type", "param", "code"} <= set(e):
        fail(f"{status} error lacks message/type/param/code", json.dumps(e)[:500])
        return
    if e["code"] != status:
        fail(f"error code {e['code']!r} != status {status}")
    if not isinstance(e["message"], str) or not e["message"]:
        fail("empty error message")
    if req.invalid is not None and status == 400:
        named = e.get("param") in req.invalid or any(p in str(e["message"]) for p in req.invalid)
        if not named:
            fail(f"400 does not name {sorted(req.invalid)}", json.dumps(e)[:500])


def check_ok(req, choices, usage, fail):
    b = req.body
    n = b.get("n", 1)
    nprompts = len(req.prompts) if req.prompts else (
        len(b["prompt"]) if not req.chat and isinstance(b["prompt"], list)
        and b["prompt"] and isinstance(b["prompt"][0], (str, list)) else 1)
    k = n * nprompts
    if sorted(choices, key=str) != sorted(range(k), key=str):
        fail(f"choice indices {sorted(choices, key=str)} are not 0..{k - 1}")
        return
    stops = b.get("stop")
    stops = [] if stops is None else ([stops] if isinstance(stops, str) else stops)
    stop_ids = set(b.get("stop_token_ids") or [])
    ignore_eos = bool(b.get("ignore_eos"))
    include_stop = bool(b.get("include_stop_str_in_output"))
    min_tokens = b.get("min_tokens") or 0
    greedy = is_num(b.get("temperature")) and b["temperature"] < 1e-5
    plain_sampling = not any(f in b for f in ("presence_penalty", "frequency_penalty", "logit_bias",
                                              "repetition_penalty", "allowed_token_ids",
                                              "bad_words", "min_tokens"))
    echo = bool(b.get("echo"))
    mt = req.max_tokens
    total_generated = 0
    counted = True
    for idx in range(k):
        ch = choices[idx]
        where = f"choice {idx}: "
        pi = idx // n
        prompt = req.prompts[pi] if req.prompts else None
        if ch["finishes"] != 1:
            fail(where + f"{ch['finishes']} finish_reasons")
        if ch["after_finish"]:
            fail(where + "a chunk after its finish_reason")
        fr, sr = ch["finish_reason"], ch["stop_reason"]
        note("choices", f"finish {fr} " + ("string" if isinstance(sr, str) else
                                           "token" if isinstance(sr, int) else "-"))
        if fr not in ("stop", "length"):
            fail(where + f"finish_reason {fr!r}")
        if req.chat:
            want_role = "assistant"
            if b.get("add_generation_prompt") is False and isinstance(b["messages"], list):
                want_role = b["messages"][-1]["role"]
            if ch["roles"] != [want_role]:
                fail(where + f"roles {ch['roles']} (want one {want_role!r})")
        text = ch["text"]
        if not isinstance(text, str):
            fail(where + f"text {text!r}")
            continue
        ids = ch["token_ids"]
        if b.get("return_token_ids"):
            if not isinstance(ids, list):
                if not (req.stream and ids is None and mt == 0):
                    fail(where + f"return_token_ids but token_ids {ids!r}")
                ids = [] if ids is None else ids
            if prompt is not None and ch["prompt_token_ids"] != prompt:
                fail(where + f"prompt_token_ids {ch['prompt_token_ids']} != {prompt}")
        # The generated part of the text.
        gen = text
        if echo and not req.chat and prompt is not None and valid_utf8(prompt):
            pt = decode(prompt)
            if not text.startswith(pt):
                fail(where + f"echo: text {text[:80]!r} does not start with the prompt {pt[:80]!r}")
            gen = text[len(pt):]
        elif echo and not req.chat:
            gen = None  # a token-id prompt's echoed text: not checked here
        if req.chat and req.echo_text is not None:
            if not text.startswith(req.echo_text):
                fail(where + f"echo: content {text[:80]!r} does not start with {req.echo_text[:80]!r}")
            gen = text[len(req.echo_text):]
        if not req.chat and echo and mt == 0 and gen not in ("", None):
            fail(where + f"echo with max_tokens 0 generated {gen!r}")

        # Stop reasons.
        if mt == 0:
            # echo with max_tokens 0 reported the finish of the one token that ran and was
            # dropped ("stop", its id); found by this test, test_logprobs pins it.
            if (fr, sr) != ("length", None):
                fail(where + f"echo with max_tokens 0: finish_reason {fr!r}, stop_reason {sr!r} "
                     "with no token generated (want 'length', null)")
        elif fr == "length" and sr is not None:
            fail(where + f"finish_reason length with stop_reason {sr!r}")
        if fr == "stop" and mt != 0:
            if isinstance(sr, str):
                if sr not in stops:
                    fail(where + f"stop_reason {sr!r} is not one of the stop strings {stops}")
            elif isinstance(sr, int):
                if sr not in stop_ids and not (sr == EOS and not ignore_eos):
                    fail(where + f"stop_reason {sr} is neither a stop_token_id nor EOS")
                if ids is not None and (not ids or ids[-1] != sr):
                    fail(where + f"stop_reason {sr} but the last token is {ids[-1:]} ")
            elif sr is None:
                # The tiny tokenizer has no eos_token: EOS (generation_config.json) reports its
                # id, as vLLM; null is left for a choice whose constraints left nothing to draw.
                if ids is not None and "allowed_token_ids" not in b:
                    fail(where + f"finish stop, stop_reason null, ignore_eos {ignore_eos}, last "
                         f"token {ids[-1:]}")
            else:
                fail(where + f"stop_reason {sr!r}")

        # Token counts.
        if ids is not None:
            g = len(ids)
            total_generated += g
            if mt is not None and g > mt:
                fail(where + f"{g} tokens > max_tokens {mt}")
            # The prompt's length: the request's, else (a chat with null content, whose rendering
            # is not computed here) the ids the answer reports, else unknown.
            plen = len(prompt) if prompt is not None else (
                len(ch["prompt_token_ids"]) if isinstance(ch.get("prompt_token_ids"), list)
                else None)
            if fr == "length" and mt is not None and g != mt and not (
                    plen is None or plen + g == MAX_MODEL_LEN):
                fail(where + f"finish length after {g} tokens, max_tokens {mt}")
            if fr == "length" and mt is None and plen is not None and \
                    plen + g != MAX_MODEL_LEN:
                fail(where + f"finish length after {g} tokens: neither max_tokens nor the context")
            if fr == "stop" and g <= min_tokens and mt != min_tokens:
                fail(where + f"stopped after {g} tokens, min_tokens {min_tokens}")
            ending = stop_ids | ({EOS} if not ignore_eos else set())
            early = [j for j in range(min_tokens, g - 1) if ids[j] in ending]
            if early:
                fail(where + f"token {ids[early[0]]} at {early[0]} should have ended the choice "
                     f"(stop_token_ids {sorted(stop_ids)}, ignore_eos {ignore_eos})")
            if min_tokens:
                held = [j for j in range(min(min_tokens, g)) if ids[j] in stop_ids | {EOS}]
                if held:
                    fail(where + f"a stop token/EOS at {held[0]} < min_tokens {min_tokens}")
            if "allowed_token_ids" in b:
                bad = [t for t in ids if t not in set(b["allowed_token_ids"])]
                if bad:
                    fail(where + f"tokens {bad[:5]} outside allowed_token_ids")
            for w in b.get("bad_words") or []:
                wb = w.strip().encode()
                if wb and wb in bytes(ids):
                    fail(where + f"bad word {w!r} generated: {ids}")
        else:
            counted = False

        # Stop strings never in the text (unless asked for, or held back by min_tokens).
        if gen is not None and not min_tokens:
            body_text = gen
            if include_stop and isinstance(sr, str) and fr == "stop":
                if not gen.endswith(sr):
                    fail(where + f"include_stop_str_in_output: text {gen[-40:]!r} does not end "
                         f"with {sr!r}")
                body_text = gen[:len(gen) - len(sr)]
            note("stop strings checked" if stops else "no stop strings")
            for s in stops:
                if s in body_text:
                    fail(where + f"stop string {s!r} in the text {gen[:200]!r}")

        # The text is the decoding of the ids (one byte per token): the ending stop token's text
        # only with include_stop_str_in_output; cut at the stop string.
        if gen is not None and ids is not None and prompt is not None and valid_utf8(prompt) \
                and not min_tokens:
            out_ids = ids
            ending = stop_ids | ({EOS} if not ignore_eos else set())
            if fr == "stop" and not include_stop and ids and (
                    not isinstance(sr, str) or ids[-1] in ending):
                # The ending token's text is not output. (A stop string may still end the
                # choice then: held text — an unfinished character — is flushed as U+FFFD when
                # the stop token ends the choice, and that can complete a stop string.)
                out_ids = ids[:-1]
            full = decode(out_ids)
            want = full
            if fr == "stop" and isinstance(sr, str):
                at = full.find(sr)
                if at < 0:
                    fail(where + f"stop_reason {sr!r} is not in the decoded tokens {full[-80:]!r}")
                else:
                    want = full[:at + (len(sr) if include_stop else 0)]
            note("text == decoded ids checked")
            if gen != want:
                fail(where + f"text {gen[:200]!r} != the decoded token ids {want[:200]!r} "
                     f"(ids {ids[:40]})")

        # Log-probs.
        lp = ch["logprobs"]
        if req.chat:
            want_lp = b.get("logprobs") is True
            top_n = b.get("top_logprobs") or 0
            if not want_lp:
                if lp is not None:
                    fail(where + "logprobs not asked for but returned")
            elif not isinstance(lp, list):
                fail(where + f"logprobs.content {lp!r}")
            else:
                note("chat logprobs checked")
                if ids is not None and len(lp) != len(ids):
                    fail(where + f"{len(lp)} log-prob entries for {len(ids)} tokens")
                for j, e in enumerate(lp):
                    if not isinstance(e, dict) or not isinstance(e.get("token"), str) or \
                            not finite_logprob(e.get("logprob")) or \
                            not isinstance(e.get("top_logprobs"), list):
                        fail(where + f"bad log-prob entry {j}: {json.dumps(e)[:300]}")
                        break
                    if e.get("bytes") != list(e["token"].encode()):
                        fail(where + f"entry {j}: bytes {e.get('bytes')!r} are not the token "
                             f"{e['token']!r}")
                    tops = e["top_logprobs"]
                    if len(tops) != top_n:
                        fail(where + f"entry {j}: {len(tops)} top_logprobs, asked {top_n}")
                        break
                    vals = [t.get("logprob") for t in tops]
                    if not all(finite_logprob(v) for v in vals) or vals != sorted(vals, reverse=True):
                        fail(where + f"entry {j}: top log-probs {vals}")
                        break
                    if greedy and plain_sampling and vals and e["logprob"] < vals[0]:
                        fail(where + f"greedy entry {j}: chosen {e['logprob']} < top {vals[0]}")
                        break
        else:
            want_lp = b.get("logprobs") is not None
            top_n = b.get("logprobs") or 0
            if not want_lp:
                if lp is not None:
                    fail(where + "logprobs not asked for but returned")
            elif not isinstance(lp, dict):
                fail(where + f"logprobs {lp!r}")
            else:
                lists = [lp.get(key) for key in ("tokens", "token_logprobs", "top_logprobs",
                                                 "text_offset")]
                if not all(isinstance(x, list) for x in lists) or len({len(x) for x in lists}) != 1:
                    fail(where + f"log-prob lists of lengths {[len(x or []) for x in lists]}")
                else:
                    note("completion logprobs checked" + (" (echo)" if echo else ""))
                    toks, tlps, tops, offs = lists
                    np_ = len(prompt) if (echo and prompt is not None) else 0
                    if ids is not None and (echo is False or prompt is not None) and \
                            len(toks) != len(ids) + np_:
                        fail(where + f"{len(toks)} log-prob entries for {len(ids)} tokens "
                             f"+ {np_} echoed")
                    for j in range(len(toks)):
                        first_echo = echo and j == 0
                        if first_echo:
                            if tlps[0] is not None or tops[0] is not None:
                                fail(where + "echo: the first prompt token has a log-prob")
                            continue
                        if not isinstance(toks[j], str) or not finite_logprob(tlps[j]) or \
                                not isinstance(tops[j], dict):
                            fail(where + f"entry {j}: {toks[j]!r} {tlps[j]!r} {tops[j]!r}")
                            break
                        if not 1 <= len(tops[j]) <= top_n + 1 or \
                                not all(finite_logprob(v) for v in tops[j].values()):
                            fail(where + f"entry {j}: top_logprobs {tops[j]} for logprobs {top_n}")
                            break
                        if next(iter(tops[j])) != toks[j]:
                            fail(where + f"entry {j}: top_logprobs {tops[j]} do not lead with "
                                 f"the token {toks[j]!r}")
                            break
                        if greedy and plain_sampling and j >= np_ and \
                                tlps[j] < max(tops[j].values()) - 1e-6:
                            fail(where + f"greedy entry {j}: {tlps[j]} < {tops[j]}")
                            break
                    if offs and (offs[0] != 0 or any(
                            b2 - a != len(t) for a, b2, t in zip(offs, offs[1:], toks))):
                        fail(where + f"text_offset {offs[:20]} does not follow tokens {toks[:20]}")
        plp = ch["prompt_logprobs"]
        if "prompt_logprobs" in b and prompt is not None:
            if not isinstance(plp, list) or len(plp) != len(prompt) or plp[0] is not None:
                fail(where + f"prompt_logprobs of {len(plp) if isinstance(plp, list) else plp!r} "
                     f"entries for a {len(prompt)}-token prompt")
            else:
                note("prompt_logprobs checked")
                for j, e in enumerate(plp[1:], 1):
                    if not isinstance(e, dict) or str(prompt[j]) not in e or \
                            not len(e) <= b["prompt_logprobs"] + 1 or not all(
                                finite_logprob(v.get("logprob")) for v in e.values()):
                        fail(where + f"prompt_logprobs[{j}] {json.dumps(e)[:300]}")
                        break

    # Usage.
    if usage is None:
        if not req.stream:
            fail("no usage")
        return
    pt, ct, tt = (usage.get(x) for x in ("prompt_tokens", "completion_tokens", "total_tokens"))
    if not all(isinstance(x, int) for x in (pt, ct, tt)) or pt + ct != tt:
        fail(f"usage {usage}")
        return
    note("usage checked" + (" with token counts" if counted else ""))
    if counted and ct != total_generated:
        fail(f"usage.completion_tokens {ct} != {total_generated} tokens in the choices")
    if req.prompts is not None and pt != sum(len(p) for p in req.prompts):
        fail(f"usage.prompt_tokens {pt} != {sum(len(p) for p in req.prompts)} "
             f"({[len(p) for p in req.prompts]})")


def check(req, status, body, err, failures):
    def fail(what, detail=""):
        failures.add(req, what, detail)

    note(f"{req.path} {'stream' if req.stream else 'full'} {status}")
    if err:
        fail(f"status {status}: {err}")
        return None
    if req.abandon and status == 200:
        return None
    if status >= 500 or status not in (200, 400, 404, 413):
        fail(f"status {status}", json.dumps(body)[:800])
        return None
    if status != 200:
        check_error(req, status, body, fail)
        if req.invalid is None and not (
                status == 400 and req.may_be_invalid and isinstance(body, dict) and
                (body.get("error") or {}).get("param") in req.may_be_invalid and
                ("maximum context length" in str(body["error"].get("message")) or
                 body["error"]["param"] == "min_tokens")):
            fail(f"a valid request answered {status}", json.dumps(body)[:800])
        return None
    if req.invalid is not None:
        fail(f"200 where a 400 naming {sorted(req.invalid)} was expected")
        return None
    if req.stream:
        choices, usage = normalize_stream(req, body, fail)
    else:
        choices, usage = normalize_full(req, body, fail)
    if choices is None:
        return None
    check_ok(req, choices, usage, fail)
    return choices, usage


def variant(q, **changes):
    """A copy of request q with body fields changed (None removes one)."""
    body = dict(q.body)
    for key, value in changes.items():
        if value is None:
            body.pop(key, None)
        else:
            body[key] = value
    v = Req(q.i, q.path, body)
    v.prompts, v.max_tokens, v.echo_text = q.prompts, q.max_tokens, q.echo_text
    return v


def comparable(choices, usage):
    """What a replay must reproduce bit for bit."""
    out = []
    for idx in sorted(choices):
        c = choices[idx]
        out.append({key: c[key] for key in ("text", "token_ids", "finish_reason", "stop_reason",
                                            "logprobs", "prompt_logprobs")})
    usage = usage and {k: usage.get(k) for k in ("prompt_tokens", "completion_tokens",
                                                 "total_tokens")}
    return out, usage
