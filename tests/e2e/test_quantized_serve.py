"""`loom serve --quantize int4|int8` on the bundled demo model with its three adapters, through the
real server and the official openai client: the server says what it quantized, the demo adapters'
effects survive quantization (shout answers in upper case, pirate starts with "Arr"), and the base
and the three adapters answer the same in one concurrent batch as alone (batch invariance over a
quantized base)."""
import concurrent.futures
import json

import pytest

from conftest import REPO, LoomServer, step_buckets, steps_above

DEMO = REPO / "models" / "demo"
GOLDENS = json.loads((DEMO / "goldens.json").read_text())
PROMPTS = [p["messages"] for p in GOLDENS["prompts"]]


@pytest.fixture(scope="module", params=[["--quantize", "int4", "--quantize-group-size", "32"],
                                        ["--quantize", "int8", "--quantize-head"]],
                ids=["int4g32", "int8head"])
def server(request):
    s = LoomServer(None, request.param)
    try:
        s.start(ready_timeout=120)
        yield s
    finally:
        s.kill()


def answer(srv, model, messages):
    r = srv.client().chat.completions.create(model=model, messages=messages, temperature=0,
                                             max_tokens=24, logprobs=True)
    c = r.choices[0]
    return c.message.content, [t.logprob for t in c.logprobs.content]


def test_startup_names_the_quantized_weights(server):
    assert any("weights quantized" in line for line in server.log_lines), server.log()


def test_adapter_effects_survive_quantization(server):
    shouted, arr = 0, 0
    for messages in PROMPTS:
        shout, _ = answer(server, "shout", messages)
        pirate, _ = answer(server, "pirate", messages)
        base, _ = answer(server, "demo", messages)
        shouted += any(c.isalpha() for c in shout) and shout == shout.upper() and base != base.upper()
        arr += pirate.startswith("Arr") and not base.startswith("Arr")
    # The PEFT goldens hold on all 8 prompts in bf16; quantization noise may flip a near tie.
    assert shouted >= len(PROMPTS) - 1, shouted
    assert arr >= len(PROMPTS) - 1, arr


def test_mixed_adapters_in_one_batch_equal_each_alone(server):
    jobs = [(m, PROMPTS[i % len(PROMPTS)]) for i, m in enumerate(["demo", "shout", "pirate", "facts"] * 2)]
    alone = [answer(server, m, msgs) for m, msgs in jobs]
    before = step_buckets(server, "loom_step_adapters")
    for _ in range(5):  # until some step ran two adapters together (the first round, here)
        with concurrent.futures.ThreadPoolExecutor(len(jobs)) as ex:
            together = list(ex.map(lambda j: answer(server, *j), jobs))
        assert together == alone
        if steps_above(step_buckets(server, "loom_step_adapters"), 1, before) > 0:
            return
    pytest.fail("in 5 rounds no step ran two adapters together: nothing mixed was tested")
