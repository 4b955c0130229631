"""Stop strings and stop tokens through the official openai client, as vLLM ends and cuts the
text: strings spanning tokens, include_stop_str_in_output, stop_token_ids, EOS, stop_reason,
and text held back for a stop string that never completes."""

import pytest

from conftest import BASE, EOS, PROMPTS, complete, greedy_long, printable


def _find_stop(server, width):
    """A (prompt, greedy choice, token index k, stop string) where the `width` tokens starting at
    k are printable ASCII, k ≥ 2, and the stop string does not occur earlier in the text."""
    for prompt in PROMPTS + ["abcdefgh", "zzz yyy www", "Hi!", "42"]:
        c = greedy_long(server, prompt)
        ids = c.token_ids
        for k in range(2, len(ids) - width):
            span = ids[k:k + width]
            if not all(printable(t) for t in span):
                continue
            stop = bytes(span).decode()
            at = c.text.find(stop)
            # Its first occurrence in the text must be these tokens.
            prefix_text = bytes([t for t in ids[:k] if t != EOS]).decode("utf-8", "replace")
            if at == len(prefix_text) and stop not in prefix_text:
                return prompt, c, k, stop
    pytest.fail(f"no greedy output had a {width}-character ASCII stop candidate")


@pytest.mark.parametrize("width", [1, 2], ids=["one_token", "two_tokens"])
@pytest.mark.parametrize("stream", [False, True], ids=["full", "stream"])
def test_stop_string(server, width, stream):
    prompt, full, k, stop = _find_stop(server, width)
    expected_text = full.text[:full.text.index(stop)]
    kw = dict(model=BASE, prompt=prompt, max_tokens=48, temperature=0, stop=[stop],
              extra_body={"ignore_eos": True, "return_token_ids": True})
    if not stream:
        c = server.client().completions.create(**kw).choices[0]
        text, ids, finish, stop_reason = c.text, c.token_ids, c.finish_reason, c.stop_reason
    else:
        text, ids, finish, stop_reason = "", [], None, None
        for ch in server.client().completions.create(stream=True, **kw):
            for c in ch.choices:
                text += c.text
                ids += c.token_ids or []
                if c.finish_reason:
                    finish, stop_reason = c.finish_reason, c.stop_reason
    assert finish == "stop", (stop, text)
    assert text == expected_text, f"stop {stop!r}: text must end right before it"
    assert stop_reason == stop
    # The tokens up to the one that completed the stop string (vLLM keeps them in token_ids).
    assert ids == full.token_ids[:k + width]


@pytest.mark.parametrize("stream", [False, True], ids=["full", "stream"])
def test_stop_string_completed_by_the_final_flush(server, stream):
    # The last token is an unfinished UTF-8 byte: only the flush at max_tokens turns it into
    # U+FFFD. A stop string completed there ends the sequence as "stop" with its stop_reason
    # (it was cut from the text but reported as "length" with stop_reason null).
    kw = dict(model=BASE, prompt="x", max_tokens=8, temperature=100,
              extra_body={"ignore_eos": True, "return_token_ids": True})
    for seed in range(300):
        c = server.client().completions.create(seed=seed, **kw).choices[0]
        if c.text.endswith("\ufffd") and c.text.count("\ufffd") == 1 and c.token_ids[-1] >= 0xC0:
            break
    else:
        pytest.fail("no seed gave a completion ending in one unfinished UTF-8 byte")
    if not stream:
        s = server.client().completions.create(seed=seed, stop=["\ufffd"], **kw).choices[0]
        text, finish, stop_reason = s.text, s.finish_reason, s.stop_reason
    else:
        text, finish, stop_reason = "", None, None
        for ch in server.client().completions.create(seed=seed, stop=["\ufffd"], stream=True, **kw):
            for ci in ch.choices:
                text += ci.text
                if ci.finish_reason:
                    finish, stop_reason = ci.finish_reason, ci.stop_reason
    assert text == c.text[:-1]
    assert (finish, stop_reason) == ("stop", "\ufffd")


def test_stop_string_include_in_output(server):
    prompt, full, k, stop = _find_stop(server, 2)
    r = complete(server, BASE, prompt, max_tokens=48, stop=stop,
                 extra_body={"ignore_eos": True, "include_stop_str_in_output": True})
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].text == full.text[:full.text.index(stop) + len(stop)]


def test_stop_token_ids(server):
    prompt = PROMPTS[1]
    full = greedy_long(server, prompt, 32)
    ids = full.token_ids
    # A printable token that first occurs at index k ≥ 2.
    k = next(i for i in range(2, len(ids)) if printable(ids[i]) and ids[i] not in ids[:i])
    r = complete(server, BASE, prompt, max_tokens=32,
                 extra_body={"ignore_eos": True, "stop_token_ids": [ids[k]]})
    c = r.choices[0]
    assert c.finish_reason == "stop"
    assert c.token_ids == ids[:k + 1], "generation ends at the stop token (kept in token_ids)"
    assert r.usage.completion_tokens == k + 1
    # As vLLM: the stop token's text is not in the output, and stop_reason is its id.
    problems = []
    if c.text != bytes(ids[:k]).decode("utf-8", "replace"):
        problems.append(f"text {c.text!r} includes the stop token {chr(ids[k])!r} (vLLM leaves "
                        f"it out unless include_stop_str_in_output)")
    if c.stop_reason != ids[k]:
        problems.append(f"stop_reason is {c.stop_reason!r}, vLLM gives the token id {ids[k]}")
    assert not problems, "; ".join(problems)


def test_stop_string_completed_by_a_stop_token_is_the_stop_reason(server):
    prompt = PROMPTS[1]
    full = greedy_long(server, prompt, 32)
    ids = full.token_ids
    k = next(i for i in range(2, len(ids)) if printable(ids[i]) and ids[i] not in ids[:i])
    r = complete(server, BASE, prompt, max_tokens=32, stop=[chr(ids[k])],
                 extra_body={"ignore_eos": True, "stop_token_ids": [ids[k]],
                             "include_stop_str_in_output": True})
    c = r.choices[0]
    assert c.finish_reason == "stop"
    assert c.token_ids == ids[:k + 1]
    assert c.text == bytes(ids[:k + 1]).decode("utf-8", "replace")
    # As vLLM's output processor: the stop string the detokenizer found replaces the token id.
    assert c.stop_reason == chr(ids[k]), f"stop_reason {c.stop_reason!r}"


@pytest.mark.parametrize("stream", [False, True], ids=["full", "stream"])
def test_eos_ends_with_stop(server, stream):
    # The tiny model samples EOS (id 2) within a few hundred tokens for most seeds.
    for seed in range(1, 9):
        r = complete(server, BASE, "Hi", max_tokens=300, temperature=1.0, seed=seed)
        c = r.choices[0]
        if c.finish_reason == "stop":
            break
    else:
        pytest.fail("no seed reached EOS in 300 tokens: the tiny model samples it for most seeds")
    assert c.token_ids[-1] == EOS and EOS not in c.token_ids[:-1]
    assert r.usage.completion_tokens == len(c.token_ids), "EOS counts as a generated token"
    # The tiny tokenizer has no eos_token: EOS comes from generation_config.json, and such an id
    # is reported in stop_reason (vLLM adds it to stop_token_ids; docs/API.md).
    assert c.stop_reason == EOS
    text = c.text
    if stream:
        text, finish, stop_reason = "", None, None
        for ch in server.client().completions.create(model=BASE, prompt="Hi", max_tokens=300,
                                                     temperature=1.0, seed=seed, stream=True):
            for x in ch.choices:
                text += x.text
                finish = x.finish_reason or finish
                stop_reason = getattr(x, "stop_reason", None) or stop_reason
        assert finish == "stop" and stop_reason == EOS
    # As vLLM: the EOS token that ends the sequence is not detokenized into the text.
    assert text == bytes(c.token_ids[:-1]).decode("utf-8", "replace"), \
        f"text ends with {text[-3:]!r}: the EOS token's text is in the output"


@pytest.mark.parametrize("stream", [False, True], ids=["full", "stream"])
def test_stop_prefix_at_the_end_is_released(server, stream):
    # The output ends with the first character of a stop string that never completes: the
    # held-back text must be released when the sequence ends at max_tokens.
    for prompt in PROMPTS:
        full = greedy_long(server, prompt, 20)
        if printable(full.token_ids[-1]):
            break
    else:
        pytest.fail("no greedy output ending in an ASCII character (the fixture is deterministic)")
    stop = chr(full.token_ids[-1]) + "\x01\x01never"
    kw = dict(model=BASE, prompt=prompt, max_tokens=20, temperature=0, stop=[stop],
              extra_body={"ignore_eos": True})
    if stream:
        text, finish = "", None
        for ch in server.client().completions.create(stream=True, **kw):
            for c in ch.choices:
                text += c.text
                finish = c.finish_reason or finish
    else:
        c = server.client().completions.create(**kw).choices[0]
        text, finish = c.text, c.finish_reason
    assert finish == "length"
    assert text == full.text
