"""vLLM's token constraints through the official openai client: allowed_token_ids, bad_words and
truncate_prompt_tokens (each compared with the unconstrained run of the same request)."""
import openai
import pytest

from conftest import BASE, EOS, MAX_MODEL_LEN, complete

PROMPTS = ["Hello world", "The quick brown fox", "Once upon a time, in a land", "0123456789 abc",
           "Lorem ipsum dolor sit amet", "tiny models say odd things", "abc def ghi jkl"]


def plain(server, prompt, n=24, **kw):
    return complete(server, BASE, prompt, max_tokens=n, extra_body={"ignore_eos": True}, **kw).choices[0]


def printable(t: str) -> bool:
    return len(t) == 1 and 0x20 <= ord(t) <= 0x7E  # the byte-level fixture: id = the byte


def second_and_third(server):
    """A prompt whose first position's 2nd and 3rd most likely tokens are printable, and the
    raw ranking there (best first)."""
    for p in PROMPTS:
        ref = plain(server, p, n=1, logprobs=5)
        ranked = sorted(ref.logprobs.top_logprobs[0].items(), key=lambda kv: -kv[1])
        if len(ranked) >= 3 and all(printable(t) for t, _ in ranked[1:3]):
            return p, ranked
    pytest.fail("no prompt with printable runner-ups")


def test_allowed_token_ids_pick_the_best_allowed_token_and_keep_raw_logprobs(server):
    p, ranked = second_and_third(server)
    allowed = [ord(t) for t, _ in ranked[1:3]]  # the 2nd and 3rd most likely
    r = complete(server, BASE, p, max_tokens=12, logprobs=1,
                 extra_body={"ignore_eos": True, "allowed_token_ids": allowed}).choices[0]
    assert all(t in allowed for t in r.token_ids), r.token_ids
    assert r.token_ids[0] == ord(ranked[1][0])  # greedy over the allowed ones
    # Log-probs are the raw ones (vLLM's raw_logprobs), not renormalised over the allowed set.
    assert r.logprobs.token_logprobs[0] == pytest.approx(ranked[1][1], abs=1e-5)
    # Sampled: only allowed tokens, on the chat route too.
    c = server.client().chat.completions.create(
        model=BASE, messages=[{"role": "user", "content": "hi"}], max_tokens=32, temperature=2.0,
        seed=3, extra_body={"ignore_eos": True, "allowed_token_ids": allowed,
                            "return_token_ids": True}).choices[0]
    assert len(c.token_ids) == 32 and set(c.token_ids) <= set(allowed), c.token_ids
    # Constraints that leave nothing to draw after the first token end the sequence ("stop"),
    # with what it has: no 500 (review finding).
    a = ord("A")
    r = complete(server, BASE, "x", max_tokens=5,
                 extra_body={"allowed_token_ids": [a], "bad_words": ["AA"], "ignore_eos": True})
    assert r.choices[0].token_ids == [a] and r.choices[0].finish_reason == "stop", r.choices[0]
    chunks = list(server.client().completions.create(
        model=BASE, prompt="x", max_tokens=5, stream=True,
        extra_body={"allowed_token_ids": [a], "bad_words": ["AA"], "ignore_eos": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == "A"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    for extra in ({"allowed_token_ids": []}, {"allowed_token_ids": [-1]},
                  {"allowed_token_ids": [256]}, {"allowed_token_ids": ["a"]},
                  # Nothing left to draw at the first step: refused up front, not a 500 later.
                  {"allowed_token_ids": [EOS], "min_tokens": 1},
                  {"allowed_token_ids": [ord("a")], "bad_words": ["a"]}):
        with pytest.raises(openai.BadRequestError) as e:
            complete(server, BASE, "x", extra_body=extra)
        assert e.value.body["param"] == "allowed_token_ids", (extra, e.value.body)


def first_printable_pair(server):
    """A prompt and its greedy tokens G with a position j where G[j] (not a space) and G[j + 1]
    are printable ASCII."""
    for p in PROMPTS:
        g = plain(server, p).token_ids
        for j in range(len(g) - 1):
            if 0x21 <= g[j] <= 0x7E and 0x20 <= g[j + 1] <= 0x7E:
                return p, g, j
    pytest.fail("no greedy continuation with two printable tokens in a row")


def test_bad_words_bar_a_word_once_the_rest_of_it_was_generated(server):
    p, g, j = first_printable_pair(server)
    a, b = g[j], g[j + 1]
    # A two-token word: the output follows G until its first token, then not its second.
    first = next(i for i in range(len(g) - 1) if g[i] == a and g[i + 1] == b)
    out = complete(server, BASE, p, max_tokens=24,
                   extra_body={"ignore_eos": True, "bad_words": [chr(a) + chr(b)]}).choices[0]
    assert out.token_ids[:first + 1] == g[:first + 1]
    assert out.token_ids[first + 1] != b
    assert all(not (x == a and y == b) for x, y in zip(out.token_ids, out.token_ids[1:]))
    # A one-token word (leading space stripped, as vLLM): never generated.
    k = g.index(a)
    out = complete(server, BASE, p, max_tokens=24,
                   extra_body={"ignore_eos": True, "bad_words": ["  " + chr(a)]}).choices[0]
    assert out.token_ids[:k] == g[:k] and a not in out.token_ids, (g, out.token_ids)
    with pytest.raises(openai.BadRequestError) as e:
        complete(server, BASE, "x", extra_body={"bad_words": ["   "]})
    assert e.value.body["param"] == "bad_words"


def test_truncate_prompt_tokens_keeps_the_last_tokens(server):
    ids = list(PROMPTS[2].encode())
    k = 9
    cut = complete(server, BASE, ids, max_tokens=8, logprobs=1,
                   extra_body={"ignore_eos": True, "truncate_prompt_tokens": k})
    tail = complete(server, BASE, ids[-k:], max_tokens=8, logprobs=1,
                    extra_body={"ignore_eos": True})
    assert cut.usage.prompt_tokens == k
    assert cut.choices[0].token_ids == tail.choices[0].token_ids
    assert cut.choices[0].logprobs.token_logprobs == tail.choices[0].logprobs.token_logprobs
    assert cut.choices[0].prompt_token_ids == ids[-k:]
    # A text prompt, echoed: the echo is the kept part (what the model saw).
    r = complete(server, BASE, PROMPTS[2], max_tokens=4, echo=True,
                 extra_body={"ignore_eos": True, "truncate_prompt_tokens": k}).choices[0]
    assert r.text.startswith(PROMPTS[2][-k:]) and not r.text.startswith(PROMPTS[2][-k - 1:])
    # Shorter prompts are left alone; -1 is the context length.
    short = complete(server, BASE, ids, max_tokens=2, extra_body={"truncate_prompt_tokens": -1})
    assert short.usage.prompt_tokens == len(ids)
    # Chat: the rendered prompt's last k tokens.
    c = server.client().chat.completions.create(
        model=BASE, messages=[{"role": "user", "content": "a long enough question"}],
        max_tokens=2, extra_body={"truncate_prompt_tokens": 5})
    assert c.usage.prompt_tokens == 5
    for bad in (0, -2, MAX_MODEL_LEN + 1):
        with pytest.raises(openai.BadRequestError) as e:
            complete(server, BASE, "x", extra_body={"truncate_prompt_tokens": bad})
        assert e.value.body["param"] == "truncate_prompt_tokens", (bad, e.value.body)


def test_truncation_side_slices_as_vllm(server):
    # vLLM 0.32's truncation_side: "right" keeps the first k tokens, "left" the last k (exactly:
    # the tiny tokenizer adds no special tokens, so "left" is also what the default does).
    ids = list(PROMPTS[2].encode())
    k = 7
    for side, kept in (("right", ids[:k]), ("left", ids[-k:])):
        for prompt in (ids, PROMPTS[2]):
            c = complete(server, BASE, prompt, max_tokens=3,
                         extra_body={"ignore_eos": True, "truncate_prompt_tokens": k,
                                     "truncation_side": side})
            assert c.usage.prompt_tokens == k, side
            assert c.choices[0].prompt_token_ids == kept, (side, prompt)
            alone = complete(server, BASE, kept, max_tokens=3, extra_body={"ignore_eos": True})
            assert c.choices[0].token_ids == alone.choices[0].token_ids
    # Without truncate_prompt_tokens it changes nothing; another value is a 400 naming it.
    c = complete(server, BASE, ids, max_tokens=1, extra_body={"truncation_side": "right"})
    assert c.usage.prompt_tokens == len(ids)
    with pytest.raises(openai.BadRequestError) as e:
        complete(server, BASE, ids, extra_body={"truncation_side": "middle"})
    assert e.value.body["param"] == "truncation_side"
