"""Per-request adapters in mixed batches: every (model, prompt) run alone first, then all of them
from 16 concurrent clients, repeated and shuffled so batches mix adapters; each answer must be
the solo answer token for token (and, ideally, log-prob for log-prob)."""
import random
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import ADAPTERS, BASE, LoomServer, adapter_args, step_buckets, steps_above

MODELS = [BASE] + list(ADAPTERS)
PROMPTS = [
    "Hi",
    "The quick brown fox jumps",
    "Once upon a time there was a tiny model that served many adapters at once.",
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt "
    "ut labore et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation.",
]
MAX_TOKENS = 160  # long enough that 16 clients overlap: the tiny model decodes a token in microseconds
SEEDED = [(m, PROMPTS[1], 11) for m in MODELS] + [(m, PROMPTS[2], 5) for m in (BASE, "all")]


def run_one(srv, model, prompt, seed=None, stream=False):
    """(token ids, chosen log-probs, finish_reason) of one completion."""
    kw = dict(model=model, prompt=prompt, max_tokens=MAX_TOKENS, logprobs=1,
              extra_body={"return_token_ids": True, "ignore_eos": True})
    if seed is None:
        kw["temperature"] = 0
    else:
        kw.update(temperature=1.0, top_p=0.95, seed=seed)
    client = srv.client()
    if not stream:
        c = client.completions.create(**kw).choices[0]
        return c.token_ids, c.logprobs.token_logprobs, c.finish_reason
    ids, lps, finish = [], [], None
    for ch in client.completions.create(stream=True, **kw):
        for c in ch.choices:
            ids += c.token_ids or []
            if c.logprobs:
                lps += c.logprobs.token_logprobs
            if c.finish_reason:
                finish = c.finish_reason
    return ids, lps, finish


@pytest.fixture(scope="module", params=[(8, "auto"), (2, "auto"), (8, "bfloat16")],
                ids=["max_loras8", "max_loras2", "bf16_kv_cache"])
def mixed(request, llama_dir):
    """Starts a server, runs everything solo, then concurrently; returns what it saw. The f32
    model's cache is f32 under auto; bf16_kv_cache rounds K and V to bf16 (bitwise invariance
    must hold over it too)."""
    max_loras, kv_dtype = request.param
    srv = LoomServer(llama_dir, adapter_args() + ["--max-loras", str(max_loras),
                                                  "--kv-cache-dtype", kv_dtype])
    srv.start()
    try:
        solo = {}
        for m in MODELS:
            for p in PROMPTS:
                solo[(m, p, None)] = run_one(srv, m, p)
        for m, p, seed in SEEDED:
            solo[(m, p, seed)] = run_one(srv, m, p, seed)
        jobs = [(key, rep % 2 == 1) for key in solo for rep in range(2)]
        random.Random(1).shuffle(jobs)
        # The engine counts its steps by sequences and adapters: what ran together is read off
        # /metrics afterwards, exactly (a sampler polling the gauges missed short overlaps).
        before = {f: step_buckets(srv, f) for f in ("loom_step_sequences", "loom_step_adapters")}
        with ThreadPoolExecutor(16) as pool:
            futures = [(key, stream, pool.submit(run_one, srv, *key, stream))
                       for key, stream in jobs]
            results = [(key, stream, f.result(timeout=120)) for key, stream, f in futures]
        after = {f: step_buckets(srv, f) for f in before}
        steps = {f: {le: after[f][le] - before[f][le] for le in after[f]} for f in after}
        yield {"solo": solo, "results": results, "steps": steps, "max_loras": max_loras,
               "kv_dtype": kv_dtype, "server": srv}
    finally:
        srv.kill()


def _describe(key):
    m, p, seed = key
    return f"model={m} prompt={p[:20]!r}" + (f" seed={seed}" if seed is not None else "")


def test_mixed_batch_tokens_equal_solo(mixed):
    bad = []
    for key, stream, (ids, _, finish) in mixed["results"]:
        solo_ids = mixed["solo"][key][0]
        assert len(solo_ids) == MAX_TOKENS and finish == "length"
        if ids != solo_ids:
            first = next(i for i, (a, b) in enumerate(zip(ids, solo_ids)) if a != b)
            bad.append(f"{_describe(key)} stream={stream}: differs from solo at token {first}")
    assert not bad, f"{len(bad)}/{len(mixed['results'])} mixed-batch answers differ:\n" + \
        "\n".join(bad[:20])


def test_mixed_batch_really_mixed(mixed):
    seqs, adapters = mixed["steps"]["loom_step_sequences"], mixed["steps"]["loom_step_adapters"]
    assert steps_above(seqs, 1) > 0, f"the concurrent requests never ran together: {seqs}"
    assert steps_above(adapters, 1) > 0, f"no step applied two adapters: {adapters}"
    assert steps_above(adapters, mixed["max_loras"]) == 0, \
        f"steps with more adapters than --max-loras {mixed['max_loras']}: {adapters}"


def test_mixed_batch_logprobs_bitwise(mixed):
    max_diff, where, n_diff, n_runs = 0.0, None, 0, 0
    for key, stream, (ids, lps, _) in mixed["results"]:
        solo_ids, solo_lps, _ = mixed["solo"][key]
        assert len(lps) == len(ids) == MAX_TOKENS
        if ids != solo_ids:
            continue  # reported by the token test
        n_runs += 1
        diffs = [abs(a - b) for a, b in zip(lps, solo_lps)]
        if max(diffs) > 0:
            n_diff += 1
        i = max(range(len(diffs)), key=diffs.__getitem__)
        if diffs[i] > max_diff:
            max_diff, where = diffs[i], f"{_describe(key)} stream={stream} token {i}"
    assert n_runs == len(mixed["results"]), "some mixed-batch runs' tokens differ from solo"
    assert max_diff == 0, (f"batch invariance is not bitwise: {n_diff}/{n_runs} mixed-batch runs "
                           f"differ from their solo run, max |Δlogprob| = {max_diff:.3g} ({where})")


def test_adapters_change_the_output(mixed):
    solo = mixed["solo"]
    for name in ADAPTERS:
        differs = [p for p in PROMPTS if solo[(name, p, None)][0] != solo[(BASE, p, None)][0]]
        assert differs, f"adapter {name} gives the base model's tokens for every prompt"
    # And the adapters differ from each other.
    outs = {name: tuple(solo[(name, PROMPTS[3], None)][0]) for name in MODELS}
    assert len(set(outs.values())) == len(outs), "two models gave identical outputs"


def test_seeded_runs_are_sampled(mixed):
    # The seeded keys are checked for batch invariance by the token test; make sure they really
    # sample (are not greedy in disguise).
    solo = mixed["solo"]
    assert any(solo[(m, p, seed)][0] != solo[(m, p, None)][0] for m, p, seed in SEEDED)


def test_ready_line_names_the_kv_cache_dtype(mixed):
    # auto on this float32 checkpoint is float32 (a bfloat16 one gets bfloat16, as vLLM's auto).
    want = "float32" if mixed["kv_dtype"] == "auto" else "bfloat16"
    assert f"tokens ({want})" in "\n".join(mixed["server"].log_lines), mixed["server"].log()
