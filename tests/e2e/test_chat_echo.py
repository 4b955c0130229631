"""Chat `echo` as vLLM: the last message's content leads each choice's content when its role is
the response's; `spaces_between_special_tokens` accepted (no effect on fast tokenizers, as vLLM)."""

import pytest

from conftest import BASE

CONTINUED = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Sure, here"}]
CONTINUE = {"continue_final_message": True, "add_generation_prompt": False}


def _chat(server, messages, echo, stream=False, n=1, **extra):
    """Each choice's content (streamed: its deltas joined) and the streamed chunks' choices.
    Greedy with one choice; several are seeded samples (greedy allows n = 1 only, as vLLM)."""
    body = dict(extra, echo=echo) if echo is not None else dict(extra)
    sampling = dict(temperature=0) if n == 1 else dict(temperature=1.0, seed=7)
    r = server.client().chat.completions.create(
        model=BASE, messages=messages, max_tokens=6, n=n, stream=stream, extra_body=body,
        **sampling)
    if not stream:
        return [c.message.content for c in sorted(r.choices, key=lambda c: c.index)], None
    texts, deltas = [""] * n, []
    for chunk in r:
        for c in chunk.choices:
            deltas.append((c.index, c.delta.role, c.delta.content))
            texts[c.index] += c.delta.content or ""
    return texts, deltas


@pytest.mark.parametrize("stream", [False, True], ids=["full", "stream"])
def test_echo_leads_with_the_continued_message(server, stream):
    plain, _ = _chat(server, CONTINUED, None, stream, n=2, **CONTINUE)
    echoed, deltas = _chat(server, CONTINUED, True, stream, n=2, **CONTINUE)
    assert plain[0] and plain[1]  # some text generated (seeded: the same both times)
    assert echoed == ["Sure, here" + t for t in plain], (echoed, plain)
    if stream:
        # vLLM's order: every choice's role chunk, then every choice's echo chunk, then tokens.
        assert deltas[:4] == [(0, "assistant", ""), (1, "assistant", ""),
                              (0, None, "Sure, here"), (1, None, "Sure, here")], deltas[:4]


@pytest.mark.parametrize("stream", [False, True], ids=["full", "stream"])
def test_echo_joins_text_parts_with_newlines(server, stream):
    parts = [{"type": "text", "text": "Sure,"}, {"type": "text", "text": "here"}]
    messages = [CONTINUED[0], {"role": "assistant", "content": parts}]
    plain, _ = _chat(server, messages, False, stream, **CONTINUE)
    echoed, _ = _chat(server, messages, True, stream, **CONTINUE)
    assert echoed == ["Sure,\nhere" + plain[0]]


def test_echo_needs_the_response_role(server):
    # With the generation prompt the answer is the assistant's and the last message the user's:
    # nothing is echoed (vLLM compares the roles).
    messages = [{"role": "user", "content": "hi"}]
    assert _chat(server, messages, True)[0] == _chat(server, messages, False)[0]
    # Without it the answer continues the user's message, in its role: that message is echoed.
    plain, _ = _chat(server, messages, None, add_generation_prompt=False)
    assert _chat(server, messages, True, add_generation_prompt=False)[0] == ["hi" + plain[0]]


@pytest.mark.parametrize("route", ["/v1/completions", "/v1/chat/completions"])
def test_spaces_between_special_tokens_is_accepted(server, route):
    body = {"model": BASE, "max_tokens": 3, "temperature": 0, "skip_special_tokens": False}
    if route == "/v1/completions":
        body["prompt"] = "hi"
    else:
        body["messages"] = [{"role": "user", "content": "hi"}]
    texts = []
    for spaces in (None, True, False):
        b = dict(body) if spaces is None else dict(body, spaces_between_special_tokens=spaces)
        r = server.post(route, b)
        assert r.status_code == 200, r.text
        c = r.json()["choices"][0]
        texts.append(c["text"] if "text" in c else c["message"]["content"])
    assert texts[0] == texts[1] == texts[2], texts
