"""Log-probs through the official openai client: chat and completions (greedy, streamed, the
sampled token leading completions' top_logprobs, text_offset in characters), and the prompt's:
echo with logprobs (lm-evaluation-harness), echo with max_tokens 0 (HELM), vLLM's prompt_logprobs."""
import json
import math

import pytest

from conftest import BASE, PROMPTS, chat_prompt_bytes, complete, printable


def test_completion_logprobs_greedy_consistent(server):
    r = complete(server, BASE, "Hello world", max_tokens=12, logprobs=3,
                 extra_body={"ignore_eos": True})
    c = r.choices[0]
    lp = c.logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 12
    assert len(lp.text_offset) == 12
    for i, (tok_id, chosen, top) in enumerate(zip(c.token_ids, lp.token_logprobs, lp.top_logprobs)):
        assert chosen <= 0 and math.isfinite(chosen)
        assert 1 <= len(top) <= 3
        assert all(v <= 0 for v in top.values())
        # Greedy: the chosen token is the most likely one.
        assert chosen == pytest.approx(max(top.values()), abs=1e-6) or chosen >= max(top.values()), \
            (i, chosen, top)
        if printable(tok_id):
            assert lp.tokens[i] == chr(tok_id)
            assert top.get(chr(tok_id)) == pytest.approx(chosen, abs=1e-6), (i, chosen, top)
    assert lp.text_offset == sorted(lp.text_offset) and lp.text_offset[0] == 0


def test_chat_logprobs_greedy_consistent(server):
    r = server.client().chat.completions.create(
        model=BASE, messages=[{"role": "user", "content": "Say something"}], max_tokens=10,
        temperature=0, logprobs=True, top_logprobs=4, extra_body={"ignore_eos": True})
    content = r.choices[0].logprobs.content
    assert len(content) == 10 == r.usage.completion_tokens
    for e in content:
        assert len(e.top_logprobs) == 4
        tops = [t.logprob for t in e.top_logprobs]
        assert tops == sorted(tops, reverse=True)
        assert e.logprob == tops[0], "greedy: the chosen token is the top-1"
        assert e.token == e.top_logprobs[0].token
        assert bytes(e.bytes) == e.token.encode()
        assert sum(math.exp(t) for t in tops) <= 1.0 + 1e-5


def test_logprobs_stream_equal_non_stream(server):
    kw = dict(model=BASE, prompt="The quick", max_tokens=10, temperature=0, logprobs=2,
              extra_body={"ignore_eos": True})
    full = server.client().completions.create(**kw).choices[0].logprobs
    lps = []
    for ch in server.client().completions.create(stream=True, **kw):
        for c in ch.choices:
            if c.logprobs:
                lps += c.logprobs.token_logprobs
    assert lps == full.token_logprobs


def test_completion_top_logprobs_lead_with_the_sampled_token(server):
    # OpenAI's legacy contract, as vLLM: each position's top_logprobs holds the sampled token
    # first, then the N most likely others: up to N + 1 entries; logprobs=0 gives the sampled
    # token alone. Sampled at temperature 5, some tokens are not among the top 1.
    for n in (0, 1):
        r = complete(server, BASE, PROMPTS[1], max_tokens=48, logprobs=n, temperature=5.0,
                     seed=7, extra_body={"ignore_eos": True}).choices[0]
        lp = r.logprobs
        sizes = []
        for i, (tok_id, chosen, top) in enumerate(zip(r.token_ids, lp.token_logprobs,
                                                      lp.top_logprobs)):
            assert next(iter(top)) == lp.tokens[i], (i, top)
            assert 1 <= len(top) <= n + 1
            if printable(tok_id):  # one id per key: the value is the sampled token's
                assert top[lp.tokens[i]] == pytest.approx(chosen, abs=1e-6)
            sizes.append(len(top))
        assert set(sizes) == {1} if n == 0 else 2 in sizes, sizes


def test_echo_with_logprobs_scores_the_prompt_as_generation_scored_it(server):
    # What lm-evaluation-harness's loglikelihood sends: token-id prompts, echo, logprobs=1,
    # max_tokens=1. The prompt is P + G, G being P's greedy continuation: the echoed log-probs
    # of G's tokens are the ones the generation reported for them.
    p = list(PROMPTS[2].encode())
    gen = complete(server, BASE, p, max_tokens=6, logprobs=1,
                   extra_body={"ignore_eos": True}).choices[0]
    g = gen.token_ids
    r = server.client().completions.create(model=BASE, prompt=[p + g, p], max_tokens=1,
                                           logprobs=1, echo=True, temperature=0, seed=1234)
    scored, short = sorted(r.choices, key=lambda c: c.index)
    lp = scored.logprobs
    assert len(lp.tokens) == len(p) + len(g) + 1 == len(lp.token_logprobs) == len(lp.top_logprobs)
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert lp.tokens[:len(p)] == [chr(t) for t in p]
    assert lp.tokens[len(p):len(p) + len(g)] == gen.logprobs.tokens
    assert lp.text_offset[0] == 0 and all(
        b - a == len(t) for a, b, t in zip(lp.text_offset, lp.text_offset[1:], lp.tokens))
    echoed = lp.token_logprobs[len(p):len(p) + len(g)]
    assert echoed == pytest.approx(gen.logprobs.token_logprobs, abs=1e-5), (echoed, gen.logprobs)
    # Greedy tokens are each their position's most likely: lm-eval's is_greedy holds.
    for tok, top in zip(echoed, lp.top_logprobs[len(p):len(p) + len(g)]):
        assert tok == pytest.approx(max(top.values()), abs=1e-6)
    assert all(v is not None and v <= 0 for v in lp.token_logprobs[1:])
    # The text starts with the prompt; a prompt's own scores do not depend on what follows it.
    assert scored.text.startswith(PROMPTS[2])
    assert short.logprobs.token_logprobs[1:len(p)] == lp.token_logprobs[1:len(p)]


def test_prompt_logprobs_in_vllms_shape(server):
    prompt = "Hello world"
    ids = list(prompt.encode())
    echo = complete(server, BASE, prompt, max_tokens=1, logprobs=2, echo=True).choices[0]
    r = server.post("/v1/completions", {"model": BASE, "prompt": prompt, "max_tokens": 1,
                                        "temperature": 0, "prompt_logprobs": 2})
    assert r.status_code == 200, r.text
    plp = r.json()["choices"][0]["prompt_logprobs"]
    assert len(plp) == len(ids) and plp[0] is None
    for i in range(1, len(ids)):
        entry = plp[i]
        mine = entry[str(ids[i])]
        assert mine["logprob"] == pytest.approx(echo.logprobs.token_logprobs[i], abs=1e-6)
        assert mine["decoded_token"] == chr(ids[i])
        # The top 2 have ranks 1 and 2 (the token among them or not), the token its own rank.
        others = {k: e for k, e in entry.items() if k != str(ids[i])}
        assert len(entry) in (2, 3)
        if len(entry) == 2:  # the token is one of the top 2
            assert sorted(e["rank"] for e in entry.values()) == [1, 2]
        else:
            assert sorted(e["rank"] for e in others.values()) == [1, 2] and mine["rank"] > 2
        best = min(entry.values(), key=lambda e: e["rank"])
        assert all(best["logprob"] >= e["logprob"] for e in entry.values())
    # Chat: once, beside the choices, for the rendered prompt.
    c = server.post("/v1/chat/completions", {"model": BASE, "max_tokens": 1, "prompt_logprobs": 0,
                                             "messages": [{"role": "user", "content": "Hi"}]})
    assert c.status_code == 200, c.text
    body = c.json()
    rendered = chat_prompt_bytes("Hi")
    assert len(body["prompt_logprobs"]) == len(rendered) and body["prompt_logprobs"][0] is None
    assert all(len(e) == 1 and str(t) in e
               for t, e in zip(rendered[1:], body["prompt_logprobs"][1:]))


def test_echo(server):
    r = complete(server, BASE, "Echo me", max_tokens=4, echo=True,
                 extra_body={"ignore_eos": True})
    plain = complete(server, BASE, "Echo me", max_tokens=4, extra_body={"ignore_eos": True})
    assert r.choices[0].text == "Echo me" + plain.choices[0].text


def test_echo_with_max_tokens_zero_scores_the_prompt_alone(server):
    # OpenAI's legacy prompt scoring (HELM sends it; vLLM's echo_without_generation): the answer
    # is the prompt, its log-probs are the prompt's, nothing generated is counted.
    p = PROMPTS[3]
    only = complete(server, BASE, p, max_tokens=0, echo=True, logprobs=1)
    one = complete(server, BASE, p, max_tokens=1, echo=True, logprobs=1)
    c, d = only.choices[0], one.choices[0]
    assert c.text == p and c.token_ids == [] and only.usage.completion_tokens == 0
    assert c.logprobs.tokens == d.logprobs.tokens[:-1] == [chr(b) for b in p.encode()]
    assert c.logprobs.token_logprobs == d.logprobs.token_logprobs[:-1]
    assert c.logprobs.token_logprobs[0] is None and all(v <= 0 for v in c.logprobs.token_logprobs[1:])
    assert c.finish_reason == "length" and c.stop_reason is None


def test_echo_with_max_tokens_zero_does_not_report_the_dropped_tokens_stop(server):
    # The one token that runs is dropped, so is what ended it: every id a stop token (or the
    # token making a stop string) still answers "length" with no stop_reason, streamed or not
    # (the hidden token's finish leaked: "stop" and its id, a token the answer does not have).
    every_id = {"stop_token_ids": list(range(256)), "return_token_ids": True}
    for extra in (every_id, {"allowed_token_ids": [65], "stop": ["A"]}):
        r = complete(server, BASE, "hi", max_tokens=0, echo=True, extra_body=extra)
        c = r.choices[0]
        assert (c.text, c.finish_reason, c.stop_reason) == ("hi", "length", None), (extra, c)
        assert r.usage.completion_tokens == 0
        chunks = list(server.client().completions.create(
            model=BASE, prompt="hi", max_tokens=0, echo=True, stream=True, extra_body=extra))
        finishes = [(ch.choices[0].finish_reason, getattr(ch.choices[0], "stop_reason", None))
                    for ch in chunks if ch.choices and ch.choices[0].finish_reason]
        assert finishes == [("length", None)], (extra, finishes)


def _streamed(server, **kw):
    """A streamed completion (greedy unless told) folded back into one choice per index: text,
    token ids, the completions log-probs lists concatenated, finish reasons, the final usage."""
    kw.setdefault("temperature", 0)
    chunks = list(server.client().completions.create(
        model=BASE, stream=True, stream_options={"include_usage": True}, **kw))
    out, usage = {}, None
    for ch in chunks:
        if ch.usage is not None:
            usage = ch.usage
        for c in ch.choices:
            o = out.setdefault(c.index, {"text": "", "ids": [], "finish": None,
                                         "lp": {"tokens": [], "token_logprobs": [],
                                                "top_logprobs": [], "text_offset": []}})
            o["text"] += c.text
            o["ids"] += getattr(c, "token_ids", None) or []
            o["finish"] = c.finish_reason or o["finish"]
            if c.logprobs is not None:
                for key in o["lp"]:
                    o["lp"][key] += getattr(c.logprobs, key)
    return out, usage


@pytest.mark.parametrize("max_tokens", [0, 1, 5])
def test_echo_streamed_equals_echo_in_one_body(server, max_tokens):
    # vLLM streams echo: each choice's first chunk leads with the prompt (and its log-probs),
    # so the folded stream is the non-streamed body, text, log-probs, offsets and usage alike.
    # Seeded samples (greedy takes n = 1 only, as vLLM): the same with and without stream.
    kw = dict(prompt=[PROMPTS[1], list(PROMPTS[0].encode())], max_tokens=max_tokens, echo=True,
              logprobs=2, n=2, temperature=1.0, seed=11,
              extra_body={"ignore_eos": True, "return_token_ids": True})
    full = server.client().completions.create(model=BASE, **kw)
    got, usage = _streamed(server, **kw)
    assert sorted(got) == [c.index for c in sorted(full.choices, key=lambda c: c.index)] == \
        [0, 1, 2, 3]
    for c in full.choices:
        g = got[c.index]
        assert g["text"] == c.text and g["ids"] == c.token_ids, (c.index, g["text"], c.text)
        assert g["finish"] == c.finish_reason
        for key in ("tokens", "token_logprobs", "top_logprobs", "text_offset"):
            assert g["lp"][key] == getattr(c.logprobs, key), (c.index, key)
    assert usage.completion_tokens == full.usage.completion_tokens == 4 * max_tokens
    assert usage.prompt_tokens == full.usage.prompt_tokens
    # Without logprobs too: the prompt's text leads.
    got, _ = _streamed(server, prompt=PROMPTS[2], max_tokens=max_tokens, echo=True)
    assert got[0]["text"].startswith(PROMPTS[2])
    assert len(got[0]["text"].encode("utf-8", "replace")) >= len(PROMPTS[2].encode())


def test_text_offset_counts_characters(server):
    # OpenAI's legacy text_offset (and vLLM's): characters of the token strings, not bytes. Each
    # byte of "é" is a token; as vLLM 0.32 (v1/engine/logprobs.py _correct_decoded_token) the
    # first byte's text is "" (an incomplete character) and the second's the "é" it completes,
    # so the tokens spell the text and text_offset indexes it (each byte was "\ufffd" before).
    r = complete(server, BASE, "h\u00e9llo \u00e9", max_tokens=3, echo=True, logprobs=0,
                 extra_body={"ignore_eos": True}).choices[0]
    lp = r.logprobs
    assert lp.tokens[:9] == ["h", "", "\u00e9", "l", "l", "o", " ", "", "\u00e9"], lp.tokens
    assert lp.text_offset[:9] == [0, 1, 1, 2, 3, 4, 5, 6, 6], lp.text_offset
    assert lp.text_offset[0] == 0 and all(
        b - a == len(t) for a, b, t in zip(lp.text_offset, lp.text_offset[1:], lp.tokens)), lp


def test_echo_of_token_id_prompts(server):
    # A token-id prompt is echoed as its text (the tokenizer's decode), one per choice.
    prompts = [list("Echo me".encode()), list("and me".encode())]
    r = complete(server, BASE, prompts, max_tokens=4, echo=True,
                 extra_body={"ignore_eos": True})
    assert len(r.choices) == 2
    for c, text in zip(r.choices, ["Echo me", "and me"]):
        plain = complete(server, BASE, text, max_tokens=4, extra_body={"ignore_eos": True})
        assert c.text == text + plain.choices[0].text


def test_chat_top_logprobs_zero(server):
    r = server.client().chat.completions.create(
        model=BASE, messages=[{"role": "user", "content": "x"}], max_tokens=3, temperature=0,
        logprobs=True, top_logprobs=0, extra_body={"ignore_eos": True})
    content = r.choices[0].logprobs.content
    assert len(content) == 3
    assert all(e.top_logprobs == [] and e.logprob <= 0 for e in content)


def test_prompt_logprob_budget_is_400_naming_the_field(server):
    # Prompt log-probs come all at once (one body, or each choice's first chunk): more than 2^20
    # entries (top-N + 1 per prompt token per sequence) in a request, 2^18 streamed, is a 400
    # naming the field that asked for them, before any prompt runs.
    prompts = [[97 + (i + t) % 26 for t in range(500)] for i in range(64)]  # 64 × 500 tokens
    r = server.post("/v1/completions", {"model": BASE, "prompt": prompts, "n": 2, "max_tokens": 1,
                                        "prompt_logprobs": 20})  # 64·500·2·21 = 1,344,000
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "prompt_logprobs" and "1344000" in err["message"], err
    r = server.post("/v1/completions", {"model": BASE, "prompt": [p[:200] for p in prompts],
                                        "max_tokens": 1, "echo": True, "logprobs": 20,
                                        "stream": True})  # 64·200·21 = 268,800 > 262,144
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "logprobs" and "stream" in err["message"], err
    # The same without stream is within the larger budget, and answered.
    r = server.post("/v1/completions", {"model": BASE, "prompt": [p[:200] for p in prompts[:8]],
                                        "max_tokens": 1, "echo": True, "logprobs": 20})
    assert r.status_code == 200, r.text[:300]
    assert all(len(c["logprobs"]["tokens"]) == 201 for c in r.json()["choices"])


def test_streamed_echo_of_a_long_prompt_arrives_whole(start_server, long_dir):
    # A 12,000-token prompt echoed with 20 alternatives (252,000 entries, within the streamed
    # budget) is one first chunk of several MiB, built and written whole (a chunk counted against
    # the 8 MiB a stream may leave unsent behind a write; with longer token strings one this size
    # closed the connection before its head was sent).
    srv = start_server(long_dir, ["--served-model-name", BASE])
    prompt = [97 + (t * 7) % 26 for t in range(12000)]
    r = srv.post("/v1/completions", {"model": BASE, "prompt": prompt, "max_tokens": 1, "echo": True,
                                     "logprobs": 20, "stream": True}, stream=True, timeout=300)
    assert r.status_code == 200, r.text[:300]
    events = [line[len(b"data: "):] for line in r.iter_lines(chunk_size=1 << 16)
              if line.startswith(b"data: ")]
    assert events[-1] == b"[DONE]"
    first = json.loads(events[0])["choices"][0]
    assert len(events[0]) > 2 << 20, len(events[0])
    assert len(first["logprobs"]["tokens"]) >= 12000
    assert first["logprobs"]["token_logprobs"][0] is None
    # (alternatives whose text is the same, such as bytes that decode to U+FFFD, share a key)
    tops = first["logprobs"]["top_logprobs"][1:12000]
    assert all(1 <= len(t) <= 21 for t in tops) and max(len(t) for t in tops) >= 15


def _token_id_names(ids):
    return [f"token_id:{i}" for i in ids]


@pytest.mark.parametrize("stream", [False, True])
def test_return_tokens_as_token_ids_completions(server, stream):
    # vLLM's return_tokens_as_token_ids: tokens, top_logprobs keys and the echoed prompt named
    # "token_id:N" (text_offset counting the names), the text and prompt_logprobs unchanged.
    body = {"model": BASE, "prompt": [72, 105, 32], "max_tokens": 6, "temperature": 0,
            "ignore_eos": True, "logprobs": 2, "echo": True, "return_token_ids": True,
            "return_tokens_as_token_ids": True, "stream": stream}
    if not stream:
        body["prompt_logprobs"] = 1
    plain = server.post("/v1/completions", {**body, "return_tokens_as_token_ids": None,
                                            "stream": False}).json()["choices"][0]
    r = server.post("/v1/completions", body, stream=stream)
    assert r.status_code == 200, r.text
    if stream:
        chunks = [json.loads(line[6:]) for line in r.content.decode().split("\n\n")
                  if line.startswith("data: {")]
        text, ids, tokens, tops, offsets = "", [], [], [], []
        for ch in chunks:
            for c in ch["choices"]:
                text += c["text"]
                ids += c.get("token_ids") or []
                if c.get("logprobs"):
                    tokens += c["logprobs"]["tokens"]
                    tops += c["logprobs"]["top_logprobs"]
                    offsets += c["logprobs"]["text_offset"]
    else:
        c = r.json()["choices"][0]
        text, ids = c["text"], c["token_ids"]
        tokens, tops = c["logprobs"]["tokens"], c["logprobs"]["top_logprobs"]
        offsets = c["logprobs"]["text_offset"]
        assert c["prompt_logprobs"] == plain["prompt_logprobs"]  # decoded_token unchanged
        assert c["prompt_logprobs"][1]["105"]["decoded_token"] == "i"
    assert text == plain["text"]
    assert tokens == _token_id_names([72, 105, 32] + ids)
    assert tops[0] is None
    for tok, top in zip(tokens[1:], tops[1:]):
        assert all(k.startswith("token_id:") for k in top), top
        assert tok in top
    expect, at = [], 0
    for tok in tokens:
        expect.append(at)
        at += len(tok)
    assert offsets == expect


@pytest.mark.parametrize("stream", [False, True])
def test_return_tokens_as_token_ids_chat(server, stream):
    kw = dict(model=BASE, messages=[{"role": "user", "content": "Say something"}], max_tokens=6,
              temperature=0, logprobs=True, top_logprobs=3,
              extra_body={"ignore_eos": True, "return_token_ids": True,
                          "return_tokens_as_token_ids": True})
    if stream:
        content, ids = [], []
        for ch in server.client().chat.completions.create(stream=True, **kw):
            for c in ch.choices:
                ids += getattr(c, "token_ids", None) or []
                if c.logprobs:
                    content += c.logprobs.content
    else:
        c = server.client().chat.completions.create(**kw).choices[0]
        content, ids = c.logprobs.content, c.token_ids
    assert [e.token for e in content] == _token_id_names(ids)
    for e, i in zip(content, ids):
        # As vLLM: the chosen token's bytes stay its text's, the alternatives' are their names'.
        if printable(i):
            assert e.bytes == list(chr(i).encode()), (e, i)
        assert len(e.top_logprobs) == 3
        for t in e.top_logprobs:
            assert t.token.startswith("token_id:") and t.bytes == list(t.token.encode()), t


def test_return_tokens_as_token_ids_server_flag(start_server, llama_dir):
    srv = start_server(llama_dir, ["--return-tokens-as-token-ids"])
    body = {"model": BASE, "prompt": "Hi", "max_tokens": 2, "logprobs": 1, "temperature": 0,
            "return_token_ids": True}
    c = srv.post("/v1/completions", body).json()["choices"][0]
    assert c["logprobs"]["tokens"] == _token_id_names(c["token_ids"])
    c = srv.post("/v1/completions", {**body, "return_tokens_as_token_ids": False}).json()
    assert not c["choices"][0]["logprobs"]["tokens"][0].startswith("token_id:")
