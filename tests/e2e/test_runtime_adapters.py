"""Adapters at runtime: on-demand loading from --lora-dir, the load/unload endpoints and their
path confinement, load/unload under traffic, and LRU eviction with --max-cpu-loras."""
import os
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest

from conftest import ADAPTERS, BASE, Blocker, greedy, wait_until

PROMPT = "The quick brown fox jumps"


def model_ids(srv):
    return {m["id"]: m for m in srv.get("/v1/models").json()["data"]}


def load(srv, name, path):
    return srv.post("/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(path)})


def unload(srv, name):
    return srv.post("/v1/unload_lora_adapter", {"lora_name": name})


def test_on_demand_loading(start_server, llama_dir, lora_dir, reference):
    srv = start_server(llama_dir, ["--lora-dir", str(lora_dir)])
    # SPEC-api: /v1/models lists every adapter that can be named — the sub-folders a request
    # would load on demand (a config inside the root; not 'junk', not 'evil' whose target is
    # outside), before any is used, under the base, with their folders as root.
    listed = model_ids(srv)
    assert set(listed) == {BASE, *ADAPTERS, "broken", "noweights"}, sorted(listed)
    assert listed["mlp"]["parent"] == BASE
    assert os.path.realpath(listed["mlp"]["root"]) == os.path.realpath(lora_dir / "mlp")
    # A sub-folder named as the base is not listed as an adapter (a request naming it gets the
    # base): one entry per id.
    shutil.copytree(lora_dir / "qv", lora_dir / BASE)
    ids = [m["id"] for m in srv.get("/v1/models").json()["data"]]
    assert ids.count(BASE) == 1, ids
    shutil.rmtree(lora_dir / BASE)
    # A sub-folder added later is listed at once (the root's mtime changed), a removed one goes.
    shutil.copytree(lora_dir / "qv", lora_dir / "later")
    assert "later" in model_ids(srv)
    shutil.rmtree(lora_dir / "later")
    assert "later" not in model_ids(srv)
    loads0 = srv.metric("loom_adapter_loads_total")
    ids, text, _ = greedy(srv, "mlp", PROMPT)
    assert (ids, text) == reference("mlp", PROMPT)[:2], "on-demand adapter != --lora adapter"
    models = model_ids(srv)
    assert "mlp" in models
    assert models["mlp"]["parent"] == BASE
    assert os.path.realpath(models["mlp"]["root"]) == os.path.realpath(lora_dir / "mlp")
    assert srv.metric("loom_adapter_loads_total") == loads0 + 1
    # A second use does not load again; streaming works too.
    assert greedy(srv, "mlp", PROMPT, stream=True)[0] == ids
    assert srv.metric("loom_adapter_loads_total") == loads0 + 1
    # Chat on an on-demand adapter.
    r = srv.client().chat.completions.create(model="embed", max_tokens=4, temperature=0,
                                             messages=[{"role": "user", "content": "x"}])
    assert r.model == "embed" and r.usage.completion_tokens >= 1
    # Names that are not adapters under the root: 404 naming "model", nothing loaded.
    for name in ("nope", "junk", "evil", "../loras/qv", "qv/..", ".", "..", "/etc"):
        with pytest.raises(openai.NotFoundError) as exc:
            srv.client().completions.create(model=name, prompt="x", max_tokens=2)
        assert exc.value.body["param"] == "model", name
    assert "evil" not in model_ids(srv), "a symlink out of --lora-dir was loaded on demand"
    # A sub-folder that is an adapter but does not load (a bad config, no tensor file): 400
    # naming "model" and the reason, not 404 "does not exist" (/tokenize finds the folder).
    for name, why in (("broken", "adapter_config.json"), ("noweights", "adapter_model")):
        with pytest.raises(openai.BadRequestError) as exc:
            srv.client().completions.create(model=name, prompt="x", max_tokens=2)
        assert exc.value.body["param"] == "model" and why in exc.value.body["message"], exc.value.body
        assert name in model_ids(srv)  # still a name a request may give: its 400 says why


def test_load_unload_endpoints(start_server, llama_dir, lora_dir, reference, tmp_path):
    srv = start_server(llama_dir, ["--lora-dir", str(lora_dir), "--allow-runtime-lora"])
    r = load(srv, "a1", "qv")
    assert r.status_code == 200, r.text
    assert "a1" in model_ids(srv) and model_ids(srv)["a1"]["parent"] == BASE
    assert greedy(srv, "a1", PROMPT)[:2] == reference("qv", PROMPT)[:2]
    # Absolute path inside the root.
    r = load(srv, "a2", lora_dir / "all")
    assert r.status_code == 200, r.text
    assert greedy(srv, "a2", PROMPT)[:2] == reference("all", PROMPT)[:2]

    def expect(resp, status, param=None):
        assert resp.status_code == status, (resp.status_code, resp.text)
        e = resp.json()["error"]
        assert e["code"] == status
        if param is not None:
            assert e["param"] == param, e

    expect(load(srv, "a1", "mlp"), 400, "lora_name")          # exists
    expect(load(srv, BASE, "mlp"), 400, "lora_name")          # the base model's name
    expect(load(srv, "a b/c", "mlp"), 400, "lora_name")       # not a valid name
    expect(load(srv, "a3", "missing"), 404, "lora_path")      # no such path
    expect(load(srv, "a3", lora_dir / "missing"), 404, "lora_path")
    expect(load(srv, "a4", "../outside/qv_copy"), 400, "lora_path")
    expect(load(srv, "a4", "qv/../mlp"), 400, "lora_path")
    expect(load(srv, "a5", "evil"), 400, "lora_path")         # symlink inside → outside
    expect(load(srv, "a6", tmp_path / "outside" / "qv_copy"), 400, "lora_path")  # abs outside
    expect(load(srv, "a6", "/etc"), 400, "lora_path")
    expect(load(srv, "a6", "/etc/passwd"), 400, "lora_path")
    expect(load(srv, "a6", "/etc/no-such-file"), 400, "lora_path")  # not 404: no probing
    expect(load(srv, "a7", "."), 400, "lora_path")            # the root itself
    expect(load(srv, "a8", "junk"), 404, "lora_path")         # a folder with no adapter (vLLM)
    expect(load(srv, "a8", "broken"), 400, "lora_path")       # an adapter that does not load
    # A config without its tensors: 400 as vLLM ("doesn't contain tensors"), as on demand (it
    # was 404, the answer for a folder or config that is not there).
    r = load(srv, "a8", "noweights")
    expect(r, 400, "lora_path")
    assert r.json()["error"]["type"] == "BadRequestError", r.text
    assert "no adapter_model.safetensors" in r.json()["error"]["message"], r.text
    expect(srv.post("/v1/load_lora_adapter", {"lora_name": "a9"}), 400, "lora_path")
    expect(srv.post("/v1/load_lora_adapter", {"lora_name": "a9", "lora_path": "qv", "x": 1}),
           400, "x")
    # A huge unknown key is quoted by its first 40 bytes, not echoed whole (param and message).
    r = srv.post("/v1/load_lora_adapter", {"lora_name": "a9", "lora_path": "qv", "k" * 100000: 1})
    expect(r, 400)
    assert len(r.text) < 1000 and r.json()["error"]["param"].startswith("k" * 40 + "..."), r.text[:300]
    ids = model_ids(srv)
    # ('broken' is listed anyway: a --lora-dir sub-folder a request may name, answered 400.)
    for name in ("a3", "a4", "a5", "a6", "a7", "a8", "a9", "evil", "junk"):
        assert name not in ids, f"{name} was registered by a failed load"
    # Unload.
    r = unload(srv, "a1")
    assert r.status_code == 200, r.text
    assert "a1" not in model_ids(srv)
    expect(unload(srv, "a1"), 404)
    expect(unload(srv, "never-loaded"), 404)
    # vLLM's lora_int_id: an integer or null (unused); anything else is refused by name.
    expect(srv.post("/v1/unload_lora_adapter", {"lora_name": "a2", "lora_int_id": "7"}), 400, "lora_int_id")
    assert "a2" in model_ids(srv)
    with pytest.raises(openai.NotFoundError):
        srv.client().completions.create(model="a1", prompt="x", max_tokens=2)
    # The name can be loaded again, now with other weights.
    assert load(srv, "a1", "mlp").status_code == 200
    assert greedy(srv, "a1", PROMPT)[:2] == reference("mlp", PROMPT)[:2]
    # a2 was untouched by all of this.
    assert greedy(srv, "a2", PROMPT)[:2] == reference("all", PROMPT)[:2]


def test_load_unload_while_streaming(start_server, long_dir, lora_dir, reference):
    # The long-context copy of the same weights, under the base's name: its streams can run for
    # seconds, so "unloaded while a stream on it runs" holds whatever the machine's speed.
    srv = start_server(long_dir, ["--lora-dir", str(lora_dir), "--allow-runtime-lora",
                                  "--lora", f"qv={lora_dir / 'qv'}", "--served-model-name", BASE,
                                  "--max-num-seqs", "8"])
    refs = {m: reference(m, PROMPT, 64) for m in ("qv", "mlp", BASE, "all", "embed")}
    # 1000 tokens of 'all' alone, under a name never unloaded: what an unloaded stream must go on
    # producing (most of them after the unload, whatever the machine's speed).
    assert load(srv, "keep", "all").status_code == 200
    keep = greedy(srv, "keep", PROMPT, 1000)[0]
    stop = threading.Event()
    failures, done = [], []

    def traffic(model):
        n = 0
        while not stop.is_set() and n < 200:
            n += 1
            try:
                got = greedy(srv, model, PROMPT, 64, stream=True)
            except Exception as e:  # noqa: BLE001 — every failure is reported
                failures.append(f"{model}: {type(e).__name__}: {e}")
                continue
            if got[:2] != refs[model][:2] or got[2] != "length":
                failures.append(f"{model}: output differs from its solo run")
            done.append(model)

    threads = [threading.Thread(target=traffic, args=(m,), daemon=True)
               for m in ("qv", "mlp", BASE, "qv")]
    for t in threads:
        t.start()
    try:
        for i in range(4):
            name = f"tmp{i}"
            r = load(srv, name, "all")
            assert r.status_code == 200, r.text
            assert greedy(srv, name, PROMPT, 64)[:2] == refs["all"][:2]
            # Unload while a stream on it is running (15000 tokens: seconds): the stream goes on
            # with its weights, its first 1000 tokens those of 'all' alone.
            kw = dict(model=name, prompt=PROMPT, max_tokens=15000, temperature=0, stream=True,
                      extra_body={"return_token_ids": True, "ignore_eos": True})
            stream = srv.client().completions.create(**kw)
            it = iter(stream)
            ids = []
            while not ids:
                ids += next(it).choices[0].token_ids or []
            r = unload(srv, name)
            assert r.status_code == 200, r.text
            running = srv.metrics()["vllm:lora_requests_info"].samples[0].labels
            assert name in running["running_lora_adapters"].split(","), \
                f"the stream on {name} was not running after the unload: {running}"
            for ch in it:
                for c in ch.choices:
                    ids += c.token_ids or []
                if len(ids) >= 1000:
                    break
            stream.close()
            assert ids[:64] == refs["all"][0] and ids[:1000] == keep, \
                "a stream changed output when its adapter was unloaded"
            with pytest.raises(openai.NotFoundError):
                srv.client().completions.create(model=name, prompt="x", max_tokens=1)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert not failures, f"{len(failures)} traffic requests failed: {failures[:10]}"
    assert len(done) >= 8, f"too little traffic ran alongside ({len(done)} requests)"
    # The closed streams' sequences are aborted as the engine gets to them.
    wait_until(lambda: srv.metric("vllm:num_requests_running") == 0, 30, what="nothing running")


def greedy_retrying(srv, model, prompt, tries=600):
    """greedy(), sent again after each 503 (Retry-After: the store had no adapter to evict)."""
    for _ in range(tries):
        try:
            return greedy(srv, model, prompt)
        except openai.APIStatusError as e:
            if e.status_code != 503:
                raise
            assert e.response.headers.get("retry-after") == "1", e.response.headers
            time.sleep(0.05)
    raise AssertionError(f"{model}: still 503 after {tries} tries")


def test_eviction_with_max_cpu_loras(start_server, llama_dir, lora_dir, reference):
    srv = start_server(llama_dir, ["--lora-dir", str(lora_dir), "--max-cpu-loras", "2"])
    names = list(ADAPTERS)  # 4 adapters, at most 2 kept loaded
    ev0 = srv.metric("loom_adapter_evictions_total")
    for rnd in range(2):
        for name in names:
            got = greedy(srv, name, PROMPT)
            assert got[:2] == reference(name, PROMPT)[:2], f"round {rnd}: {name} wrong"
            assert srv.metric("loom_adapters_resident") <= 2
    evictions = srv.metric("loom_adapter_evictions_total") - ev0
    assert evictions >= 6, f"8 uses of 4 adapters through 2 slots evicted only {evictions}"
    assert srv.metric("loom_adapter_loads_total") >= 8
    # Evicted adapters can still be named.
    assert set(names) <= set(model_ids(srv))
    # Concurrently: leased adapters are pinned (a request needing a third while two are held is
    # told to retry), every answer still right.
    jobs = [(n, p) for n in names for p in (PROMPT, "Hi there")] * 3
    with ThreadPoolExecutor(12) as pool:
        outs = list(pool.map(lambda j: (j, greedy_retrying(srv, j[0], j[1])), jobs, timeout=120))
    for (name, prompt), got in outs:
        assert got[:2] == reference(name, prompt)[:2], f"{name} {prompt!r} wrong under eviction"
    assert srv.metric("loom_adapter_evictions_total") - ev0 > evictions
    assert srv.metric("loom_adapters_resident") <= 2


def test_loads_past_max_cpu_loras_while_every_adapter_is_leased_are_refused(
        start_server, long_dir, lora_dir, reference):
    # 12 requests on 3 adapters with room for 1 (and 1 more, --max-loras, while requests hold
    # them), queued behind a long base stream (--max-num-seqs 1): each waiting request holds its
    # adapter's lease, so once two adapters are held no other can be loaded: those requests, and
    # the load endpoint, get 503 with Retry-After naming the adapter and the flag (they loaded
    # past the bound before: 3 resident against 1, ~576 against 64 on a server with a large
    # queue). long_dir: the same weights, a long context.
    srv = start_server(long_dir, ["--lora-dir", str(lora_dir), "--max-cpu-loras", "1",
                                  "--max-loras", "1", "--max-num-seqs", "1",
                                  "--allow-runtime-lora", "--served-model-name", BASE])
    blocker = Blocker(srv, BASE)
    names = list(ADAPTERS)[:3]
    jobs = [n for n in names for _ in range(4)]

    def attempt(name):
        try:
            return greedy(srv, name, PROMPT)
        except openai.APIStatusError as e:
            return e

    with ThreadPoolExecutor(12) as pool:
        futures = [(n, pool.submit(attempt, n)) for n in jobs]
        # Two adapters' 8 requests wait behind the blocker (the first two loaded); the other 4
        # are answered at once.
        wait_until(lambda: sum(f.done() for _, f in futures) >= 4, 30, 0.01, "4 requests refused")
        time.sleep(0.2)
        refused = [(n, f.result()) for n, f in futures if f.done()]
        assert len(refused) == 4, refused
        for n, e in refused:
            assert isinstance(e, openai.APIStatusError) and e.status_code == 503, (n, e)
            assert e.response.headers.get("retry-after") == "1", e.response.headers
            message = e.body["message"]
            assert f"adapter '{n}' cannot be loaded" in message and "--max-cpu-loras 1" in message, message
        served = {n for n, f in futures if not f.done()}
        assert len(served) == 2 and not served & {n for n, _ in refused}, (served, refused)
        assert srv.metric("loom_adapters_resident") == 2
        # The load endpoint is refused alike.
        r = load(srv, "z", "mlp")
        assert r.status_code == 503 and r.headers.get("Retry-After") == "1", r.text
        assert "adapter 'z' cannot be loaded" in r.json()["error"]["message"], r.text
        blocker.close()
        outs = [(n, f.result(timeout=120)) for n, f in futures if n in served]
    for name, got in outs:
        assert got[:2] == reference(name, PROMPT)[:2], name
    wait_until(lambda: srv.metric("vllm:num_requests_running") == 0, 30, what="nothing running")
    # Once the leases are gone, the refused ones load (evicting the one that was held).
    for name, _ in refused[:2]:
        assert greedy(srv, name, PROMPT)[:2] == reference(name, PROMPT)[:2], name
        assert srv.metric("loom_adapters_resident") == 1


def test_unload_while_queued(start_server, long_dir, lora_dir, reference):
    # --max-num-seqs 1: a long base stream runs; a request on adapter 'u' waits in the queue;
    # 'u' is unloaded meanwhile. The queued request still runs on the weights it was admitted
    # with once the stream is closed.
    # long_dir: the same weights with a long context, so the blocker runs for seconds.
    srv = start_server(long_dir, ["--lora-dir", str(lora_dir), "--allow-runtime-lora",
                                  "--max-num-seqs", "1"])
    assert load(srv, "u", "mlp").status_code == 200
    blocker = Blocker(srv, "llama_long")
    result = {}

    def queued():
        result["got"] = greedy(srv, "u", PROMPT)

    t = threading.Thread(target=queued, daemon=True)
    t.start()
    deadline = time.monotonic() + 10
    while srv.metric("vllm:num_requests_waiting") < 1:
        assert time.monotonic() < deadline, "the adapter request never queued"
        time.sleep(0.02)
    assert unload(srv, "u").status_code == 200
    blocker.close()
    t.join(60)
    assert result.get("got", (None,))[:2] == reference("mlp", PROMPT)[:2]


def test_reload_with_changed_files_is_a_new_adapter(start_server, llama_dir, lora_dir,
                                                    reference):
    # Same name, same folder, new files: the new weights must be used, never cached prefixes
    # (KV blocks) computed with the old ones.
    srv = start_server(llama_dir, ["--lora-dir", str(lora_dir), "--allow-runtime-lora"])
    swap = lora_dir / "swap"
    shutil.copytree(lora_dir / "qv", swap)
    long_prompt = "A prompt long enough to fill several KV blocks of sixteen tokens each. " * 2
    assert load(srv, "s", "swap").status_code == 200
    assert greedy(srv, "s", long_prompt)[:2] == reference("qv", long_prompt)[:2]
    assert unload(srv, "s").status_code == 200
    shutil.rmtree(swap)
    shutil.copytree(lora_dir / "all", swap)
    assert load(srv, "s", "swap").status_code == 200
    assert greedy(srv, "s", long_prompt)[:2] == reference("all", long_prompt)[:2]
    # And the base, run on the same prompt after the adapters, is the base.
    assert greedy(srv, BASE, long_prompt)[:2] == reference(BASE, long_prompt)[:2]


def test_load_inplace_and_the_gateway_syncers_body(start_server, llama_dir, lora_dir, reference):
    # The Gateway API Inference Extension's LoRA syncer sends base_model_name (vLLM ignores it);
    # load_inplace replaces the adapter under a name (vLLM's), prefixes cached with the old
    # weights never serve the new ones, and a replacement that does not validate keeps the old.
    srv = start_server(llama_dir, ["--lora-dir", str(lora_dir), "--allow-runtime-lora"])
    long_prompt = "A prompt long enough to fill several KV blocks of sixteen tokens each. " * 2
    r = srv.post("/v1/load_lora_adapter", {"lora_name": "g", "lora_path": str(lora_dir / "qv"),
                                           "base_model_name": "meta-llama/Llama-3.1-8B"})
    assert r.status_code == 200, r.text
    assert greedy(srv, "g", long_prompt)[:2] == reference("qv", long_prompt)[:2]
    assert load(srv, "g", lora_dir / "all").status_code == 400  # taken, without load_inplace
    r = srv.post("/v1/load_lora_adapter", {"lora_name": "g", "lora_path": str(lora_dir / "all"),
                                           "load_inplace": True})
    assert r.status_code == 200, r.text
    assert greedy(srv, "g", long_prompt)[:2] == reference("all", long_prompt)[:2]
    r = srv.post("/v1/load_lora_adapter", {"lora_name": "g", "lora_path": str(lora_dir / "broken"),
                                           "load_inplace": True})
    assert r.status_code == 400, r.text
    assert greedy(srv, "g", long_prompt)[:2] == reference("all", long_prompt)[:2]
    for body, param in (({"load_inplace": "yes"}, "load_inplace"),
                        ({"base_model_name": 3}, "base_model_name")):
        r = srv.post("/v1/load_lora_adapter", {"lora_name": "h", "lora_path": str(lora_dir / "qv"),
                                               **body})
        assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


def test_prefix_cache_not_shared_across_adapters(start_server, llama_dir, reference):
    # The same long prompt on the base, then on each adapter, on one server: each answer equals
    # the one from a server that saw only that model (the shared `reference` server).
    from conftest import adapter_args
    srv = start_server(llama_dir, adapter_args())
    long_prompt = "Shared prefix across models, long enough for a few full KV blocks. " * 2
    hits0 = srv.metric("vllm:prefix_cache_hits_total")
    for model in [BASE] + list(ADAPTERS) + [BASE]:
        assert greedy(srv, model, long_prompt)[:2] == reference(model, long_prompt)[:2], model
    # The second base run could reuse the first one's blocks.
    assert srv.metric("vllm:prefix_cache_hits_total") > hits0, "no prefix cache hit at all"


def test_concurrent_loads_of_one_name(start_server, llama_dir, lora_dir):
    srv = start_server(llama_dir, ["--lora-dir", str(lora_dir), "--allow-runtime-lora"])
    paths = ["qv", "mlp", "all", "embed"] * 2
    with ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(lambda p: load(srv, "race", p).status_code, paths, timeout=60))
    assert sorted(codes) == [200] + [400] * 7, codes
    assert "race" in model_ids(srv)
    assert greedy(srv, "race", PROMPT)[2] == "length"


def test_files_changed_under_a_served_adapter_change_nothing(start_server, llama_dir, lora_dir,
                                                            reference):
    # The adapter's tensors were a mapping of its file: truncating it (the first step of a `cp`
    # over it) killed the server with SIGBUS, and rewriting it in place changed the weights
    # under the same identity. They are read into memory now.
    srv = start_server(llama_dir, ["--lora-dir", str(lora_dir)])
    assert greedy(srv, "qv", PROMPT)[:2] == reference("qv", PROMPT)[:2]
    f = lora_dir / "qv" / "adapter_model.safetensors"
    size = f.stat().st_size
    with open(f, "r+b") as h:
        h.seek(size // 2)
        h.write(b"\0" * (size - size // 2))  # the tensors' data zeroed in place
    assert greedy(srv, "qv", PROMPT)[:2] == reference("qv", PROMPT)[:2]
    os.truncate(f, 4096)
    assert greedy(srv, "qv", PROMPT)[:2] == reference("qv", PROMPT)[:2]
    assert srv.get("/health").status_code == 200


def test_adapter_files_linked_out_of_the_root_are_refused(start_server, llama_dir, lora_dir,
                                                          tmp_path):
    # The folder's confinement did not cover its files: a symlinked adapter_model.safetensors was
    # served from outside the root, and a config linked to another file was read (its bytes
    # quoted in the error).
    srv = start_server(llama_dir, ["--lora-dir", str(lora_dir), "--allow-runtime-lora"])
    linked = lora_dir / "linked"
    linked.mkdir()
    shutil.copy(lora_dir / "qv" / "adapter_config.json", linked / "adapter_config.json")
    (linked / "adapter_model.safetensors").symlink_to(tmp_path / "outside" / "qv_copy" /
                                                      "adapter_model.safetensors")
    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0")
    cfg = lora_dir / "cfglink"
    cfg.mkdir()
    shutil.copy(lora_dir / "qv" / "adapter_model.safetensors", cfg / "adapter_model.safetensors")
    (cfg / "adapter_config.json").symlink_to(secret)
    for name in ("linked", "cfglink"):
        with pytest.raises(openai.BadRequestError) as exc:
            srv.client().completions.create(model=name, prompt="x", max_tokens=2)
        assert "symbolic link out of the --lora-dir root" in str(exc.value), name
        assert "root:x" not in str(exc.value)
        r = load(srv, name + "2", name)
        assert r.status_code == 400 and "symbolic link out of" in r.text, r.text
    assert "linked" not in model_ids(srv) and "cfglink2" not in model_ids(srv)
    # A NUL in lora_path named another folder (the path up to it).
    r = load(srv, "n", "qv\u0000zz")
    assert r.status_code == 400 and "NUL" in r.text, r.text


def test_registered_adapter_whose_folder_vanished(start_server, llama_dir, lora_dir):
    # Evicted, then its folder removed: still listed, so "the model does not exist" (404) was
    # wrong; the error says the reload failed and what to do.
    srv = start_server(llama_dir, ["--lora-dir", str(lora_dir), "--allow-runtime-lora",
                                   "--max-cpu-loras", "1"])
    shutil.copytree(lora_dir / "qv", lora_dir / "gone")
    assert load(srv, "g", "gone").status_code == 200
    greedy(srv, "mlp", PROMPT)  # loads mlp on demand: g (unleased) is evicted
    shutil.rmtree(lora_dir / "gone")
    assert "g" in model_ids(srv)
    with pytest.raises(openai.BadRequestError) as exc:
        srv.client().completions.create(model="g", prompt="x", max_tokens=2)
    assert "is registered, but reloading it failed" in str(exc.value)
    assert exc.value.body["param"] == "model"
    assert unload(srv, "g").status_code == 200


def test_adapter_names_are_bounded(start_server, llama_dir, lora_dir):
    # --max-lora-names: every name is kept (and listed) after its weights are evicted, so names
    # are bounded: a new one past the bound is 400 naming the flag (param lora_name) unless a
    # --lora-dir name not in memory can be forgotten for it; an unload makes room.
    srv = start_server(llama_dir, ["--lora-dir", str(lora_dir), "--allow-runtime-lora",
                                   "--max-lora-names", "2", "--max-cpu-loras", "1"])
    assert load(srv, "n1", "qv").status_code == 200
    assert load(srv, "n2", "mlp").status_code == 200
    r = load(srv, "n3", "all")
    assert r.status_code == 400 and "--max-lora-names" in r.text, r.text
    assert r.json()["error"]["param"] == "lora_name"
    with pytest.raises(openai.BadRequestError) as exc:  # an on-demand name counts too
        srv.client().completions.create(model="embed", prompt="x", max_tokens=2)
    assert exc.value.body["param"] == "model" and "--max-lora-names" in exc.value.body["message"]
    assert set(model_ids(srv)) == {BASE, "n1", "n2"}
    assert unload(srv, "n1").status_code == 200
    greedy(srv, "embed", PROMPT)  # on demand: n2 evicted
    greedy(srv, "n2", PROMPT)     # embed evicted: forgotten for the next new name
    assert load(srv, "n3", "all").status_code == 200
    assert set(model_ids(srv)) == {BASE, "n2", "n3"}


def test_on_demand_adapter_whose_folder_vanished(start_server, llama_dir, lora_dir):
    # A --lora-dir name evicted, then its sub-folder removed: forgotten at its next use, so it
    # leaves /v1/models and is 404 as any unknown name (a registered one stays: test above).
    srv = start_server(llama_dir, ["--lora-dir", str(lora_dir), "--max-cpu-loras", "1"])
    shutil.copytree(lora_dir / "qv", lora_dir / "went")
    greedy(srv, "went", PROMPT)
    greedy(srv, "mlp", PROMPT)  # went (unleased) is evicted
    shutil.rmtree(lora_dir / "went")
    assert "went" in model_ids(srv)
    with pytest.raises(openai.NotFoundError) as exc:
        srv.client().completions.create(model="went", prompt="x", max_tokens=2)
    assert exc.value.body["param"] == "model"
    assert "went" not in model_ids(srv)
