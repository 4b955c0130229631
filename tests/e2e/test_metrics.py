"""/metrics parsed with prometheus_client: vLLM's families, types and labels; counters and
gauges move as requests run."""
import threading
import time

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from conftest import LoomServer, adapter_args, wait_until

LONG = "llama_long"  # served name of the long-context copy (its folder's name)

GAUGES = ["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
          "vllm:lora_requests_info", "loom_adapters_resident", "loom_large_prompts_tokenizing",
          "loom_large_prompts_waiting"]
COUNTERS = ["vllm:prompt_tokens", "vllm:generation_tokens", "vllm:request_success",
            "loom_adapter_loads", "loom_adapter_evictions", "loom_large_prompts_abandoned"]
HISTOGRAMS = ["vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
              "vllm:e2e_request_latency_seconds", "loom_step_tokens", "loom_step_sequences",
              "loom_step_adapters"]
# vLLM v1's PrometheusStatLogger buckets.
VLLM_BUCKETS = {
    "vllm:time_to_first_token_seconds": [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25,
                                         0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
                                         160.0, 640.0, 2560.0],
    "vllm:inter_token_latency_seconds": [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
                                         0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0],
    "vllm:e2e_request_latency_seconds": [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
                                         30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0,
                                         1920.0, 7680.0],
}


@pytest.fixture(scope="module")
def msrv(long_dir):
    s = LoomServer(long_dir, adapter_args(["qv", "mlp"]) + ["--max-num-seqs", "2"])
    try:
        yield s.start()
    finally:
        s.kill()


def families(srv):
    r = requests.get(srv.url + "/metrics", timeout=10)
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/plain")
    return r.text, {f.name: f for f in text_string_to_metric_families(r.text)}


def sample(srv, name, **labels):
    return srv.metric(name, **labels)


def test_families_types_and_labels(msrv):
    text, fams = families(msrv)
    problems = []
    for name, typ in [(n, "gauge") for n in GAUGES] + [(n, "counter") for n in COUNTERS] + \
            [(n, "histogram") for n in HISTOGRAMS]:
        f = fams.get(name)
        if f is None:
            problems.append(f"no family {name}")
            continue
        if f.type != typ:
            problems.append(f"{name}: type {f.type}, expected {typ}")
        if not f.samples:
            problems.append(f"{name}: no samples in the family (a counter's '# TYPE' line must "
                            f"name the sample, {name}_total, in the 0.0.4 text format)"
                            if typ == "counter" else f"{name}: no samples")
        for s in f.samples:
            if s.labels.get("model_name") != LONG:
                problems.append(f"{s.name}: model_name={s.labels.get('model_name')!r}")
    # Families the parser had to invent (samples with no matching # TYPE) mean a malformed page.
    untyped = sorted({n for n, f in fams.items() if f.type == "unknown"})
    if untyped:
        problems.append(f"samples without a matching # TYPE line: {untyped}")
    assert not problems, "\n".join(problems)


def test_lora_requests_info_labels(msrv):
    msrv.client().completions.create(model="qv", prompt="x", max_tokens=2)
    _, fams = families(msrv)
    f = fams["vllm:lora_requests_info"]
    assert len(f.samples) == 1, "one series"
    s = f.samples[0]
    assert set(s.labels) == {"model_name", "max_lora", "running_lora_adapters",
                             "waiting_lora_adapters"}
    assert s.labels["max_lora"] == "8"
    assert abs(s.value - time.time()) < 600, \
        f"the value is the (unix) time of the last update, got {s.value}"


def test_request_success_by_finished_reason(msrv):
    text, _ = families(msrv)
    reasons = set()
    for f in text_string_to_metric_families(text):
        for s in f.samples:
            if s.name == "vllm:request_success_total":
                reasons.add(s.labels.get("finished_reason"))
                assert s.labels.get("model_name") == LONG
    assert {"stop", "length", "abort"} <= reasons


def test_histograms_have_vllm_buckets(msrv):
    text, _ = families(msrv)
    for name, bounds in VLLM_BUCKETS.items():
        buckets = [(s.labels["le"], s.value) for f in text_string_to_metric_families(text)
                   for s in f.samples if s.name == name + "_bucket"]
        les = [b[0] for b in buckets]
        assert les[-1] == "+Inf"
        assert [float(x) for x in les[:-1]] == bounds, name
        values = [b[1] for b in buckets]
        assert values == sorted(values), f"{name}: buckets must be cumulative"
        count = [s.value for f in text_string_to_metric_families(text) for s in f.samples
                 if s.name == name + "_count"]
        sums = [s.value for f in text_string_to_metric_families(text) for s in f.samples
                if s.name == name + "_sum"]
        assert count == [values[-1]] and len(sums) == 1


def test_step_histograms_and_gate_gauges(msrv):
    # Engine steps by rows, sequences and adapters: cumulative buckets, _count equal to +Inf, and
    # a request of n generated tokens adds at least n steps (one per token) and its rows to
    # loom_step_tokens_sum; the encode gate's gauges read 0 with no large prompt in flight.
    def hist(name):
        text = requests.get(msrv.url + "/metrics", timeout=10).text
        samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
        buckets = [(s.labels["le"], s.value) for s in samples if s.name == name + "_bucket"]
        count = [s.value for s in samples if s.name == name + "_count"]
        total = [s.value for s in samples if s.name == name + "_sum"]
        values = [v for _, v in buckets]
        assert buckets[-1][0] == "+Inf" and values == sorted(values), (name, buckets)
        assert count == [values[-1]] and len(total) == 1, name
        return values[-1], total[0]

    wait_until(lambda: msrv.metric("vllm:num_requests_running") == 0
               and msrv.metric("vllm:num_requests_waiting") == 0, 30, what="an idle engine")
    before = {n: hist(n) for n in ("loom_step_tokens", "loom_step_sequences",
                                   "loom_step_adapters")}
    prompt = "Counting steps"
    r = msrv.client().completions.create(model="qv", prompt=prompt, max_tokens=9,
                                         extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 9
    after = {n: hist(n) for n in before}
    steps = after["loom_step_sequences"][0] - before["loom_step_sequences"][0]
    assert steps >= 9, steps
    assert after["loom_step_adapters"][0] - before["loom_step_adapters"][0] == steps
    assert after["loom_step_adapters"][1] - before["loom_step_adapters"][1] >= steps  # 'qv' in each
    rows = after["loom_step_tokens"][1] - before["loom_step_tokens"][1]
    # every prompt row and each generated token but the last (a prompt under one 16-token KV
    # block: nothing comes from the prefix cache)
    assert r.usage.prompt_tokens < 16 and rows == r.usage.prompt_tokens + 8, rows
    assert msrv.metric("loom_large_prompts_tokenizing") == 0
    assert msrv.metric("loom_large_prompts_waiting") == 0
    assert msrv.metric("loom_large_prompts_abandoned_total") == 0


def test_histogram_le_labels_as_vllm_writes_them(msrv):
    # prometheus_client (vLLM) writes le="0.005", not le="0.0050000000000000001"; dashboards and
    # recording rules that select a bucket by its le string depend on it.
    text, _ = families(msrv)
    odd = sorted({line.split('le="')[1].split('"')[0] for line in text.splitlines()
                  if 'le="' in line and len(line.split('le="')[1].split('"')[0]) > 8})
    assert not odd, f"le labels not in their shortest form: {odd[:6]}"


def test_counters_move(msrv):
    def snap():
        names = ["vllm:prompt_tokens_total", "vllm:generation_tokens_total",
                 "vllm:time_to_first_token_seconds_count", "vllm:e2e_request_latency_seconds_count",
                 "vllm:inter_token_latency_seconds_count"]
        out = {n: sample(msrv, n) for n in names}
        for reason in ("stop", "length", "abort"):
            out[reason] = sample(msrv, "vllm:request_success_total", finished_reason=reason)
        return out

    before = snap()
    prompt = "Count these tokens"
    r = msrv.client().completions.create(model="qv", prompt=prompt, max_tokens=7, temperature=0,
                                         extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 7
    r2 = msrv.client().chat.completions.create(model=LONG, max_tokens=5, temperature=0,
                                               messages=[{"role": "user", "content": "hi"}],
                                               extra_body={"ignore_eos": True})
    after = snap()
    d = {k: after[k] - before[k] for k in before}
    assert d["vllm:prompt_tokens_total"] == len(prompt) + r2.usage.prompt_tokens
    assert d["vllm:generation_tokens_total"] == 7 + 5
    assert d["length"] == 2 and d["stop"] == 0 and d["abort"] == 0
    assert d["vllm:time_to_first_token_seconds_count"] == 2
    assert d["vllm:e2e_request_latency_seconds_count"] == 2
    assert d["vllm:inter_token_latency_seconds_count"] == 6 + 4
    # n = 2: each sequence prefills the prompt, so vLLM's counter counts it twice (usage once).
    before = snap()
    r3 = msrv.client().completions.create(model=LONG, prompt=prompt, max_tokens=3, n=2,
                                          temperature=1.0, seed=2, extra_body={"ignore_eos": True})
    after = snap()
    assert r3.usage.prompt_tokens == len(prompt)
    assert after["vllm:prompt_tokens_total"] - before["vllm:prompt_tokens_total"] == 2 * len(prompt)
    assert after["length"] - before["length"] == 2
    # A stop-string finish counts as "stop".
    ids = msrv.client().completions.create(model=LONG, prompt="abc", max_tokens=30, temperature=0,
                                           extra_body={"ignore_eos": True,
                                                       "return_token_ids": True}
                                           ).choices[0].token_ids
    stop_tok = next((t for t in ids[1:] if 0x20 <= t <= 0x7E), None)
    if stop_tok is not None:
        s0 = sample(msrv, "vllm:request_success_total", finished_reason="stop")
        r3 = msrv.client().completions.create(model=LONG, prompt="abc", max_tokens=30,
                                              temperature=0, stop=chr(stop_tok),
                                              extra_body={"ignore_eos": True})
        assert r3.choices[0].finish_reason == "stop"
        assert sample(msrv, "vllm:request_success_total", finished_reason="stop") == s0 + 1


def _stream_in_thread(srv, model, max_tokens, started, stop_reading, out):
    def run():
        body = {"model": model, "prompt": "Tell me a long story", "max_tokens": max_tokens,
                "ignore_eos": True, "stream": True}
        with requests.post(srv.url + "/v1/completions", json=body, stream=True, timeout=120) as r:
            out["status"] = r.status_code
            for line in r.iter_lines():
                if line:
                    started.set()
                if stop_reading.is_set():
                    break
        out["closed"] = True

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_running_and_waiting_gauges(msrv):
    # --max-num-seqs 2: two long streams run (on qv and mlp), a third (base) waits.
    stop_reading = threading.Event()
    threads, outs = [], []
    for model in ("qv", "mlp", LONG):
        started, out = threading.Event(), {}
        threads.append(_stream_in_thread(msrv, model, 12000, started, stop_reading, out))
        outs.append(out)
        if model != LONG:
            assert started.wait(30), f"the {model} stream never started"
    try:
        def seen():
            _, fams = families(msrv)
            running = fams["vllm:num_requests_running"].samples[0].value
            waiting = fams["vllm:num_requests_waiting"].samples[0].value
            kv = fams["vllm:kv_cache_usage_perc"].samples[0].value
            info = fams["vllm:lora_requests_info"].samples[0].labels
            ok = (running == 2 and waiting == 1 and 0 < kv <= 1 and
                  sorted(info["running_lora_adapters"].split(",")) == ["mlp", "qv"] and
                  info["waiting_lora_adapters"] == "")
            return ok and (running, waiting, kv, info)
        wait_until(seen, timeout=10, what="2 running (qv, mlp), 1 waiting (base), KV in use")
    finally:
        stop_reading.set()
        for t in threads:
            t.join(30)
    # Closing the streams aborts them: everything returns to idle.
    def idle():
        _, fams = families(msrv)
        info = fams["vllm:lora_requests_info"].samples[0].labels
        return (fams["vllm:num_requests_running"].samples[0].value == 0 and
                fams["vllm:num_requests_waiting"].samples[0].value == 0 and
                fams["vllm:kv_cache_usage_perc"].samples[0].value == 0 and
                info["running_lora_adapters"] == "" and info["waiting_lora_adapters"] == "")
    wait_until(idle, timeout=10, what="idle gauges after the streams closed")


def test_waiting_adapter_label(msrv):
    # Two base streams fill --max-num-seqs 2; a qv request waits and shows in
    # waiting_lora_adapters.
    stop_reading = threading.Event()
    threads = []
    for model in (LONG, LONG, "qv"):
        started, out = threading.Event(), {}
        threads.append(_stream_in_thread(msrv, model, 12000, started, stop_reading, out))
        if model == LONG:
            assert started.wait(30)
    try:
        def seen():
            _, fams = families(msrv)
            info = fams["vllm:lora_requests_info"].samples[0].labels
            return info["waiting_lora_adapters"] == "qv" and info["running_lora_adapters"] == ""
        wait_until(seen, timeout=10, what="waiting_lora_adapters=qv")
    finally:
        stop_reading.set()
        for t in threads:
            t.join(30)
    wait_until(lambda: sample(msrv, "vllm:num_requests_running") == 0 and
               sample(msrv, "vllm:num_requests_waiting") == 0, timeout=10, what="idle")


def test_load_counts_generation_requests_in_flight(start_server, long_dir):
    # vLLM's GET /load: {"server_load": N}, the generation requests in flight (vLLM counts them
    # with --enable-server-load-tracking, accepted here; loom always does). Open under --api-key,
    # as vLLM's middleware guards /v1 only.
    from conftest import Blocker
    srv = start_server(long_dir, ["--enable-server-load-tracking", "--max-num-seqs", "2"],
                       api_key="sk-load")

    def load():
        r = requests.get(srv.url + "/load", timeout=10)  # no key
        assert r.status_code == 200, r.text
        assert r.headers["Content-Type"].startswith("application/json")
        body = r.json()
        assert set(body) == {"server_load"}, body
        return body["server_load"]

    assert load() == 0
    blockers = [Blocker(srv, LONG, prompt=f"p{i}") for i in range(2)]
    try:
        wait_until(lambda: load() == 2, what="two streams counted")
        # A non-streamed request counts while it waits for a sequence slot and runs.
        out = {}
        t = threading.Thread(target=lambda: out.setdefault("r", srv.post(
            "/v1/completions", {"model": LONG, "prompt": "x", "max_tokens": 3})))
        t.start()
        wait_until(lambda: load() == 3, what="the queued request counted")
        blockers.pop().close()
        t.join(60)
        assert out["r"].status_code == 200, out["r"].text
        wait_until(lambda: load() == 1, what="the finished and the closed no longer counted")
        # A refused request is counted only while it is answered.
        assert srv.post("/v1/completions", {"model": LONG, "prompt": "x",
                                            "n": 0}).status_code == 400
        assert load() == 1
    finally:
        for b in blockers:
            b.close()
    wait_until(lambda: load() == 0, what="closed streams no longer counted")
    r = requests.post(srv.url + "/load", timeout=10)
    assert r.status_code == 405 and "GET" in r.headers["Allow"], r.text
