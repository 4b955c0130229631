"""Chat and completions through the official openai client: usage, streaming, n, max_tokens,
seeds, sampling fields and chat templates (stop strings and stop tokens: test_stop.py; log-probs
and echo: test_logprobs.py)."""

import json

import openai
import pytest
import requests

from conftest import (BASE, EOS, FIXTURES, MAX_MODEL_LEN, PROMPTS, chat_prompt_bytes, complete,
                      greedy_long, printable)


# ---- completions --------------------------------------------------------------------------------

def test_completion_usage_and_token_ids(server):
    prompt = "Hello world"
    r = complete(server, BASE, prompt, max_tokens=12)
    c = r.choices[0]
    assert r.object == "text_completion"
    assert r.model == BASE
    assert c.index == 0
    # The byte-level tokenizer has no merges and no BOS: one token per byte.
    assert c.prompt_token_ids == list(prompt.encode())
    assert r.usage.prompt_tokens == len(prompt.encode())
    assert r.usage.completion_tokens == len(c.token_ids)
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    assert c.finish_reason in ("stop", "length")
    if c.finish_reason == "length":
        assert len(c.token_ids) == 12
    else:
        assert c.token_ids[-1] == EOS and len(c.token_ids) <= 12
    # The text is the decoding of the tokens (EOS is not text).
    ids = [t for t in c.token_ids if t != EOS]
    assert c.text == bytes(ids).decode("utf-8", "replace"), (c.text, ids)


def test_completion_prompt_as_token_ids(server):
    prompt = "The quick brown fox"
    a = complete(server, BASE, prompt, max_tokens=10).choices[0]
    b = complete(server, BASE, list(prompt.encode()), max_tokens=10).choices[0]
    assert b.prompt_token_ids == list(prompt.encode())
    assert a.token_ids == b.token_ids and a.text == b.text


def test_response_id_follows_x_request_id(server):
    # vLLM: cmpl-/chatcmpl- + the client's X-Request-Id; an unusable one gets a random id.
    c = server.client()
    r = c.completions.create(model=BASE, prompt="x", max_tokens=1,
                             extra_headers={"X-Request-Id": "trace-42"})
    assert r.id == "cmpl-trace-42"
    r = c.chat.completions.create(model=BASE, messages=[{"role": "user", "content": "x"}],
                                  max_tokens=1, extra_headers={"X-Request-Id": "trace-43"})
    assert r.id == "chatcmpl-trace-43"
    r = c.completions.create(model=BASE, prompt="x", max_tokens=1,
                             extra_headers={"X-Request-Id": "has space"})
    assert r.id.startswith("cmpl-") and "space" not in r.id
    # vLLM's body field request_id names it when no header does; the header wins over it.
    r = c.chat.completions.create(model=BASE, messages=[{"role": "user", "content": "x"}],
                                  max_tokens=1, extra_body={"request_id": "body-7"})
    assert r.id == "chatcmpl-body-7"
    r = c.completions.create(model=BASE, prompt="x", max_tokens=1, extra_body={"request_id": "b"},
                             extra_headers={"X-Request-Id": "h"})
    assert r.id == "cmpl-h"
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model=BASE, prompt="x", max_tokens=1, extra_body={"request_id": "a b"})
    assert e.value.body["param"] == "request_id"


def test_completion_greedy_is_deterministic(server):
    a = complete(server, BASE, PROMPTS[2], max_tokens=20, extra_body={"ignore_eos": True})
    b = complete(server, BASE, PROMPTS[2], max_tokens=20, extra_body={"ignore_eos": True})
    assert a.choices[0].token_ids == b.choices[0].token_ids


def test_completion_stream_equals_non_stream(server):
    for prompt in PROMPTS[:2]:
        full = complete(server, BASE, prompt, max_tokens=20, extra_body={"ignore_eos": True})
        stream = server.client().completions.create(
            model=BASE, prompt=prompt, max_tokens=20, temperature=0, stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True, "return_token_ids": True})
        text, ids, finish, usage, n_usage_chunks = "", [], None, None, 0
        chunks = list(stream)
        # vLLM: the prompt's ids in the choice's first chunk only.
        firsts = [getattr(c, "prompt_token_ids", None) for ch in chunks for c in ch.choices]
        assert firsts[0] == list(prompt.encode()) and not any(firsts[1:]), firsts[:3]
        for i, ch in enumerate(chunks):
            assert ch.object == "text_completion"
            if ch.usage is not None:
                n_usage_chunks += 1
                assert ch.choices == [], "the usage chunk has no choices"
                assert i == len(chunks) - 1, "the usage chunk is the last one"
                usage = ch.usage
                continue
            for c in ch.choices:
                assert c.index == 0
                text += c.text
                ids += c.token_ids or []
                if c.finish_reason:
                    finish = c.finish_reason
        assert n_usage_chunks == 1
        assert text == full.choices[0].text
        assert ids == full.choices[0].token_ids
        assert finish == full.choices[0].finish_reason == "length"
        assert usage.prompt_tokens == len(prompt.encode())
        assert usage.completion_tokens == 20
        assert usage.total_tokens == usage.prompt_tokens + 20


def test_completion_stream_without_include_usage_has_no_usage(server):
    stream = server.client().completions.create(model=BASE, prompt="abc", max_tokens=5,
                                                temperature=0, stream=True)
    chunks = list(stream)
    assert chunks
    assert all(getattr(c, "usage", None) is None for c in chunks)


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
@pytest.mark.parametrize("options", [{}, {"include_usage": None}, {"include_usage": False},
                                     {"continuous_usage_stats": True},
                                     {"include_usage": False, "continuous_usage_stats": True}])
def test_stream_options_without_include_usage_has_no_usage(server, path, options):
    # vLLM 0.32: include_usage defaults to false, and continuous_usage_stats acts only with it
    # (should_include_usage): no usage chunk (choices: []), no usage on any chunk.
    body = {"model": BASE, "max_tokens": 4, "temperature": 0, "stream": True,
            "stream_options": options, "ignore_eos": True}
    if path.endswith("chat/completions"):
        body["messages"] = [{"role": "user", "content": "abc"}]
    else:
        body["prompt"] = "abc"
    r = requests.post(server.url + path, json=body, timeout=60)
    assert r.status_code == 200, r.text
    events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
    assert events and all(e["choices"] for e in events), events
    assert all(e.get("usage") is None for e in events), events
    assert r.text.endswith("data: [DONE]\n\n"), r.text[-200:]


def test_max_tokens_gives_length(server):
    r = complete(server, BASE, "abc", max_tokens=5, extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 5 == len(r.choices[0].token_ids)


def test_n_two_choices(server):
    r = server.client().completions.create(model=BASE, prompt="Hello", max_tokens=8, n=2,
                                           temperature=1.0, seed=7,
                                           extra_body={"return_token_ids": True, "ignore_eos": True})
    assert sorted(c.index for c in r.choices) == [0, 1]
    assert r.usage.completion_tokens == sum(len(c.token_ids) for c in r.choices) == 16
    assert r.usage.prompt_tokens == len(b"Hello")  # the prompt counts once
    # Streaming: both indices appear and each finishes.
    stream = server.client().completions.create(model=BASE, prompt="Hello", max_tokens=8, n=2,
                                                temperature=1.0, seed=7, stream=True,
                                                extra_body={"return_token_ids": True,
                                                            "ignore_eos": True})
    ids = {0: [], 1: []}
    finished = {}
    for ch in stream:
        for c in ch.choices:
            ids[c.index] += c.token_ids or []
            if c.finish_reason:
                finished[c.index] = c.finish_reason
    assert finished == {0: "length", 1: "length"}
    # Same seed, same parameters: the same two choices as the non-streaming request.
    assert {tuple(v) for v in ids.values()} == {tuple(c.token_ids) for c in r.choices}


def test_seed_reproducible_with_temperature(server):
    def run(seed):
        r = complete(server, BASE, "Once upon", max_tokens=24, temperature=1.0, seed=seed,
                     extra_body={"ignore_eos": True})
        return r.choices[0].token_ids

    a, b = run(1234), run(1234)
    assert a == b, "same seed, same parameters must give the same tokens"
    others = [run(s) for s in (1, 2, 3)]
    assert any(o != a for o in others), "different seeds never changed the output: seed ignored?"
    greedy = complete(server, BASE, "Once upon", max_tokens=24,
                      extra_body={"ignore_eos": True}).choices[0].token_ids
    assert any(o != greedy for o in others + [a]), "temperature 1 samples equal greedy"


# ---- chat ---------------------------------------------------------------------------------------

def test_chat_usage_and_prompt(server):
    content = "What is two plus two?"
    r = server.client().chat.completions.create(
        model=BASE, messages=[{"role": "user", "content": content}], max_tokens=12, temperature=0,
        extra_body={"return_token_ids": True, "ignore_eos": True})
    c = r.choices[0]
    assert r.object == "chat.completion"
    assert c.message.role == "assistant"
    assert c.prompt_token_ids == list(chat_prompt_bytes(content))
    assert r.usage.prompt_tokens == len(chat_prompt_bytes(content))
    assert r.usage.completion_tokens == 12 == len(c.token_ids)
    assert r.usage.total_tokens == r.usage.prompt_tokens + 12
    assert c.finish_reason == "length"
    # The same prompt as a completion gives the same tokens.
    p = complete(server, BASE, chat_prompt_bytes(content).decode(), max_tokens=12,
                 extra_body={"ignore_eos": True}).choices[0]
    assert p.token_ids == c.token_ids
    assert p.text == c.message.content


def test_chat_max_completion_tokens(server):
    r = server.client().chat.completions.create(
        model=BASE, messages=[{"role": "user", "content": "hi"}], max_completion_tokens=3,
        temperature=0, extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 3 and r.choices[0].finish_reason == "length"


def test_chat_stream_equals_non_stream(server):
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}]
    full = server.client().chat.completions.create(model=BASE, messages=msgs, max_tokens=16,
                                                   temperature=0,
                                                   extra_body={"ignore_eos": True,
                                                               "return_token_ids": True})
    # vLLM puts a chat's prompt ids beside the choices (loom also in each choice).
    assert full.prompt_token_ids == full.choices[0].prompt_token_ids
    chunks = list(server.client().chat.completions.create(
        model=BASE, messages=msgs, max_tokens=16, temperature=0, stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True, "return_token_ids": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    # vLLM: the prompt's ids beside the role chunk's choices, on no other chunk.
    ids = [getattr(c, "prompt_token_ids", None) for c in chunks]
    assert ids[0] == full.prompt_token_ids and not any(ids[1:]), ids[:2]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert text == full.choices[0].message.content
    assert finish == ["length"]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.prompt_tokens == full.usage.prompt_tokens
    assert chunks[-1].usage.completion_tokens == 16
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert len({c.id for c in chunks}) == 1


def test_chat_stream_finish_delta_carries_empty_content(server):
    # vLLM 0.32 (no reasoning or tool parser) sends DeltaMessage(content=delta_text) on every
    # chunk: the finish chunk of a choice whose last token adds no text (a stop token id, EOS)
    # has "delta": {"content": ""}, where loom sent {} (openai-SDK users got None).
    msgs = [{"role": "user", "content": "Hello"}]
    ids = server.post("/v1/chat/completions", {
        "model": BASE, "messages": msgs, "max_tokens": 8, "temperature": 0, "ignore_eos": True,
        "return_token_ids": True}).json()["choices"][0]["token_ids"]
    stop = next(t for k, t in enumerate(ids) if k > 0 and t not in ids[:k])
    r = server.post("/v1/chat/completions", {
        "model": BASE, "messages": msgs, "max_tokens": 8, "temperature": 0, "stream": True,
        "ignore_eos": True, "stop_token_ids": [stop]})
    assert r.status_code == 200, r.text
    chunks = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
    choices = [c["choices"][0] for c in chunks]
    assert choices[-1]["finish_reason"] == "stop" and choices[-1]["stop_reason"] == stop, choices
    assert choices[-1]["delta"] == {"content": ""}, choices[-1]
    assert all(isinstance(c["delta"].get("content"), str) for c in choices), choices


def test_chat_n_two(server):
    r = server.client().chat.completions.create(
        model=BASE, messages=[{"role": "user", "content": "hi"}], max_tokens=6, n=2,
        temperature=1.0, seed=3, extra_body={"ignore_eos": True})
    assert sorted(c.index for c in r.choices) == [0, 1]
    assert r.usage.completion_tokens == 12


def test_chat_stop_string(server):
    content = "Tell me"
    full = server.client().chat.completions.create(
        model=BASE, messages=[{"role": "user", "content": content}], max_tokens=40,
        temperature=0, extra_body={"ignore_eos": True, "return_token_ids": True}).choices[0]
    ids = full.token_ids
    ks = [k for k in range(2, len(ids)) if printable(ids[k])
          and chr(ids[k]) not in bytes(ids[:k]).decode("utf-8", "replace")]
    if not ks:
        pytest.fail("no ASCII stop candidate in this greedy output (the fixture is deterministic)")
    k = ks[0]
    stop = chr(ids[k])
    r = server.client().chat.completions.create(
        model=BASE, messages=[{"role": "user", "content": content}], max_tokens=40,
        temperature=0, stop=stop, extra_body={"ignore_eos": True}).choices[0]
    assert r.finish_reason == "stop"
    assert r.message.content == full.message.content[:full.message.content.index(stop)]


# ---- more sampling fields -----------------------------------------------------------------------

def test_default_max_tokens_is_16_for_completions(server):
    r = server.post("/v1/completions", {"model": BASE, "prompt": "abc", "ignore_eos": True,
                                        "temperature": 0})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 16


def test_prompt_list_gives_a_choice_per_prompt(server):
    prompts = ["first", "second one"]
    # Seeded samples (greedy takes n = 1 only, as vLLM): choice j of each prompt uses seed + j.
    r = server.client().completions.create(model=BASE, prompt=prompts, max_tokens=4, n=2,
                                           temperature=1.0, seed=5,
                                           extra_body={"ignore_eos": True,
                                                       "return_token_ids": True})
    assert [c.index for c in r.choices] == [0, 1, 2, 3]
    assert [c.prompt_token_ids for c in r.choices] == [list(b"first")] * 2 + \
        [list(b"second one")] * 2
    # Each choice equals the single-prompt request with its seed.
    for i, p in enumerate(prompts):
        for j in range(2):
            single = complete(server, BASE, p, max_tokens=4, temperature=1.0, seed=5 + j,
                              extra_body={"ignore_eos": True})
            assert r.choices[2 * i + j].token_ids == single.choices[0].token_ids, (i, j)
    assert r.usage.prompt_tokens == len(b"first") + len(b"second one")
    assert r.usage.completion_tokens == 16


def test_top_k_one_is_greedy(server):
    greedy = complete(server, BASE, "Once upon", max_tokens=16,
                      extra_body={"ignore_eos": True}).choices[0].token_ids
    for seed in (1, 2):
        r = complete(server, BASE, "Once upon", max_tokens=16, temperature=1.0, seed=seed,
                     extra_body={"ignore_eos": True, "top_k": 1})
        assert r.choices[0].token_ids == greedy


@pytest.mark.parametrize("temperature", [-0.5, -100])
def test_temperature_at_or_below_zero_is_greedy(server, temperature):
    # SPEC-api: temperature <= 0 is greedy (vLLM and OpenAI refuse a negative one).
    greedy = complete(server, BASE, "Once upon", max_tokens=16,
                      extra_body={"ignore_eos": True}).choices[0].token_ids
    for seed in (1, 2):
        r = complete(server, BASE, "Once upon", max_tokens=16, temperature=temperature, seed=seed,
                     extra_body={"ignore_eos": True})
        assert r.choices[0].token_ids == greedy


@pytest.mark.parametrize("field,value", [("presence_penalty", 2.0), ("frequency_penalty", 2.0),
                                         ("repetition_penalty", 2.0)])
def test_penalties_are_honoured(server, field, value):
    # No field is dropped silently: a strong penalty changes a greedy 64-token run.
    changed = False
    for prompt in PROMPTS[:3]:
        plain = complete(server, BASE, prompt, max_tokens=64,
                         extra_body={"ignore_eos": True}).choices[0].token_ids
        kw = {field: value} if field != "repetition_penalty" else {}
        extra = {"ignore_eos": True}
        if field == "repetition_penalty":
            extra[field] = value
        pen = complete(server, BASE, prompt, max_tokens=64, extra_body=extra, **kw)
        if pen.choices[0].token_ids != plain:
            changed = True
            break
    assert changed, f"{field}={value} never changed the output"


# ---- logit_bias and min_tokens (vLLM's semantics) -----------------------------------------------

def test_logit_bias_moves_greedy_and_leaves_logprobs_raw(server):
    prompt = PROMPTS[0]
    plain = complete(server, BASE, prompt, max_tokens=6, logprobs=2,
                     extra_body={"ignore_eos": True}).choices[0]
    first = plain.token_ids[0]
    # -100 on the greedy first token: the first token is then the raw runner-up, and its
    # reported log-prob is the raw one (the unbiased run's second entry).
    r = complete(server, BASE, prompt, max_tokens=1, logprobs=2,
                 logit_bias={str(first): -100}, extra_body={"ignore_eos": True}).choices[0]
    runner_up, runner_up_lp = sorted(plain.logprobs.top_logprobs[0].items(),
                                     key=lambda kv: -kv[1])[1]
    assert r.token_ids[0] != first
    assert r.logprobs.tokens[0] == runner_up, (r.logprobs.tokens, plain.logprobs.top_logprobs[0])
    assert r.logprobs.token_logprobs[0] == pytest.approx(runner_up_lp, abs=1e-6)
    assert r.logprobs.top_logprobs[0] == pytest.approx(plain.logprobs.top_logprobs[0], abs=1e-6), \
        "top log-probs are those of the raw logits"
    # +100 on one token makes it every greedy token; the chat route takes the same field.
    z = ord("Z")
    r = complete(server, BASE, prompt, max_tokens=8, logit_bias={str(z): 100},
                 extra_body={"ignore_eos": True}).choices[0]
    assert r.token_ids == [z] * 8 and r.text == "Z" * 8
    c = server.client().chat.completions.create(
        model=BASE, messages=[{"role": "user", "content": prompt}], max_tokens=5, temperature=0,
        logit_bias={str(z): 100}, extra_body={"ignore_eos": True})
    assert c.choices[0].message.content == "Z" * 5


@pytest.mark.parametrize("stream", [False, True], ids=["full", "stream"])
def test_min_tokens_holds_back_eos(server, stream):
    # EOS favoured by +100: without min_tokens it is the first token; with min_tokens 3 it is the
    # fourth, the first three being the greedy tokens with EOS masked (ignore_eos is off).
    bias = {str(EOS): 100}
    r = complete(server, BASE, PROMPTS[1], max_tokens=10, logit_bias=bias).choices[0]
    assert r.token_ids == [EOS] and r.finish_reason == "stop"
    masked = complete(server, BASE, PROMPTS[1], max_tokens=3,
                      logit_bias={str(EOS): -100}).choices[0]
    if stream:
        ids, text, finish = [], "", None
        for ch in server.client().completions.create(
                model=BASE, prompt=PROMPTS[1], max_tokens=10, temperature=0, logit_bias=bias,
                stream=True, extra_body={"min_tokens": 3, "return_token_ids": True}):
            for x in ch.choices:
                ids += x.token_ids or []
                text += x.text
                finish = x.finish_reason or finish
    else:
        c = complete(server, BASE, PROMPTS[1], max_tokens=10, logit_bias=bias,
                     extra_body={"min_tokens": 3}).choices[0]
        ids, text, finish = c.token_ids, c.text, c.finish_reason
    assert ids == masked.token_ids + [EOS], (ids, masked.token_ids)
    assert finish == "stop"
    assert text == masked.text


def test_min_tokens_holds_back_stop_token_ids_and_strings(server):
    prompt = PROMPTS[1]
    full = greedy_long(server, prompt, 32)
    ids = full.token_ids
    # A printable token first at index j ≥ 1 that occurs again at k > j.
    j, k = next((j, k) for j in range(1, len(ids)) for k in range(j + 1, len(ids))
                if printable(ids[j]) and ids[j] not in ids[:j] and ids[k] == ids[j])
    # As a stop string: checked only from token j + 2 on with min_tokens j + 1, so the text
    # runs to its second occurrence.
    stop = chr(ids[j])
    r = complete(server, BASE, prompt, max_tokens=32, stop=[stop],
                 extra_body={"ignore_eos": True, "min_tokens": j + 1}).choices[0]
    assert r.finish_reason == "stop" and r.stop_reason == stop
    assert r.text == bytes(ids[:k]).decode("utf-8", "replace"), (r.text, ids[:k + 1])
    # As a stop token: masked for the first j + 1 tokens, so token j is the raw runner-up there.
    plain = complete(server, BASE, prompt, max_tokens=j + 1, logprobs=2,
                     extra_body={"ignore_eos": True}).choices[0]
    runner_up = sorted(plain.logprobs.top_logprobs[j].items(), key=lambda kv: -kv[1])[1][0]
    r = complete(server, BASE, prompt, max_tokens=32, logprobs=1,
                 extra_body={"ignore_eos": True, "min_tokens": j + 1,
                             "stop_token_ids": [ids[j]]}).choices[0]
    assert r.token_ids[:j] == ids[:j]
    assert r.logprobs.tokens[j] == runner_up
    assert ids[j] not in r.token_ids[:j + 1]
    assert r.finish_reason == "length" or r.token_ids[-1] == ids[j]


def test_user_field_accepted(server):
    r = complete(server, BASE, "x", max_tokens=2, user="someone")
    assert r.usage.completion_tokens >= 1


def test_openai_fields_without_effect_are_accepted(server):
    # What SDKs and agent frameworks send that means nothing to a self-hosted server (stored
    # completions, tags, tier, cache key, end-user ids) or asks for nothing (null, text only):
    # accepted, and the answer is the one without them (greedy).
    msgs = [{"role": "user", "content": "Hi there"}]
    plain = server.client().chat.completions.create(model=BASE, messages=msgs, max_tokens=6,
                                                    temperature=0)
    extra = server.client().chat.completions.create(
        model=BASE, messages=msgs, max_tokens=6, temperature=0, store=True,
        metadata={"team": "a"}, service_tier="auto", user="u1", modalities=["text"],
        extra_body={"prompt_cache_key": "k", "safety_identifier": "s", "functions": None,
                    "function_call": "none", "audio": None, "prediction": None,
                    "web_search_options": None, "reasoning_effort": "low", "verbosity": "medium"})
    assert extra.choices[0].message.content == plain.choices[0].message.content


def test_full_responses_carry_vllms_null_fields(server):
    # vLLM dumps every field of its response models, null where unset; clients written against
    # it read them (message.tool_calls as a list, choice.token_ids, kv_transfer_params ...).
    import requests
    chat = requests.post(server.url + "/v1/chat/completions", json={
        "model": BASE, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3},
        timeout=60).json()
    assert list(chat) == ["id", "object", "created", "model", "choices", "service_tier",
                          "system_fingerprint", "usage", "prompt_logprobs", "prompt_token_ids",
                          "kv_transfer_params"], chat
    assert all(chat[k] is None for k in ("service_tier", "system_fingerprint", "prompt_logprobs",
                                         "prompt_token_ids", "kv_transfer_params"))
    assert chat["usage"]["prompt_tokens_details"] is None
    c = chat["choices"][0]
    assert list(c) == ["index", "message", "logprobs", "finish_reason", "stop_reason", "token_ids"]
    assert c["token_ids"] is None
    m = c["message"]
    assert m["tool_calls"] == [] and m["role"] == "assistant" and isinstance(m["content"], str)
    assert all(m[k] is None for k in ("refusal", "annotations", "audio", "function_call",
                                      "reasoning", "reasoning_content"))
    comp = requests.post(server.url + "/v1/completions", json={
        "model": BASE, "prompt": "Hi", "max_tokens": 3}, timeout=60).json()
    assert list(comp) == ["id", "object", "created", "model", "choices", "service_tier",
                          "system_fingerprint", "usage", "kv_transfer_params"], comp
    c = comp["choices"][0]
    assert list(c) == ["index", "text", "logprobs", "finish_reason", "stop_reason", "token_ids",
                       "prompt_logprobs", "prompt_token_ids"]
    assert c["token_ids"] is None and c["prompt_logprobs"] is None and c["prompt_token_ids"] is None
    # Asked for, they carry their values (the prompt's ids are its bytes for this tokenizer).
    asked = requests.post(server.url + "/v1/completions", json={
        "model": BASE, "prompt": "Hi", "max_tokens": 3, "return_token_ids": True,
        "prompt_logprobs": 1}, timeout=60).json()["choices"][0]
    assert asked["prompt_token_ids"] == list(b"Hi") and len(asked["token_ids"]) >= 1
    assert asked["prompt_logprobs"][0] is None and len(asked["prompt_logprobs"]) == 2


def test_content_type_with_charset(server):
    import requests
    r = requests.post(server.url + "/v1/completions",
                      data='{"model": "llama", "prompt": "x", "max_tokens": 2}',
                      headers={"Content-Type": "application/json; charset=utf-8"}, timeout=30)
    assert r.status_code == 200, r.text


def test_a_refused_prompt_list_runs_nothing(server):
    # Review finding: prompts were validated as they were queued, so when the second of two
    # prompts was refused (400) the first one's n sequences had run and counted as aborted.
    aborts = server.metric("vllm:request_success_total", finished_reason="abort")
    e2e = server.metric("vllm:e2e_request_latency_seconds_count")
    # The long prompt fits, but leaves room for 4 tokens: fewer than min_tokens.
    long = [(3 + i) % 250 for i in range(MAX_MODEL_LEN - 4)]
    r = server.post("/v1/completions", {"model": BASE, "prompt": ["Hi", long], "n": 4,
                                        "max_tokens": 20, "min_tokens": 10})
    assert r.status_code == 400 and r.json()["error"]["param"] == "min_tokens", r.text
    # The old code's aborts were counted as the engine thread got to them: a request sent after
    # is a barrier (the engine takes its inbox in order), whatever the machine's speed.
    complete(server, BASE, "Hi", max_tokens=1)
    assert server.metric("vllm:request_success_total", finished_reason="abort") == aborts
    assert server.metric("vllm:e2e_request_latency_seconds_count") == e2e + 1


def test_empty_prompt_is_400(server):
    r = server.post("/v1/completions", {"model": BASE, "prompt": "", "max_tokens": 2})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "prompt"


def test_unicode_prompt_usage(server):
    prompt = "héllo 世界 🙂"
    r = complete(server, BASE, prompt, max_tokens=3)
    assert r.usage.prompt_tokens == len(prompt.encode())
    assert r.choices[0].prompt_token_ids == list(prompt.encode())


@pytest.mark.parametrize("messages,rendered", [
    ([{"role": "developer", "content": "be nice"}, {"role": "user", "content": "x"}],
     "<|system|>be nice\n<|user|>x\n<|assistant|>"),
    ([{"role": "system", "content": "A"}, {"role": "developer", "content": "B"},
      {"role": "user", "content": "x"}],
     "<|system|>A\n\nB\n<|user|>x\n<|assistant|>"),
    ([{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"},
      {"role": "developer", "content": [{"type": "text", "text": "p"},
                                        {"type": "text", "text": "q"}]},
      {"role": "system", "content": ""}, {"role": "user", "content": "z"}],
     "<|system|>p\nq\n<|user|>x\n<|assistant|>y\n<|user|>z\n<|assistant|>"),
    # No developer message: several system messages stay where they are.
    ([{"role": "user", "content": "x"}, {"role": "system", "content": "A"}],
     "<|user|>x\n<|system|>A\n<|assistant|>"),
], ids=["alone", "after_system", "later_parts", "no_developer"])
def test_developer_role_becomes_system(server, messages, rendered):
    # vLLM 0.32 (renderers/hf.py): the tiny model's template does not name "developer", so
    # developer messages become system ones, and the system messages are merged at the front
    # ("\n\n"-joined) when one is not first or there are several; /tokenize renders the same.
    r = server.client().chat.completions.create(
        model=BASE, messages=messages, max_tokens=1,
        extra_body={"return_token_ids": True}).choices[0]
    assert bytes(r.prompt_token_ids) == rendered.encode(), bytes(r.prompt_token_ids)
    t = server.post("/tokenize", {"model": BASE, "messages": messages})
    assert t.status_code == 200 and bytes(t.json()["tokens"]) == rendered.encode(), t.text


def test_chat_content_parts_equal_string(server):
    # vLLM, for a template that prints content as a string: the text parts joined with "\n".
    kw = dict(model=BASE, max_tokens=8, temperature=0, extra_body={"ignore_eos": True,
                                                                    "return_token_ids": True})
    a = server.client().chat.completions.create(
        messages=[{"role": "user", "content": "part one, \npart two"}], **kw).choices[0]
    b = server.client().chat.completions.create(
        messages=[{"role": "user", "content": [{"type": "text", "text": "part one, "},
                                               {"type": "text", "text": "part two"}]}],
        **kw).choices[0]
    assert bytes(b.prompt_token_ids) == bytes(a.prompt_token_ids), \
        f"text parts rendered as {bytes(b.prompt_token_ids)!r}"
    assert b.token_ids == a.token_ids


def test_chat_stream_n_two(server):
    chunks = list(server.client().chat.completions.create(
        model=BASE, messages=[{"role": "user", "content": "hi"}], max_tokens=5, n=2,
        temperature=1.0, seed=9, stream=True, stream_options={"include_usage": True},
        extra_body={"ignore_eos": True}))
    roles = [c.choices[0].index for c in chunks if c.choices and c.choices[0].delta.role]
    assert sorted(roles) == [0, 1], "one role delta per choice"
    finished = sorted(c.choices[0].index for c in chunks
                      if c.choices and c.choices[0].finish_reason == "length")
    assert finished == [0, 1]
    assert chunks[-1].usage.completion_tokens == 10


def test_continuous_usage_stats(server):
    chunks = list(server.client().completions.create(
        model=BASE, prompt="abc", max_tokens=4, temperature=0, stream=True,
        stream_options={"include_usage": True, "continuous_usage_stats": True},
        extra_body={"ignore_eos": True}))
    with_choices = [c for c in chunks if c.choices]
    assert with_choices and all(c.usage is not None for c in with_choices)
    counts = [c.usage.completion_tokens for c in with_choices]
    assert counts == sorted(counts) and counts[-1] == 4
    assert all(c.usage.prompt_tokens == 3 for c in chunks)
    # Per choice and per prompt, as vLLM.
    chunks = list(server.client().completions.create(
        model=BASE, prompt=["abc", "defgh"], max_tokens=3, n=2, temperature=1.0, seed=1,
        stream=True, stream_options={"include_usage": True, "continuous_usage_stats": True},
        extra_body={"ignore_eos": True}))
    seen = {}
    for c in chunks:
        for ch in c.choices:
            seen.setdefault(ch.index, []).append(c.usage.completion_tokens)
            assert c.usage.prompt_tokens == (3 if ch.index < 2 else 5), (ch.index, c.usage)
    assert sorted(seen) == [0, 1, 2, 3] and all(v == [1, 2, 3] for v in seen.values()), seen
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 12


def _continue_final(rendered: str, final: str) -> str:
    # transformers' apply_chat_template(continue_final_message=True), verbatim in Python.
    loc = rendered.rindex(final.strip())
    if rendered[loc:loc + len(final.lstrip())] == final:
        return rendered[:loc + len(final.lstrip())]
    return rendered[:loc + len(final.strip())]


@pytest.mark.parametrize("final", ["Sure, here", "Sure, here  ", " Sure", "Sure\u00a0", "  ", [
    {"type": "text", "text": "Sure,"}, {"type": "text", "text": "here "}]],
    ids=["plain", "trailing_space", "leading_space", "unicode_space", "only_space", "text_parts"])
def test_continue_final_message(server, final):
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": final}]
    joined = final if isinstance(final, str) else "\n".join(p["text"] for p in final)
    rendered = f"<|user|>hi\n<|assistant|>{joined}\n"  # tiny_model's template
    r = server.client().chat.completions.create(
        model=BASE, messages=messages, max_tokens=2, temperature=0,
        extra_body={"return_token_ids": True, "continue_final_message": True,
                    "add_generation_prompt": False})
    assert r.choices[0].prompt_token_ids == list(_continue_final(rendered, joined).encode())
    assert r.choices[0].message.role == "assistant"


def test_role_without_a_generation_prompt_is_the_last_messages(server):
    # vLLM's get_chat_request_role: without add_generation_prompt the answer continues the last
    # message, and carries its role (streamed too).
    messages = [{"role": "user", "content": "hi"}]
    r = server.client().chat.completions.create(
        model=BASE, messages=messages, max_tokens=2, extra_body={"add_generation_prompt": False})
    assert r.choices[0].message.role == "user"
    chunks = list(server.client().chat.completions.create(
        model=BASE, messages=messages, max_tokens=2, stream=True,
        extra_body={"add_generation_prompt": False}))
    assert chunks[0].choices[0].delta.role == "user"


def test_the_top_level_fields_win_over_chat_template_kwargs(server):
    # vLLM 0.32 merges the request's add_generation_prompt / continue_final_message over
    # chat_template_kwargs (build_chat_params: merge_kwargs; they are booleans with defaults,
    # never None): the same keys in the kwargs have no effect, whatever their value.
    messages = [{"role": "user", "content": "hi"}]
    rendered = "<|user|>hi\n"  # tiny_model's template, without the generation prompt
    gen = list((rendered + "<|assistant|>").encode())

    def prompt_ids(msgs=messages, **extra):
        r = server.client().chat.completions.create(
            model=BASE, messages=msgs, max_tokens=1, temperature=0,
            extra_body=dict(return_token_ids=True, **extra))
        return r.choices[0].prompt_token_ids

    assert prompt_ids(add_generation_prompt=False) == list(rendered.encode())
    assert prompt_ids(chat_template_kwargs={"add_generation_prompt": False}) == gen
    assert prompt_ids(add_generation_prompt=True,
                      chat_template_kwargs={"add_generation_prompt": False}) == gen
    assert prompt_ids(add_generation_prompt=False,
                      chat_template_kwargs={"add_generation_prompt": True}) == \
        list(rendered.encode())
    assert prompt_ids(chat_template_kwargs={"add_generation_prompt": "yes"}) == gen
    # continue_final_message there does not continue the final message either (nor clash with
    # the request's add_generation_prompt).
    cont = messages + [{"role": "assistant", "content": "Sure"}]
    assert bytes(prompt_ids(cont, chat_template_kwargs={"continue_final_message": True})) == \
        b"<|user|>hi\n<|assistant|>Sure\n<|assistant|>"
    assert bytes(prompt_ids(cont, add_generation_prompt=False, continue_final_message=True,
                            chat_template_kwargs={"continue_final_message": False})) == \
        b"<|user|>hi\n<|assistant|>Sure"
    # /tokenize the same.
    t = server.post("/tokenize", {"model": BASE, "messages": messages,
                                  "chat_template_kwargs": {"add_generation_prompt": False}})
    assert t.status_code == 200 and t.json()["tokens"] == gen, t.text
    # Keys that would clash with the request's own are refused by name, and documents (not
    # rendered).
    for key, value in (("messages", []), ("tools", []), ("documents", [])):
        with pytest.raises(openai.BadRequestError) as e:
            prompt_ids(chat_template_kwargs={key: value})
        assert e.value.body["param"] == "chat_template_kwargs", e.value.body
        assert key in e.value.body["message"]


def test_completion_text_continues_the_prompt_as_vllm_detokenizes(llama_dir, tmp_path, start_server):
    # A SentencePiece tokenizer (TinyLlama's: Metaspace, ByteFallback, then Strip of the first
    # space): the generated text is what follows the prompt's text, as vLLM's primed
    # detokenizer gives it. Decoded alone, the first generated space was stripped (three spaces
    # for four <0x20> tokens; " Paris." came back "Paris."). Expected: HF tokenizers 0.23.3
    # DecodeStream stepped through the prompt ids [1, 75, 108], then four 35s: "    ".
    import shutil
    model = tmp_path / BASE  # served under the base name
    shutil.copytree(llama_dir, model)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(FIXTURES / "tokenizers" / "TinyLlama-1.1B-Chat-v1.0" / name, model / name)
    srv = start_server(model)
    kw = dict(model=BASE, prompt=[1, 75, 108], max_tokens=4, temperature=0,
              extra_body={"allowed_token_ids": [35]})
    client = srv.client()
    assert client.completions.create(**kw).choices[0].text == "    "
    streamed = "".join(c.choices[0].text for c in client.completions.create(stream=True, **kw)
                       if c.choices)
    assert streamed == "    "
    # A stop string inside a run of <0xNN> byte tokens (the detokenizer holds the run until it
    # ends): found on the token that completes it, as vLLM's detokenizer releases a valid run at
    # once. It was found only when the run ended, here at max_tokens: 20 tokens for one space.
    r = client.completions.create(**{**kw, "max_tokens": 20}, stop=[" "])
    assert (r.choices[0].text, r.choices[0].finish_reason, r.usage.completion_tokens) == ("", "stop", 1)
    r = client.completions.create(**{**kw, "max_tokens": 20}, stop=["  "])  # two spaces
    assert (r.choices[0].text, r.choices[0].finish_reason, r.usage.completion_tokens) == ("", "stop", 2)
