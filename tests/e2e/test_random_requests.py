"""A seeded randomized ("property") test: a few hundred random but plausible requests, mixing
/v1/completions and /v1/chat/completions, streamed and not, base and adapters, and most
sampling, stop, log-prob, echo and template fields of docs/API.md (and now and then one invalid
value), sent from 8 threads at once to the shared server. Every answer must be a 200 or a
documented 4xx in OpenAI's error shape (never a 5xx, a dropped connection or a hang), and every
200 must hold the invariants below: choice count and indices, finish reasons, usage, token
counts against max_tokens / min_tokens / the context, stop strings and stop tokens, bad words,
allowed tokens, log-prob shapes and values, the text as the decoding of the token ids, and a
stream folding back into the same shape. Then a sample of the greedy (and seeded) requests is
sent again alone and must come back bit for bit the same (batch invariance), some also streamed,
and the server must be healthy with nothing left running.

Reproduce a failure with its seed: LOOM_RANDOM_SEEDS=1,2,3 picks the seeds (default SEEDS);
LOOM_RANDOM_REQUESTS sets the number of requests per seed (half of it for the other servers —
under cache pressure, over an int4 base, a mixture of experts — whose seeds
LOOM_RANDOM_OTHER_SEEDS picks). Each failure prints the request."""
import json
import os
import random
import threading
import time
import traceback
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from conftest import BASE, running_requests, wait_until
from random_requests_check import (STATS, Failures, check, comparable, is_num, note,
                                   variant)
from random_requests_gen import gen_request

SEEDS = [int(s) for s in os.environ.get("LOOM_RANDOM_SEEDS", "20240611,1,2").split(",") if s.strip()]
N_REQUESTS = int(os.environ.get("LOOM_RANDOM_REQUESTS", "300"))
OTHER_SEEDS = [int(s) for s in os.environ.get("LOOM_RANDOM_OTHER_SEEDS", "7").split(",") if s.strip()]
THREADS = 8
N_REPLAY = 30  # greedy requests sent again alone
N_REPLAY_SEEDED = 10  # seeded sampling requests sent again alone
N_STREAM_TWIN = 12  # greedy non-stream requests also sent streamed
TIMEOUT = (10, 120)  # connect, read

def parse_sse(text):
    """SSE body → (list of JSON events, error string or None). Ends with exactly one [DONE]."""
    events, done = [], 0
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        lines = block.split("\n")
        data = [ln[len("data: "):] for ln in lines if ln.startswith("data: ")]
        other = [ln for ln in lines if not ln.startswith("data: ") and not ln.startswith(":")]
        if other or len(data) != 1:
            return events, f"malformed SSE event {block[:300]!r}"
        if done:
            return events, f"an event after [DONE]: {block[:300]!r}"
        if data[0] == "[DONE]":
            done += 1
            continue
        try:
            events.append(json.loads(data[0]))
        except ValueError:
            return events, f"an event that is not JSON: {data[0][:300]!r}"
    if done != 1:
        return events, "the stream did not end with data: [DONE]"
    return events, None


def send(session, url, req):
    """→ (status, body or events, error string or None)."""
    headers = {"Content-Type": "application/json"}
    if req.request_id:
        headers["X-Request-Id"] = req.request_id
    if req.abandon:
        # Read a little of the stream, then close the connection: the server must cancel it.
        with requests.post(url + req.path, data=json.dumps(req.body), headers=headers,
                           timeout=TIMEOUT, stream=True) as r:
            if r.status_code == 200:
                got = 0
                for piece in r.iter_content(100):
                    got += len(piece)
                    if got >= req.abandon:
                        break
                return r.status_code, None, None
            return r.status_code, r.json(), None
    r = session.post(url + req.path, data=json.dumps(req.body), headers=headers,
                     timeout=TIMEOUT)
    ctype = r.headers.get("Content-Type", "")
    if r.status_code == 200 and req.stream:
        if not ctype.startswith("text/event-stream"):
            return r.status_code, None, f"stream Content-Type {ctype!r}"
        try:
            text = r.content.decode("utf-8")
        except UnicodeDecodeError as e:
            return r.status_code, None, f"the stream is not UTF-8: {e}"
        events, err = parse_sse(text)
        return r.status_code, events, err
    try:
        body = r.json()
    except ValueError:
        return r.status_code, None, f"not JSON: {r.text[:300]!r}"
    return r.status_code, body, None


# ---- the test -------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
def test_random_requests(server, seed):
    run_storm(server, seed, N_REQUESTS)


@pytest.fixture(scope="module")
def pressed_server(llama_dir):
    """The same model and adapters under pressure: a KV cache of about two full-length sequences
    (requests are preempted and recomputed), prefill chunked 64 tokens a step, 2 adapters a step
    and 2 kept in memory (the others evicted and read again from their folders)."""
    from conftest import LoomServer, adapter_args
    s = LoomServer(llama_dir, adapter_args() + [
        "--kv-cache-memory", "800KiB", "--max-num-seqs", "16", "--max-num-batched-tokens", "64",
        "--max-loras", "2", "--max-cpu-loras", "2"])
    try:
        yield s.start()
    finally:
        s.kill()


@pytest.mark.parametrize("seed", OTHER_SEEDS)
def test_random_requests_under_cache_pressure(pressed_server, server, seed):
    # The invariants hold with preemption, chunked prefill and adapter eviction, and the greedy
    # and seeded answers are those of the unpressed server, bit for bit (batch invariance).
    before = pressed_server.metric("vllm:num_preemptions_total")
    run_storm(pressed_server, seed, N_REQUESTS // 2, replay_server=server)
    assert pressed_server.metric("vllm:num_preemptions_total") > before, "nothing was preempted"


@pytest.fixture(scope="module")
def int4_server(llama_dir):
    """The same model with its projections quantized to int4 (group 32) at load, the adapters
    over them."""
    from conftest import LoomServer, adapter_args
    s = LoomServer(llama_dir, adapter_args() + ["--quantize", "int4", "--quantize-group-size", "32"])
    try:
        yield s.start()
    finally:
        s.kill()


@pytest.mark.parametrize("seed", OTHER_SEEDS)
def test_random_requests_over_an_int4_base(int4_server, seed):
    # The invariants, and batch invariance (replays alone bit for bit), over a quantized base.
    assert any("quantized" in line for line in int4_server.log_lines), int4_server.log()
    run_storm(int4_server, seed, N_REQUESTS // 2)


@pytest.fixture(scope="module")
def moe_server(model_root):
    """A tiny Mixtral (4 experts, top 2) served under the same name, with Mixtral adapters under
    the four adapter names: attention, the experts' w1/w2/w3 and the router, q/o, v."""
    import tiny_model
    from conftest import ADAPTER_FIXTURES, FIXTURES, LoomServer
    d = tiny_model.make(FIXTURES / "models" / "mixtral_f32", model_root / "moe" / BASE)
    adapters = {"qv": "mixtral_all_linear", "mlp": "mixtral_experts_v4", "all": "mixtral_native",
                "embed": "mixtral_native_pattern"}
    args = []
    for name, folder in adapters.items():
        args += ["--lora", f"{name}={ADAPTER_FIXTURES / folder}"]
    s = LoomServer(d, args)
    try:
        yield s.start()
    finally:
        s.kill()


@pytest.mark.parametrize("seed", OTHER_SEEDS)
def test_random_requests_on_a_mixture_of_experts(moe_server, seed):
    # Rows routed to different experts share a step: each still answers as it does alone.
    run_storm(moe_server, seed, N_REQUESTS // 2)


@pytest.fixture(scope="module")
def churn_server(llama_dir, tmp_path_factory):
    """The adapters only as sub-folders of a --lora-dir (loaded when first named), at most 2 in
    memory and 2 a step, with runtime loading on (the test unloads and reloads them meanwhile)."""
    import shutil
    from conftest import ADAPTER_FIXTURES, ADAPTERS, LoomServer
    root = tmp_path_factory.mktemp("churn") / "loras"
    root.mkdir()
    for name, folder in ADAPTERS.items():
        shutil.copytree(ADAPTER_FIXTURES / folder, root / name)
    s = LoomServer(llama_dir, ["--lora-dir", str(root), "--allow-runtime-lora",
                               "--max-cpu-loras", "2", "--max-loras", "2"])
    s.lora_root = root
    try:
        yield s.start()
    finally:
        s.kill()


@pytest.mark.parametrize("seed", OTHER_SEEDS)
def test_random_requests_while_adapters_churn(churn_server, server, seed):
    # Adapters loaded on demand, evicted, unloaded, loaded again and reloaded in place (a new
    # identity each time) while the requests run: every answer is still the one the shared
    # server (adapters fixed at start-up) gives alone, bit for bit — no request runs on another
    # adapter's weights or another identity's cached prefix. A request may find every adapter
    # in memory held (old identities of reloaded ones count while their requests run): the
    # documented 503.
    from conftest import ADAPTERS
    stop = threading.Event()
    done = Counter()
    errors = []

    def churn():
        rng = random.Random(seed)
        session = requests.Session()
        while not stop.is_set():
            name = rng.choice(list(ADAPTERS))
            what = rng.choice(["unload", "load", "reload"])
            try:
                if what == "unload":
                    r = session.post(churn_server.url + "/v1/unload_lora_adapter",
                                     json={"lora_name": name}, timeout=30)
                    ok = (200, 404)
                else:
                    body = {"lora_name": name, "lora_path": str(churn_server.lora_root / name)}
                    if what == "reload":
                        body["load_inplace"] = True
                    r = session.post(churn_server.url + "/v1/load_lora_adapter", json=body,
                                     timeout=30)
                    ok = (200, 400) if what == "load" else (200,)  # 400: the name is taken
                if r.status_code not in ok and not adapter_store_busy(r.status_code, r.json()):
                    errors.append(f"{what} {name}: {r.status_code} {r.text[:300]}")
                done[f"{what} {r.status_code}"] += 1
            except requests.RequestException as e:
                errors.append(f"{what} {name}: {e}")
            time.sleep(0.02)

    thread = threading.Thread(target=churn, daemon=True)
    thread.start()
    try:
        run_storm(churn_server, seed, N_REQUESTS // 2, replay_server=server, busy_ok=True)
    finally:
        stop.set()
        thread.join(timeout=60)
    assert not errors, errors[:10]
    assert done["reload 200"] > 0 and done["unload 200"] > 0, done


def adapter_store_busy(status, body):
    """A documented 503: every adapter in memory is held by requests, none can be evicted for
    the one asked (docs/API.md, "Choosing the adapter")."""
    return status == 503 and isinstance(body, dict) and \
        "cannot be loaded" in str((body.get("error") or {}).get("message"))


def overloaded(status, body):
    """The documented queue-limit 503 (--max-waiting): rare prompt lists of up to 20 prompts ×
    n 16 at once can pass it."""
    return status == 503 and isinstance(body, dict) and \
        "overloaded" in str((body.get("error") or {}).get("message"))


def run_storm(server, seed, n_requests, replay_server=None, busy_ok=False):
    """`n_requests` random requests from THREADS threads at once, each answer checked; then
    replays alone (on `replay_server` when given) that must match bit for bit. With `busy_ok`,
    the adapter store's documented 503 is an answer too (counted, not checked)."""
    t0 = time.monotonic()
    STATS.clear()
    rng = random.Random(seed)
    reqs = [gen_request(rng, i) for i in range(n_requests)]
    failures = Failures()
    results = {}
    local = threading.local()

    def one(req):
        if not hasattr(local, "session"):
            local.session = requests.Session()
        try:
            status, body, err = send(local.session, server.url, req)
        except requests.RequestException as e:
            failures.add(req, f"no answer: {type(e).__name__}: {e}"[:600])
            local.session = requests.Session()
            return
        if busy_ok and adapter_store_busy(status, body):
            note("503 adapter store busy")
            return
        if overloaded(status, body):
            note("503 overloaded")
            return
        try:
            got = check(req, status, body, err, failures)
        except Exception:  # noqa: BLE001 — a reply the checks did not expect: report it
            failures.add(req, "the checks raised on this reply",
                         f"{json.dumps(body)[:600]}\n{traceback.format_exc()[-1500:]}")
            return
        if got is not None:
            results[req.i] = got

    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(one, reqs))
    storm_s = time.monotonic() - t0

    def so_far():
        return f"\n{len(failures.items)} failures so far:\n" + "\n".join(failures.items[:10])

    assert server.alive, f"the server died during the storm\n{server.log()}{so_far()}"
    r = requests.get(server.url + "/health", timeout=10)
    assert r.status_code == 200, r.text + so_far()
    try:
        wait_until(lambda: running_requests(server) == 0 and
                   server.metric("vllm:num_requests_waiting") == 0, timeout=20,
                   what="no running or waiting requests after the storm")
    except AssertionError as e:
        raise AssertionError(f"{e}{so_far()}") from None

    # Batch invariance: greedy (and seeded) requests again, alone, bit for bit.
    session = requests.Session()
    alone = replay_server or server
    ok = [q for q in reqs if q.i in results and not q.stream]
    greedy = [q for q in ok if is_num(q.body.get("temperature")) and q.body["temperature"] < 1e-5]
    seeded = [q for q in ok if q not in greedy and "seed" in q.body]
    replay = rng.sample(greedy, min(N_REPLAY, len(greedy))) + \
        rng.sample(seeded, min(N_REPLAY_SEEDED, len(seeded)))
    for q in replay:
        status, body, err = send(session, alone.url, q)
        again = check(q, status, body, err, failures)
        if again is not None and comparable(*again) != comparable(*results[q.i]):
            failures.add(q, "replayed alone, the answer differs from the one under load",
                         f"load: {json.dumps(comparable(*results[q.i]))[:800]}\n  "
                         f"alone: {json.dumps(comparable(*again))[:800]}")
    # The same greedy (and seeded) requests streamed fold back into the same choices.
    twins = rng.sample(greedy, min(N_STREAM_TWIN, len(greedy))) + \
        rng.sample(seeded, min(N_STREAM_TWIN // 2, len(seeded)))
    for q in twins:
        s = variant(q, stream=True, stream_options={"include_usage": True}, prompt_logprobs=None)
        status, events, err = send(session, alone.url, s)
        got = check(s, status, events, err, failures)
        if got is not None:
            want = comparable(*results[q.i])
            have = comparable(*got)
            for w in want[0]:
                w.pop("prompt_logprobs")
            for h in have[0]:
                h.pop("prompt_logprobs")
            if have != want:
                failures.add(s, "streamed, the answer differs from the non-streamed one",
                             f"full: {json.dumps(want)[:800]}\n  stream: {json.dumps(have)[:800]}")

    # Choice i of n uses seed + i (docs/API.md, as vLLM): it is the choice of n = 1 at seed + i.
    multi = [q for q in seeded if q.body.get("n", 1) > 1 and abs(q.body["seed"]) < 2**62 and
             len(q.prompts or [None]) == 1 and not (not q.chat and isinstance(
                 q.body["prompt"], list) and q.body["prompt"] and isinstance(
                     q.body["prompt"][0], (str, list)))]
    for q in rng.sample(multi, min(6, len(multi))):
        i = rng.randrange(q.body["n"])
        v = variant(q, n=1, seed=q.body["seed"] + i, best_of=None)
        status, body, err = send(session, alone.url, v)
        got = check(v, status, body, err, failures)
        if got is not None:
            note("seed + i checked")
            want = comparable(*results[q.i])[0][i]
            if comparable(*got)[0][0] != want:
                failures.add(v, f"choice {i} of request #{q.i} (n {q.body['n']}, seed "
                             f"{q.body['seed']}) is not the n = 1 choice at seed + {i}",
                             f"choice {i}: {json.dumps(want)[:600]}\n  "
                             f"alone: {json.dumps(comparable(*got)[0][0])[:600]}")
    # Each prompt of a greedy prompt list answers as that prompt alone.
    lists = [q for q in greedy if not q.chat and isinstance(q.body["prompt"], list) and
             q.body["prompt"] and isinstance(q.body["prompt"][0], (str, list))]
    for q in rng.sample(lists, min(8, len(lists))):
        j = rng.randrange(len(q.body["prompt"]))
        n = q.body.get("n", 1)
        v = variant(q, prompt=q.body["prompt"][j])
        v.prompts = [q.prompts[j]] if q.prompts else None
        status, body, err = send(session, alone.url, v)
        got = check(v, status, body, err, failures)
        if got is not None:
            note("prompt list vs alone checked")
            want = comparable(*results[q.i])[0][j * n:(j + 1) * n]
            if comparable(*got)[0] != want:
                failures.add(v, f"prompt {j} of request #{q.i}'s list answers differently alone",
                             f"in the list: {json.dumps(want)[:600]}\n  "
                             f"alone: {json.dumps(comparable(*got)[0])[:600]}")

    assert server.alive, f"the server died\n{server.log()}"
    assert requests.get(server.url + "/health", timeout=10).status_code == 200
    wait_until(lambda: running_requests(server) == 0, timeout=20, what="no running requests")
    n_ok = len(results)
    print(f"seed {seed}: {len(reqs)} requests ({n_ok} answered 200) in {storm_s:.1f} s, "
          f"{len(replay)} replayed, {len(twins)} streamed twins; total "
          f"{time.monotonic() - t0:.1f} s")
    for key, count in sorted(STATS.items()):
        print(f"  {count:6d}  {key}")
    assert not failures.items, f"{len(failures.items)} failures (seed {seed}):\n" + \
        "\n".join(failures.items[:25])
